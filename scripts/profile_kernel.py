#!/usr/bin/env python3
"""Where a workload's time goes on the kernel backend: requests per opcode and daemon time per request.

Mounts SRC at MNT with SparseFS's kernel backend in a child process whose
``Session._answer`` is wrapped to count requests and time each one per opcode
(handler + reply write; the kernel round trip and the reader's wait are not in
it). The parent runs a shell command once after ``drop_caches`` (cold), then
``--reps`` times (warm), and prints, for every run, its wall time, the daemon's
CPU time (/proc utime+stime) and the per-opcode counts and mean µs.

    .venv/bin/python scripts/profile_kernel.py /tmp/sparsefs-bench/data-…/src /tmp/prof-mnt \\
        --cwd small --cmd 'find . -type f -exec cat {} +'

The daemon runs a snapshot of ``--code`` (default HEAD: the committed
sparsefs/readers/gate, extracted as bench_fuse.py does), not the live tree, so
edits in progress are not measured; ``--code worktree`` runs the live tree.

``--experiment A,B`` changes the backend *in the child only*, to measure an
idea before anyone implements it; nothing under sparsefs/ is touched:
  noplus    INIT without DO_READDIRPLUS/READDIRPLUS_AUTO: listings are plain READDIR (names only),
            attributes come from LOOKUP/GETATTR and stay cached for the entry/attr timeout
(``readbuf`` and ``cachedir`` are built in now: refused.) ``--cprofile FILE`` writes the
reader threads' cProfile stats (``python -m pstats FILE``) when the mount ends.
Needs root.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_fuse import BENCH_ROOT, code_version, use_snapshot

REPO = Path(__file__).resolve().parents[1]
VENV_PY = REPO / ".venv" / "bin" / "python"
OPNAMES = [
    "LOOKUP", "FORGET", "GETATTR", "SETATTR", "READLINK", "SYMLINK", "MKNOD", "MKDIR", "UNLINK", "RMDIR", "RENAME",
    "LINK", "OPEN", "READ", "WRITE", "STATFS", "RELEASE", "FSYNC", "SETXATTR", "GETXATTR", "LISTXATTR",
    "REMOVEXATTR", "FLUSH", "INIT", "OPENDIR", "READDIR", "RELEASEDIR", "FSYNCDIR", "GETLK", "SETLK", "SETLKW",
    "ACCESS", "CREATE", "INTERRUPT", "BMAP", "DESTROY", "IOCTL", "POLL", "NOTIFY_REPLY", "BATCH_FORGET",
    "FALLOCATE", "READDIRPLUS", "RENAME2", "LSEEK", "COPY_FILE_RANGE", "SYNCFS", "TMPFILE", "STATX",
]
FOPEN_CACHE_DIR = 1 << 3
# --open-loop: per-file latency seen by the caller (every file under the cwd, listed once, then 3 passes each)
OPEN_LOOP = r"""
import os, statistics, sys, time
files = sorted(os.path.join(d, n) for d, _, names in os.walk(".") for n in names)
def read_one(p):
    fd = os.open(p, os.O_RDONLY)
    os.fstat(fd); os.read(fd, 65536); os.close(fd)
tests = (("open+close", lambda p: os.close(os.open(p, os.O_RDONLY))), ("open+fstat+read+close", read_one),
         ("stat", os.stat))
for label, body in tests:
    per = []
    for _ in range(3):
        t = time.perf_counter_ns()
        for p in files:
            body(p)
        per.append((time.perf_counter_ns() - t) / len(files) / 1000)
    print(f"    {label}: {statistics.median(per):.1f} µs per file "
          f"(passes {min(per):.1f}-{max(per):.1f}), {len(files)} files")
