"""Seeing another host's changes on a source inotify is blind to: on-access checks vs watchdog's polling observer.

A tree of FILES files in DIRS folders on the FUSE stand-in for a network filesystem (tests/remotefs.py: a
passthrough whose backing folder is changed "by another host", attributes cached 1 s as an NFS client
does). Measured, interleaved over ROUNDS rounds, medians:

* on-access (what SparseFS does, ``sparsefs mount`` of the stand-in): open+read+close of a small file
  through the mount and on the stand-in directly (the mount's cost over a FUSE source: mostly the second
  FUSE hop), the one lstat the check adds per open, and how long after a change in the backing folder a
  read through the mount returns it;
* watchdog's PollingObserver on the same tree (what the design card's watcher would use): CPU seconds per
  second and resident memory of a process running it, the stat calls it makes per scan (one per entry:
  on NFS, attribute requests to the server), and how long it takes to report the change.

Usage:
  .venv/bin/python scripts/bench_remote.py [--files 10000] [--dirs 100] [--rounds 5] [--backend kernel]
  (needs watchdog: pip install watchdog; it is not a SparseFS dependency)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sparsefs.fuse import mounts  # noqa: E402
from tests import mountutil  # noqa: E402

REMOTEFS = ROOT / "tests" / "remotefs.py"
POLLER = r"""
import os, resource, sys, time, threading
from watchdog.observers.polling import PollingObserver
from watchdog.events import FileSystemEventHandler
path, marker, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
seen = threading.Event()
class Handler(FileSystemEventHandler):
    def on_any_event(self, event):
        if event.src_path.endswith(marker):
            seen.set()
observer = PollingObserver(timeout=1.0)
observer.schedule(Handler(), path, recursive=True)
observer.start()
time.sleep(2.5)  # first snapshot taken
usage = resource.getrusage(resource.RUSAGE_SELF)
cpu0, t0 = usage.ru_utime + usage.ru_stime, time.monotonic()
print("ready", flush=True)
sys.stdin.readline()  # the parent changed the marker file
changed = time.monotonic()
seen.wait(60)
latency = time.monotonic() - changed
time.sleep(max(0.0, seconds - (time.monotonic() - t0)))
usage = resource.getrusage(resource.RUSAGE_SELF)
cpu = (usage.ru_utime + usage.ru_stime - cpu0) / (time.monotonic() - t0)
rss = int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") >> 20
print(f"{latency:.3f} {cpu:.3f} {rss}", flush=True)
observer.stop()
"""


def make_tree(backing: Path, files: int, dirs: int) -> None:
    for d in range(dirs):
        (backing / f"d{d:03d}").mkdir(parents=True)
        for f in range(files // dirs):
            (backing / f"d{d:03d}" / f"f{f:04d}.txt").write_text(f"file {d} {f}\n")


def mount_remote(backing: Path, at: Path) -> subprocess.Popen[bytes]:
    process = subprocess.Popen([sys.executable, str(REMOTEFS), str(backing), str(at)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    if not mountutil.wait_for(lambda: (e := mounts.find_mount(at)) is not None and e.fstype == "fuse.remotefs", 20):
        raise RuntimeError("stand-in did not mount")
    return process


def open_read_s(path: Path, count: int = 200) -> float:
    started = time.perf_counter()
    for _ in range(count):
        with open(path, "rb") as f:
            f.read()
    return (time.perf_counter() - started) / count


def lstat_s(path: Path, count: int = 200) -> float:
    """What the on-access check adds to an open: one lstat of the file on the share."""
    started = time.perf_counter()
    for _ in range(count):
        os.lstat(path)
    return (time.perf_counter() - started) / count


def change_seen_s(backing_file: Path, mnt_file: Path, n: int) -> float:
    """Rewrite the file in the backing folder; seconds until a read through ``mnt_file`` returns it."""
    text = f"changed {n:06d}\n"
    started = time.monotonic()
    backing_file.write_text(text)
    while mnt_file.read_text() != text:
        time.sleep(0.01)
        if time.monotonic() - started > 30:
            return float("inf")
    return time.monotonic() - started


def poll_once(share: Path, backing: Path, n: int) -> tuple[float, float, int]:
    marker = f"marker{n}.txt"
    poller = subprocess.Popen([sys.executable, "-c", POLLER, str(share), marker, "10"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert poller.stdin is not None and poller.stdout is not None
    assert poller.stdout.readline().strip() == "ready"
    (backing / "d000" / marker).write_text("new\n")
    poller.stdin.write("go\n")
    poller.stdin.flush()
    latency, cpu, rss = poller.stdout.readline().split()
    poller.wait(timeout=30)
    return float(latency), float(cpu), int(rss)


def run(files: int, dirs: int, rounds: int, backend: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-remote-") as base_name:
        base = Path(base_name)
        backing, share, mnt = base / "backing", base / "share", base / "mnt"
        make_tree(backing, files, dirs)
        share.mkdir()
        mnt.mkdir()
        remote = mount_remote(backing, share)
        try:
            mount = mountutil.start(share, mnt, base / "state", backend=backend)
            try:
                return measure(backing, share, mnt, rounds) | {"files": files, "dirs": dirs, "backend": backend,
                                                                "mode": _mode(mnt)}
            finally:
                mountutil.stop(mount)
        finally:
            subprocess.run(["fusermount3", "-u", "-z", str(share)], capture_output=True, timeout=10, check=False)
            remote.wait(timeout=10)


def _mode(mnt: Path) -> str:
    return str(json.loads((mnt / ".sparsefs" / "stats.json").read_bytes())["watcher"]["mode"])


def measure(backing: Path, share: Path, mnt: Path, rounds: int) -> dict[str, Any]:
    rel = Path("d001") / "f0001.txt"
    rows: dict[str, list[float]] = {k: [] for k in ("direct_us", "mount_us", "check_us", "seen_s", "poll_seen_s",
                                                   "poll_cpu", "poll_rss_mib")}
    for n in range(rounds):  # interleaved: each round measures every side once
        rows["direct_us"].append(open_read_s(share / rel) * 1e6)
        rows["check_us"].append(lstat_s(share / rel) * 1e6)
        rows["mount_us"].append(open_read_s(mnt / rel) * 1e6)
        rows["seen_s"].append(change_seen_s(backing / rel, mnt / rel, n))
        latency, cpu, rss = poll_once(share, backing, n)
        rows["poll_seen_s"].append(latency)
        rows["poll_cpu"].append(cpu)
        rows["poll_rss_mib"].append(rss)
    medians = {k: round(statistics.median(v), 3) for k, v in rows.items()}
    entries = sum(1 for _ in os.walk(share)) + sum(len(f) for _, _, f in os.walk(share))
    return medians | {"on_access_ratio": round(medians["mount_us"] / medians["direct_us"], 2),
                      "poll_stats_per_scan": entries, "load": os.getloadavg()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--dirs", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backend", default="kernel")
    args = parser.parse_args()
    print(json.dumps(run(args.files, args.dirs, args.rounds, args.backend), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