"""


# ---------------------------------------------------------------- child ---------
def serve(src: str, mnt: str, stats_file: str, readers: int, experiment: str | None, watch: bool,
          cprofile: str | None = None) -> int:
    from sparsefs.app.daemon import MountPlan, run
    from sparsefs.fuse.kernel import dispatch
    from sparsefs.fuse.kernel import proto as k
    from sparsefs.fuse.kernel import session as fuse_kernel

    names = {getattr(k, n): n for n in OPNAMES if hasattr(k, n)}
    lock = threading.Lock()
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    original = dispatch.Dispatcher.answer

    def answer(self: dispatch.Dispatcher, fd: int, request: k.Request) -> None:
        start = time.perf_counter_ns()
        original(self, fd, request)
        spent = time.perf_counter_ns() - start
        with lock:
            entry = counts[names.get(request.opcode, str(request.opcode))]
            entry[0] += 1
            entry[1] += spent

    dispatch.Dispatcher.answer = answer  # type: ignore[method-assign]
    if cprofile:
        profile_readers(fuse_kernel, cprofile)

    experiments = set(filter(None, (experiment or "").split(",")))
    built_in = experiments & {"cachedir", "readbuf"}
    if built_in:
        raise SystemExit(f"experiment {built_in}: built in now (issue 19: listings cached without OPENDIR; "
                         "ec812d3: requests read into a reused buffer)")
    if "noplus" in experiments:
        fuse_kernel.WANTED &= ~(k.DO_READDIRPLUS | k.READDIRPLUS_AUTO)
    unknown = experiments - {"noplus"}
    if unknown:
        raise SystemExit(f"unknown experiment {unknown}")

    def dump(signum: int, frame: object) -> None:
        with lock:
            snapshot = {name: list(v) for name, v in counts.items()}
            counts.clear()
        tmp = stats_file + ".tmp"
        Path(tmp).write_text(json.dumps(snapshot))
        os.replace(tmp, stats_file)

    signal.signal(signal.SIGUSR1, dump)
    state = Path(stats_file).parent / "state"
    state.mkdir(exist_ok=True)
    plan = MountPlan(Path(src), Path(mnt), state, watch=watch, backend="kernel", readers=readers)
    return run(plan)  # the daemon's own run(): the patches above live on the classes it uses


def profile_readers(fuse_kernel: Any, out: str) -> None:
    """cProfile every reader thread (where plain requests are answered); the stats go to ``out`` at exit."""
    import cProfile

    profiles: list[cProfile.Profile] = []
    plain = fuse_kernel.Session._reader

    def reader(self: Any, fd: int) -> None:
        profile = cProfile.Profile()
        profiles.append(profile)
        profile.runcall(plain, self, fd)

    fuse_kernel.Session._reader = reader

    def save() -> None:
        import pstats

        if profiles:
            merged = pstats.Stats(profiles[0])
            for extra in profiles[1:]:
                merged.add(extra)
            merged.dump_stats(out)

    atexit.register(save)


# ---------------------------------------------------------------- parent --------
def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def mounted(mnt: str) -> bool:
    return any(line.split()[4] == mnt for line in Path("/proc/self/mountinfo").read_text().splitlines())


def drop_caches() -> None:
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")
    time.sleep(0.2)


def collect(pid: int, stats_file: Path) -> dict[str, list[int]]:
    stats_file.unlink(missing_ok=True)
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + 5
    while not stats_file.exists():
        if time.monotonic() > deadline:
            raise RuntimeError("the daemon did not dump its counters")
        time.sleep(0.01)
    counts: dict[str, list[int]] = json.loads(stats_file.read_text())
    return counts


def show(label: str, wall: float, cpu_s: float, counts: dict[str, list[int]]) -> None:
    total = sum(n for n, _ in counts.values())
    busy = sum(ns for _, ns in counts.values()) / 1e9
    print(f"{label}: wall {wall * 1000:.1f} ms, daemon CPU {cpu_s * 1000:.0f} ms, {total} requests, "
          f"{busy * 1000:.1f} ms inside handlers")
    for name, (n, ns) in sorted(counts.items(), key=lambda kv: -kv[1][1]):
        print(f"    {name:13s} {n:7d} × {ns / n / 1000:7.1f} µs = {ns / 1e6:7.1f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("src")
    parser.add_argument("mnt")
    parser.add_argument("--cmd", default="find . -type f -exec cat {} +")
    parser.add_argument("--cwd", default=".", help="relative to the mount")
    parser.add_argument("--open-loop", action="store_true",
                        help="instead of --cmd: time open+close, open+fstat+read+close and stat of every file under "
                             "--cwd from a Python loop (3 passes each)")
    parser.add_argument("--native", action="store_true", help="with --open-loop: also run the loop on SRC/--cwd")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--readers", type=int, default=1)
    parser.add_argument("--experiment", help="comma list: noplus")
    parser.add_argument("--cprofile", help="write the reader threads' cProfile stats to this file at unmount")
    parser.add_argument("--no-watch", action="store_true")
    parser.add_argument("--code", default="HEAD",
                        help="git revision whose sparsefs/readers/gate the daemon runs (snapshot; default HEAD), "
                             "or 'worktree' for the live tree")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--stats-file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    src, mnt = os.path.abspath(args.src), os.path.abspath(args.mnt)
    if args.serve:
        return serve(src, mnt, args.stats_file, args.readers, args.experiment, not args.no_watch, args.cprofile)
    if args.open_loop:
        args.cmd = shlex.join([str(VENV_PY), "-c", OPEN_LOOP])
    if args.open_loop and args.native:
        print(f"native ({os.path.join(src, args.cwd)}):", flush=True)
        subprocess.run(args.cmd, shell=True, cwd=os.path.join(src, args.cwd), check=False)

    if args.code == "worktree":
        code = code_version()
    else:
        BENCH_ROOT.mkdir(parents=True, exist_ok=True)
        code = use_snapshot(args.code)  # sets PYTHONPATH for the child
    work = Path(f"/tmp/sparsefs-profile-{os.getpid()}")
    work.mkdir()
    stats_file = work / "counts.json"
    os.makedirs(mnt, exist_ok=True)
    child_cmd = [str(VENV_PY), __file__, src, mnt, "--serve", "--stats-file", str(stats_file),
                 "--readers", str(args.readers)]
    if args.experiment:
        child_cmd += ["--experiment", args.experiment]
    if args.no_watch:
        child_cmd.append("--no-watch")
    if args.cprofile:
        child_cmd += ["--cprofile", os.path.abspath(args.cprofile)]
    with open(work / "daemon.log", "wb") as log:
        child = subprocess.Popen(child_cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                 start_new_session=True, cwd=REPO)
    try:
        deadline = time.monotonic() + 20
        while not mounted(mnt):
            if child.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"mount failed; see {work / 'daemon.log'}")
            time.sleep(0.02)
        os.stat(mnt)
        cwd = os.path.join(mnt, args.cwd)
        print(f"{shlex.join(sys.argv)}\ncommand: {args.cmd} (in {cwd}); readers {args.readers}; "
              f"experiment {args.experiment or 'none'}; code {code}")
        tick = os.sysconf("SC_CLK_TCK")
        for rep in range(args.reps + 1):
            if rep == 0:
                drop_caches()
            collect(child.pid, stats_file)
            cpu0 = cpu_ticks(child.pid)
            start = time.perf_counter()
            ran = subprocess.run(args.cmd, shell=True, cwd=cwd, check=False,
                                 stdout=subprocess.PIPE if args.open_loop else subprocess.DEVNULL, text=True)
            wall = time.perf_counter() - start
            time.sleep(0.05)  # let async RELEASE/FORGET land in this run's counts
            counts = collect(child.pid, stats_file)
            show("cold" if rep == 0 else f"warm {rep}", wall, (cpu_ticks(child.pid) - cpu0) / tick, counts)
            if args.open_loop:
                print(ran.stdout, end="", flush=True)
    finally:
        subprocess.run(["fusermount3", "-u", mnt], check=False, capture_output=True)
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
