#!/usr/bin/env python3
"""Plain-I/O and intent-read benchmark: native vs SparseFS's kernel backend vs its mfusepy backend.

Every workload is measured on several roots in the same run: the source
directory itself (native), a SparseFS mirror mount of it with
``--backend kernel`` (/dev/fuse spoken directly, plain files by kernel
passthrough), the same with ``--readers 2``, and with ``--backend mfusepy``
(libfuse3); optionally ``scripts/minimal_passthrough.py`` (a minimal mfusepy
passthrough). Within each round the systems are interleaved per workload
(their order rotates between rounds), and only the system being measured is
mounted, so a daemon (and SparseFS's source watcher) never runs while another
system is timed. Cold = right after ``sync; echo 3 > /proc/sys/vm/drop_caches``
(which also drops the FUSE page cache, dentries and inodes); warm = the same
workload repeated right after. Reported: medians of per-round times and
medians of per-round ratios, and a verdict against the issue's bars.

    .venv/bin/python scripts/bench_fuse.py                 # 5 rounds, writes docs/journal/<today>-plain-io.md
    .venv/bin/python scripts/bench_fuse.py --quick         # smoke run, small data, no write
    .venv/bin/python scripts/bench_fuse.py --workloads small,grep --systems native,kernel,kernel-r2

Workloads: seq (200 MB sequential read, 1 MiB chunks), pread (4 KiB preads at
random page-aligned offsets of the 200 MB file, timed with perf_counter_ns in
batches of 100, median per-pread time of the batches: "first touch" = fresh
mount with the source file in the page cache, each page read once; "warm" =
after reading the whole file through the same root), small (5,000 files of
1-8 KiB in 50 dirs: ``find . -type f -exec cat {} +``), stat (2,000-file tree:
``find . -printf '%s\\n'``), grep2k (``grep -r`` for a rare word over that
2,000-file tree), grep (``grep -r`` over the 5,000 files), intent
(``cat 'big.txt@intent=...'`` on a 5 MB text through the kernel backend:
cold = first after a fresh mount, warm = other intents on the same file
afterwards; its table goes into the plain-I/O section unless
``--write-intent-section``). Needs root (mounting, drop_caches). Data is
generated under /tmp and reused. The mounts run a snapshot of the committed
code (``--code HEAD``, extracted under /tmp and put first on PYTHONPATH), so
edits made to sparsefs/ during a run cannot change what is measured; raw
per-round values are written to the run directory's results.json.
"""

from __future__ import annotations

import argparse
import atexit
import datetime
import json
import os
import platform
import random
import re
import shlex
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar
from urllib.parse import quote

REPO = Path(__file__).resolve().parents[1]
VENV_PY = REPO / ".venv" / "bin" / "python"
SPARSEFS = REPO / ".venv" / "bin" / "sparsefs"
MINIMAL = REPO / "scripts" / "minimal_passthrough.py"
QA = Path(__file__).resolve().parents[2] / "shared" / "data" / "qa"
BENCH_ROOT = Path("/tmp/sparsefs-bench")
DOC = REPO / "docs" / "journal" / f"{datetime.date.today()}-plain-io.md"  # BENCHMARKS.md keeps the current few
PLAIN_TITLE = "## Plain I/O (native vs kernel backend vs mfusepy backend)"
PLAIN_PREFIX = "## Plain I/O"
INTENT_TITLE = "## Intent-read latency"
HAND_WRITTEN = ("### Integrity", "### Profile notes")  # subsections a rewrite keeps
RARE_WORD = "quizzaciously"
BAR_WARM_S = 0.050
BAR_COLD_S = 2.0
PREAD_BATCH = 100
PREAD_BATCHES = {"first": 200, "warm": 1000}  # 20,000 and 100,000 preads per run

SYSTEMS = {
    "native": "native",
    "kernel": "kernel",
    "kernel-r2": "kernel --readers 2",
    "mfusepy": "mfusepy",
    "kernel-nowatch": "kernel --no-watch",
    "kernel-nopt": "kernel --no-passthrough",
    "minimal": "minimal mfusepy",
}
SPARSEFS_ARGS = {
    "kernel": ["--backend", "kernel"],
    "kernel-r2": ["--backend", "kernel", "--readers", "2"],
    "mfusepy": ["--backend", "mfusepy"],
    "kernel-nowatch": ["--backend", "kernel", "--no-watch"],
    "kernel-nopt": ["--backend", "kernel", "--no-passthrough"],
}
WORKLOADS = ("seq", "pread", "small", "stat", "grep2k", "grep", "intent")


@dataclass(frozen=True)
class Sizes:
    big_mb: int
    small_files: int
    small_dirs: int
    tree_files: int
    tree_dirs: int
    text_mb: float
    intents: int  # per round: 1 cold + (intents - 1) warm

    @property
    def key(self) -> str:
        return (f"b{self.big_mb}-s{self.small_files}x{self.small_dirs}"
                f"-t{self.tree_files}x{self.tree_dirs}-x{self.text_mb}-g2")


FULL = Sizes(big_mb=200, small_files=5000, small_dirs=50, tree_files=2000, tree_dirs=40, text_mb=5, intents=6)
QUICK = Sizes(big_mb=20, small_files=500, small_dirs=10, tree_files=200, tree_dirs=10, text_mb=5, intents=3)


class BenchError(RuntimeError):
    pass


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- data ----------
def make_data(base: Path, sizes: Sizes, fresh: bool) -> Path:
    """Generate (or reuse) the source tree; returns it."""
    src = base / f"data-{sizes.key}" / "src"
    marker = src.parent / "complete.json"
    if marker.exists() and not fresh:
        log(f"reusing data in {src}")
        return src
    if src.parent.exists():
        subprocess.run(["rm", "-rf", "--one-file-system", str(src.parent)], check=True, timeout=300)
    log(f"generating data in {src} ...")
    rng = random.Random(20251129)
    (src / "seq").mkdir(parents=True)
    with open(src / "seq" / "big.bin", "wb") as out:
        for _ in range(sizes.big_mb):
            out.write(rng.randbytes(1 << 20))
    vocab = sorted({"".join(rng.choices("abcdefghijklmnoprstuvw", k=rng.randint(2, 9))) for _ in range(4000)})
    vocab = [w for w in vocab if RARE_WORD not in w]
    rare_files = set(rng.sample(range(sizes.small_files), 3))
    _tree(src / "small", sizes.small_files, sizes.small_dirs, rng, vocab, (1024, 8192), rare_files)
    _tree(src / "tree", sizes.tree_files, sizes.tree_dirs, rng, vocab, (64, 1024),
          set(rng.sample(range(sizes.tree_files), 3)))
    (src / "text").mkdir()
    text, _ = build_text(int(sizes.text_mb * 1_000_000))
    (src / "text" / "big.txt").write_bytes(text)
    marker.write_text(json.dumps({"sizes": sizes.__dict__, "rare_files": len(rare_files)}))
    subprocess.run(["sync"], check=False, timeout=300)
    return src


def _tree(root: Path, files: int, dirs: int, rng: random.Random, vocab: list[str],
          size_range: tuple[int, int], rare: set[int]) -> None:
    for i in range(files):
        d = root / f"d{i % dirs:03d}"
        d.mkdir(parents=True, exist_ok=True)
        size = rng.randint(*size_range)
        words: list[str] = []
        length = 0
        while length < size:
            line = " ".join(rng.choices(vocab, k=12))
            words.append(line)
            length += len(line) + 1
        body = "\n".join(words)[: size - 1] + "\n"
        if i in rare:
            cut = len(body) // 2
            body = body[:cut] + f" {RARE_WORD} " + body[cut + len(RARE_WORD) + 2:]
        (d / f"f{i:05d}.txt").write_text(body[:size])


def build_text(target: int) -> tuple[bytes, list[str]]:
    """~target bytes of COVID-QA and QMSum documents; also their questions."""
    docs = []
    for name in ("covidqa-dev.docs.jsonl", "qmsum.docs.jsonl"):
        with open(QA / name) as fh:
            docs += [json.loads(line) for line in fh]
    parts: list[str] = []
    total = 0
    while total < target:
        for doc in docs:
            chunk = f"# {doc['title']}\n\n{doc['text'].strip()}\n\n"
            parts.append(chunk)
            total += len(chunk.encode())
            if total >= target:
                break
    data = "".join(parts).encode()[:target]
    data = data[: data.rfind(b"\n") + 1]
    questions = []
    for name in ("covidqa-dev.questions.jsonl", "qmsum.questions.jsonl"):
        with open(QA / name) as fh:
            questions += [json.loads(line)["question"] for line in fh]
    return data, questions


def pick_intents(n: int) -> list[str]:
    _, questions = build_text(0)
    rng = random.Random(7)
    fit = [q.strip() for q in questions if 20 <= len(q.strip()) <= 110]
    return rng.sample(fit, n)


def intent_name(question: str) -> str:
    # "/" must be %2F, "%" and "&" are grammar characters; keep the rest readable.
    return "big.txt@intent=" + quote(question, safe=" ,?'-:()")


# ---------------------------------------------------------------- mounts --------
def mountinfo() -> dict[str, tuple[str, int]]:
    """mountpoint -> (fstype, minor)."""
    result = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields = left.split()
        point = fields[4].encode().decode("unicode_escape") if "\\" in fields[4] else fields[4]
        result[point] = (right.split()[0], int(fields[2].split(":")[1]))
    return result


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def abort_connection(minor: int) -> None:
    conn = Path("/sys/fs/fuse/connections")
    if not (conn / str(minor)).exists():
        subprocess.run(["mount", "-t", "fusectl", "none", str(conn)], timeout=10, check=False,
                       capture_output=True)
    try:
        (conn / str(minor) / "abort").write_text("1")
        log(f"  aborted FUSE connection {minor}")
    except OSError as err:
        log(f"  could not abort FUSE connection {minor}: {err}")


class FuseMount:
    """One daemon mounted at ``mnt``; ``stop`` always leaves nothing mounted."""

    active: ClassVar[list[FuseMount]] = []

    def __init__(self, system: str, src: Path, mnt: Path, state: Path, log_path: Path) -> None:
        self.system, self.src, self.mnt, self.state, self.log_path = system, src, mnt, state, log_path
        self.pid: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if str(self.mnt) in mountinfo():
            raise BenchError(f"{self.mnt} is already mounted")
        self.mnt.mkdir(parents=True, exist_ok=True)
        FuseMount.active.append(self)
        if self.system in SPARSEFS_ARGS:
            cmd = [str(SPARSEFS), "mount", str(self.src), str(self.mnt), "--state-dir", str(self.state),
                   *SPARSEFS_ARGS[self.system]]
            # cwd "/": `python -m sparsefs` puts its cwd first on sys.path (the repo root would shadow a snapshot)
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False, cwd="/")
            match = re.search(r"daemon pid (\d+)", res.stdout)
            if match:
                self.pid = int(match.group(1))
            if res.returncode != 0 or not match:
                raise BenchError(f"sparsefs mount failed ({res.returncode}): {res.stdout}{res.stderr}")
            self._check_backend()
            return
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen([str(VENV_PY), str(MINIMAL), str(self.src), str(self.mnt)],
                                         stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                         start_new_session=True)
        self.pid = self.proc.pid
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if mountinfo().get(str(self.mnt), ("",))[0] == "fuse.minimal":
                os.stat(self.mnt)
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        raise BenchError(f"minimal passthrough did not mount; see {self.log_path}")

    def _check_backend(self) -> None:
        """The mount serves with the backend asked for (and passthrough on for the kernel one)."""
        stats = json.loads((self.mnt / ".sparsefs" / "stats.json").read_bytes())
        want = SPARSEFS_ARGS[self.system][1]
        passthrough = want == "kernel" and "--no-passthrough" not in SPARSEFS_ARGS[self.system]
        if stats.get("backend") != want or (want == "kernel" and stats.get("passthrough") is not passthrough):
            raise BenchError(f"{self.system}: mount reports backend={stats.get('backend')!r} "
                             f"passthrough={stats.get('passthrough')!r}")

    def stop(self) -> None:
        try:
            entry = mountinfo().get(str(self.mnt))
            if entry is not None:
                cmd = ([str(SPARSEFS), "umount", str(self.mnt)] if self.system in SPARSEFS_ARGS
                       else ["fusermount3", "-u", str(self.mnt)])
                try:
                    res = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=False)
                    if res.returncode != 0:
                        log(f"  unmount {self.mnt}: {res.stdout.strip()} {res.stderr.strip()}")
                except subprocess.TimeoutExpired:
                    log(f"  unmount {self.mnt} timed out")
            entry = mountinfo().get(str(self.mnt))
            if entry is not None:
                subprocess.run(["fusermount3", "-u", str(self.mnt)], capture_output=True, timeout=10, check=False)
            entry = mountinfo().get(str(self.mnt))
            if entry is not None:
                abort_connection(entry[1])
                subprocess.run(["fusermount3", "-u", str(self.mnt)], capture_output=True, timeout=10, check=False)
                if str(self.mnt) in mountinfo():
                    subprocess.run(["umount", "-l", str(self.mnt)], capture_output=True, timeout=10, check=False)
            self._reap()
        finally:
            if self in FuseMount.active:
                FuseMount.active.remove(self)

    def _reap(self) -> None:
        if self.pid is None:
            return
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                return
            if self.proc is None and not pid_alive(self.pid):
                return
            time.sleep(0.02)
        log(f"  daemon {self.pid} did not exit; SIGKILL")
        os.kill(self.pid, signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=10)


def stop_all() -> None:
    for mount in list(FuseMount.active):
        mount.stop()


# ---------------------------------------------------------------- measuring -----
def drop_caches() -> None:
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as fh:
        fh.write("3\n")
    time.sleep(0.2)  # let the kernel's FORGETs reach the daemons before timing


def run_timed(cmd: list[str], cwd: Path, timeout: float, ok_codes: tuple[int, ...] = (0,),
              capture: bool = False) -> tuple[float, bytes]:
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise BenchError(f"timed out after {timeout}s: {shlex.join(cmd)} in {cwd}") from None
    elapsed = time.perf_counter() - start
    if proc.returncode not in ok_codes:
        raise BenchError(f"{shlex.join(cmd)} in {cwd} exited {proc.returncode}: {err.decode(errors='replace')[:500]}")
    return elapsed, out or b""


_SEQ_READER = """
import sys, time
buf = bytearray(1 << 20)
t = time.perf_counter()
n = 0
with open(sys.argv[1], "rb", buffering=0) as fh:
    while k := fh.readinto(buf):
        n += k
print(time.perf_counter() - t, n)
"""


_PREAD_TIMER = """
import os, random, statistics, sys, time
path, native, mode, batches, batch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
fd = os.open(path, os.O_RDONLY)
pages = os.fstat(fd).st_size // 4096
rng = random.Random(4096)
if mode == "first":  # distinct pages, each read once
    batches = min(batches, pages // batch)
    offsets = [page * 4096 for page in rng.sample(range(pages), batches * batch)]
else:  # warm: the whole file read through this root first
    buf = bytearray(1 << 20)
    with open(path, "rb", buffering=0) as fh:
        while fh.readinto(buf):
            pass
    offsets = [rng.randrange(pages) * 4096 for _ in range(batches * batch)]
chunks = [offsets[i * batch:(i + 1) * batch] for i in range(batches)]
pread, clock = os.pread, time.perf_counter_ns
per_call = []
for chunk in chunks:
    start = clock()
    for offset in chunk:
        pread(fd, 4096, offset)
    per_call.append((clock() - start) / batch)
# the same loop around a C call that does no I/O: Python's share of each pread
empty = []
for chunk in chunks[:100]:
    start = clock()
    for offset in chunk:
        abs(offset)
    empty.append((clock() - start) / batch)
ref = os.open(native, os.O_RDONLY)
for offset in rng.sample(offsets, 200):
    if os.pread(fd, 4096, offset) != os.pread(ref, 4096, offset):
        sys.exit(f"pread at {offset} differs from the source")
print(statistics.median(per_call) / 1e9, statistics.median(empty) / 1e9, len(offsets))
"""


@dataclass
class Workload:
    name: str
    label: str
    run: Callable[[Path], float]  # root -> seconds


def plain_workloads(sizes: Sizes, timeout: float) -> dict[str, Workload]:
    def seq(root: Path) -> float:
        _, out = run_timed([sys.executable, "-c", _SEQ_READER, str(root / "seq" / "big.bin")], root, timeout,
                           capture=True)
        elapsed, nbytes = out.split()
        if int(nbytes) != sizes.big_mb << 20:
            raise BenchError(f"seq read returned {nbytes.decode()} bytes from {root}")
        return float(elapsed)

    def small(root: Path) -> float:
        return run_timed(["find", ".", "-type", "f", "-exec", "cat", "{}", "+"], root / "small", timeout)[0]

    def tree(root: Path) -> float:
        elapsed, out = run_timed(["find", ".", "-printf", "%s\n"], root / "tree", timeout, capture=True)
        lines = out.count(b"\n")
        if lines != sizes.tree_files + sizes.tree_dirs + 1:
            raise BenchError(f"find listed {lines} entries under {root / 'tree'}")
        return elapsed

    def grep_in(sub: str) -> Callable[[Path], float]:
        def grep(root: Path) -> float:
            elapsed, out = run_timed(["grep", "-r", RARE_WORD, "."], root / sub, timeout, capture=True)
            lines = out.count(b"\n")
            if lines != 3:
                raise BenchError(f"grep found {lines} lines under {root / sub}")
            return elapsed
        return grep

    mb = sizes.big_mb
    return {
        "seq": Workload("seq", f"sequential read {mb} MB (1 MiB chunks)", seq),
        "small": Workload("small", f"{sizes.small_files:,} small files: find + cat", small),
        "stat": Workload("stat", f"stat/readdir {sizes.tree_files:,}-file tree: find -printf %s", tree),
        "grep2k": Workload("grep2k", f"grep -r rare word, {sizes.tree_files:,}-file tree (64 B–1 KiB files)",
                           grep_in("tree")),
        "grep": Workload("grep", f"grep -r rare word, {sizes.small_files:,} files (1–8 KiB)", grep_in("small")),
    }


PREAD_FIRST = "4 KiB random pread, first touch after mount (source cached), per pread"
PREAD_WARM = "4 KiB random pread, warm, per pread"
PREAD_EMPTY = "(same Python loop around abs() instead of pread, per call)"


def pread_run(root: Path, src: Path, mode: str, timeout: float) -> tuple[float, float]:
    """(median seconds per pread, median seconds per empty loop iteration)."""
    _, out = run_timed([sys.executable, "-c", _PREAD_TIMER, str(root / "seq" / "big.bin"),
                        str(src / "seq" / "big.bin"), mode, str(PREAD_BATCHES[mode]), str(PREAD_BATCH)],
                       root, timeout, capture=True)
    per_pread, per_empty, count = out.split()
    if not 0 < int(count) <= PREAD_BATCHES[mode] * PREAD_BATCH:
        raise BenchError(f"pread timer did {count.decode()} preads under {root}")
    return float(per_pread), float(per_empty)


@dataclass
class Results:
    """row label -> system -> per-round values (seconds)."""

    rows: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)

    def add(self, row: str, system: str, value: float) -> None:
        if row not in self.rows:
            self.rows[row] = {}
            self.order.append(row)
        self.rows[row].setdefault(system, []).append(value)


class Bench:
    def __init__(self, args: argparse.Namespace, sizes: Sizes, src: Path, run_dir: Path) -> None:
        self.args, self.sizes, self.src, self.run_dir = args, sizes, src, run_dir
        self.results = Results()
        self.intent_results = Results()
        self.mount_count = 0
        self.cold_ok, self.cold_error = True, ""
        try:
            drop_caches()
        except OSError as err:
            self.cold_ok, self.cold_error = False, f"drop_caches failed: {err}"
            log(f"WARNING: {self.cold_error}; cold rows are skipped")

    def mounted(self, system: str) -> FuseMount:
        self.mount_count += 1
        tag = f"{system}-{self.mount_count}"
        return FuseMount(system, self.src, self.run_dir / f"mnt-{system}", self.run_dir / "state" / tag,
                         self.run_dir / f"{tag}.log")

    def measure(self, system: str, fn: Callable[[Path], None]) -> None:
        if system == "native":
            fn(self.src)
            return
        mount = self.mounted(system)
        try:
            mount.start()
            fn(mount.mnt)
        finally:
            mount.stop()

    def plain_round(self, rnd: int, workload: Workload, systems: list[str]) -> None:
        warm_reps = self.args.warm_reps

        def body(system: str) -> Callable[[Path], None]:
            def go(root: Path) -> None:
                if self.cold_ok:
                    drop_caches()
                    cold = workload.run(root)
                    self.results.add(f"{workload.label}, cold", system, cold)
                else:
                    workload.run(root)  # warm-up
                warm = statistics.median(workload.run(root) for _ in range(warm_reps))
                self.results.add(f"{workload.label}, warm", system, warm)
                cold_txt = f"cold {cold:.3f}s " if self.cold_ok else ""
                log(f"  r{rnd} {workload.name:6s} {system:17s} {cold_txt}warm {warm:.3f}s")
            return go

        for system in systems:
            self.measure(system, body(system))

    def pread_round(self, rnd: int, systems: list[str]) -> None:
        source_file = self.src / "seq" / "big.bin"

        def timed(system: str) -> Callable[[Path], None]:
            return lambda root: go(root, system)

        def go(root: Path, system: str) -> None:
            first, _ = pread_run(root, self.src, "first", self.args.timeout)
            warm, empty = pread_run(root, self.src, "warm", self.args.timeout)
            self.results.add(PREAD_FIRST, system, first)
            self.results.add(PREAD_WARM, system, warm)
            self.results.add(PREAD_EMPTY, system, empty)
            log(f"  r{rnd} pread  {system:17s} first {first * 1e6:.2f} µs warm {warm * 1e6:.2f} µs "
                f"(empty loop {empty * 1e6:.2f} µs)")

        for system in systems:
            # the source file in the page cache, read natively, before the mount exists
            run_timed(["cat", str(source_file)], self.src, self.args.timeout)
            self.measure(system, timed(system))

    def intent_round(self, rnd: int, intents: list[str], system: str) -> None:
        n = len(intents)
        cold_label = "cold: first intent after a fresh mount"
        warm_label = f"warm: another intent, same file (median of {n - 1})"
        worst_label = f"warm: worst of {n - 1} intents"
        for label in (cold_label, cold_label + " + drop_caches", warm_label, worst_label):
            if label not in self.intent_results.order:
                self.intent_results.order.append(label)
                self.intent_results.rows[label] = {}
        names = [intent_name(intents[(rnd + i) % n]) for i in range(n)]

        def cat(root: Path, name: str) -> float:
            elapsed, out = run_timed(["cat", name], root / "text", self.args.timeout, capture=True)
            if not out.strip():
                raise BenchError(f"empty pack for {name}")
            return elapsed

        def cold_warm(drop: bool) -> Callable[[Path], None]:
            def go(root: Path) -> None:
                label = cold_label
                if drop:
                    drop_caches()
                    label += " + drop_caches"
                cold = cat(root, names[0])
                self.intent_results.add(label, system, cold)
                if drop:
                    log(f"  r{rnd} intent {system:17s} cold+drop {cold:.3f}s")
                    return
                warm = [cat(root, name) for name in names[1:]]
                self.intent_results.add(warm_label, system, statistics.median(warm))
                self.intent_results.add(worst_label, system, max(warm))
                log(f"  r{rnd} intent {system:17s} cold {cold:.3f}s warm median {statistics.median(warm) * 1000:.1f} ms"
                    f" max {max(warm) * 1000:.1f} ms")
            return go

        self.measure(system, cold_warm(False))
        if self.cold_ok:
            self.measure(system, cold_warm(True))


# ---------------------------------------------------------------- report --------
def fmt_time(seconds: float) -> str:
    if seconds < 0.001:
        return f"{seconds * 1e6:.2f} µs"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms" if seconds >= 0.01 else f"{seconds * 1000:.1f} ms"
    return f"{seconds:.2f} s"


def ratio_stats(a: list[float], b: list[float]) -> tuple[float, float, float]:
    ratios = [x / y for x, y in zip(a, b, strict=True) if y > 0]
    return statistics.median(ratios), min(ratios), max(ratios)


@dataclass(frozen=True)
class Bar:
    number: int
    text: str
    row_part: str  # part of the results row label (warm rows only)
    kind: str  # "throughput": native time / system time >= limit; "ratio": system / native <= limit; "abs": <= s
    limit: float


BARS = (
    Bar(1, "warm 200 MB sequential read ≥ 0.9× native throughput", "sequential read", "throughput", 0.9),
    Bar(2, "4 KiB random pread ≤ 2 µs median (warm)", PREAD_WARM, "abs", 2e-6),
    Bar(3, "5,000 small files warm ≤ 3× native", "small files: find + cat", "ratio", 3.0),
    Bar(4, "`grep -r` over a 2,000-file tree warm ≤ 3× native", "-file tree (64 B", "ratio", 3.0),
    Bar(5, "stat warm ≤ 1.5× native", "stat/readdir", "ratio", 1.5),
)


def _warm_row(results: Results, part: str) -> str | None:
    for row in results.order:
        if part in row and (row.endswith(", warm") or row == PREAD_WARM):
            return row
    return None


def bar_value(bar: Bar, per: dict[str, list[float]], system: str) -> tuple[float, float, float] | None:
    """(median, min, max) of the bar's measure for one system over the rounds."""
    if system not in per:
        return None
    if bar.kind == "abs":
        values = per[system]
        return statistics.median(values), min(values), max(values)
    if "native" not in per:
        return None
    if bar.kind == "throughput":
        return ratio_stats(per["native"], per[system])
    return ratio_stats(per[system], per["native"])


def bars_table(results: Results, systems: list[str]) -> str:
    fuse = [s for s in systems if s != "native"]
    head = ["#", "bar", "native"] + [SYSTEMS[s] for s in fuse] + ["kernel range over rounds", "kernel verdict"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for bar in BARS:
        row = _warm_row(results, bar.row_part)
        if row is None:
            continue
        per = results.rows[row]

        def show(value: float, kind: str = bar.kind) -> str:
            return fmt_time(value) if kind == "abs" else f"{value:.2f}×"

        native = fmt_time(statistics.median(per["native"])) if bar.kind == "abs" and "native" in per else (
            "1.00×" if "native" in per else "—")
        cells = [str(bar.number), bar.text, native]
        for system in fuse:
            got = bar_value(bar, per, system)
            cells.append(show(got[0]) if got else "—")
        got = bar_value(bar, per, "kernel")
        if got is None:
            cells += ["—", "not measured"]
        else:
            ok = got[0] >= bar.limit if bar.kind == "throughput" else got[0] <= bar.limit
            cells += [f"{show(got[1])}–{show(got[2])}", "pass" if ok else "**FAIL**"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plain_table(results: Results, systems: list[str]) -> str:
    fuse = [s for s in systems if s != "native"]
    head = ["workload"] + [SYSTEMS[s] for s in systems]
    if "native" in systems:
        head += [f"{SYSTEMS[s]}/native" for s in fuse]
    pair = "kernel" in systems and "mfusepy" in systems
    if pair:
        head.append("kernel/mfusepy")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in results.order:
        per = results.rows[row]
        cells = [row] + [fmt_time(statistics.median(per[s])) if s in per else "—" for s in systems]
        meaningless = row == PREAD_EMPTY
        if "native" in systems:
            cells += ["—" if meaningless or s not in per else f"{ratio_stats(per[s], per['native'])[0]:.2f}×"
                      for s in fuse]
        if pair:
            cells.append("—" if meaningless else f"{ratio_stats(per['kernel'], per['mfusepy'])[0]:.2f}×")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def readers_table(results: Results) -> str:
    lines = ["| workload | kernel (1 reader) | kernel --readers 2 | readers 2 / readers 1 | range over rounds |",
             "|---|---|---|---|---|"]
    for row in results.order:
        per = results.rows[row]
        if row == PREAD_EMPTY or "kernel" not in per or "kernel-r2" not in per:
            continue
        med, lo, hi = ratio_stats(per["kernel-r2"], per["kernel"])
        lines.append(f"| {row} | {fmt_time(statistics.median(per['kernel']))} | "
                     f"{fmt_time(statistics.median(per['kernel-r2']))} | {med:.2f}× | {lo:.2f}–{hi:.2f} |")
    return "\n".join(lines)


def intent_table(results: Results, system: str) -> str:
    lines = [f"| measurement | SparseFS {SYSTEMS[system]} (median of rounds) | min–max over rounds | bar | verdict |",
             "|---|---|---|---|---|"]
    for row in results.order:
        values = results.rows[row].get(system, [])
        if not values:
            continue
        med = statistics.median(values)
        bar = BAR_COLD_S if row.startswith("cold") else BAR_WARM_S
        verdict = "pass" if med <= bar else "**FAIL**"
        lines.append(f"| {row} | {fmt_time(med)} | {fmt_time(min(values))}–{fmt_time(max(values))} | "
                     f"≤ {fmt_time(bar)} | {verdict} |")
    return "\n".join(lines)


def machine_facts() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    mem_kb = int(next(line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines()
                      if line.startswith("MemTotal")))
    py = subprocess.run([str(VENV_PY), "-c", "import platform, importlib.metadata as m; "
                         "print(platform.python_version(), m.version('mfusepy'))"],
                        capture_output=True, text=True, timeout=30, check=False).stdout.split()
    fuse = subprocess.run(["fusermount3", "-V"], capture_output=True, text=True, timeout=10,
                          check=False).stdout.strip().split()[-1:]
    fstype = subprocess.run(["findmnt", "-n", "-o", "FSTYPE,SOURCE", "-T", str(BENCH_ROOT)], capture_output=True,
                            text=True, timeout=10, check=False).stdout.strip()
    fstype = " ".join(fstype.split())
    return (f"nproc {os.cpu_count()} ({cpu}), {mem_kb / 1024 / 1024:.0f} GiB RAM, kernel {platform.release()}, "
            f"Python {py[0] if py else '?'}, mfusepy {py[1] if len(py) > 1 else '?'}, "
            f"libfuse {fuse[0] if fuse else '?'}, data on {fstype or '?'}")


CODE_PACKAGES = ("sparsefs", "readers", "gate")


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=30,
                          check=False).stdout.rstrip("\n")


def snapshot_dir(rev: str) -> tuple[str, Path]:
    """(full hash, directory) of ``rev``'s committed packages, extracted once and reused."""
    full = _git("rev-parse", "--verify", f"{rev}^{{commit}}").strip()
    if not full:
        raise BenchError(f"unknown git revision {rev}")
    dest = BENCH_ROOT / f"code-{full[:12]}"
    if not dest.exists():
        tmp = BENCH_ROOT / f"code-{full[:12]}.tmp{os.getpid()}"
        tmp.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", full, *CODE_PACKAGES],
                                 capture_output=True, timeout=60, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive, timeout=60, check=True)
        os.replace(tmp, dest)
    return full, dest


def use_snapshot(rev: str) -> str:
    """Serve every mount from an extracted copy of ``rev``'s packages, not the live tree.

    Another engineer may be editing sparsefs/ while a run takes minutes; the
    daemons import from PYTHONPATH (ahead of the editable install's finder), so
    every mount of the run runs exactly this commit. Returns 'git <hash>'.
    """
    full, dest = snapshot_dir(rev)
    os.environ["PYTHONPATH"] = str(dest)
    where = subprocess.run([str(VENV_PY), "-c", "import sparsefs; print(sparsefs.__file__)"], capture_output=True,
                           text=True, timeout=30, check=False, cwd="/").stdout.strip()
    if not where.startswith(str(dest)):
        raise BenchError(f"the snapshot in {dest} does not shadow the editable install ({where})")
    return f"git {full[:7]} (snapshot of the committed {', '.join(CODE_PACKAGES)})"


def code_version() -> str:
    """The commit measured, and which code directories had uncommitted changes."""
    git = _git
    head = git("rev-parse", "--short", "HEAD").strip() or "?"
    dirty = sorted({line[3:] for line in git("status", "--porcelain", "--", "sparsefs", "readers", "gate",
                                              "pyproject.toml").splitlines()})
    return f"git {head}" + (f" + uncommitted changes in {', '.join(dirty)}" if dirty else "")


def replace_section(text: str, prefix: str, body: str) -> str:
    """Replace the section whose '## ' heading starts with ``prefix`` (up to the next '## ' heading);
    keep its hand-written tail (from the first '### Integrity' or '### Profile notes' heading on)."""
    found = re.search("^" + re.escape(prefix) + ".*$", text, flags=re.MULTILINE)
    if found is None:
        return text.rstrip("\n") + "\n\n" + body.rstrip("\n") + "\n"
    start = found.start()
    nxt = text.find("\n## ", found.end())
    end = len(text) if nxt < 0 else nxt + 1
    old = text[start:end]
    marks = [i for i in (old.find("\n" + head) for head in HAND_WRITTEN) if i >= 0]
    notes = min(marks) if marks else -1
    keep = old[notes + 1:].rstrip("\n") + "\n" if notes >= 0 else ""
    new = body.rstrip("\n") + "\n" + ("\n" + keep if keep else "")
    return text[:start] + new + ("\n" if nxt >= 0 else "") + text[end:]


def write_doc(plain: str, intent: str | None) -> None:
    """Rewrite the plain-I/O section, and the intent section only if the intent workload ran."""
    DOC.parent.mkdir(parents=True, exist_ok=True)
    text = DOC.read_text() if DOC.exists() else "# Benchmarks\n"
    text = replace_section(text, PLAIN_PREFIX, plain)
    if intent is not None:
        text = replace_section(text, INTENT_TITLE, intent)
    tmp = DOC.with_suffix(".md.tmp")
    tmp.write_text(text)
    os.replace(tmp, DOC)


# ---------------------------------------------------------------- main ----------
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 5; --quick: 1)")
    parser.add_argument("--quick", action="store_true", help="smoke run: small data, 1 round, no doc write")
    parser.add_argument("--warm-reps", type=int, default=None, help="warm repetitions per round, median (default 3)")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help=f"comma list of {','.join(WORKLOADS)}")
    parser.add_argument("--systems", default="native,kernel,kernel-r2,mfusepy",
                        help=f"comma list of {','.join(SYSTEMS)}")
    parser.add_argument("--intent-system", default="kernel", choices=sorted(SPARSEFS_ARGS),
                        help="the SparseFS mount the intent workload runs on (default kernel)")
    parser.add_argument("--write-intent-section", action="store_true",
                        help="rewrite the '## Intent-read latency' section (default: this run's intent table goes "
                             "into the plain-I/O section instead)")
    parser.add_argument("--timeout", type=float, default=300.0, help="per command, seconds")
    parser.add_argument("--code", default="HEAD",
                        help="git revision whose sparsefs/readers/gate the mounts run (a snapshot, immune to edits "
                             "during the run; default HEAD), or 'worktree' for the live tree")
    parser.add_argument("--fresh-data", action="store_true", help="regenerate the data set")
    parser.add_argument("--write", dest="write", action="store_true", default=None,
                        help="write the dated journal file (docs/journal/)")
    parser.add_argument("--no-write", dest="write", action="store_false", help="do not write the journal file")
    args = parser.parse_args()
    args.rounds = args.rounds or (1 if args.quick else 5)
    args.warm_reps = args.warm_reps or (1 if args.quick else 3)
    write = args.write if args.write is not None else not args.quick
    sizes = QUICK if args.quick else FULL
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    for name in workloads:
        if name not in WORKLOADS:
            parser.error(f"unknown workload {name}")
    for name in systems:
        if name not in SYSTEMS:
            parser.error(f"unknown system {name}")
    if os.geteuid() != 0:
        log("WARNING: not root: mounting may work, drop_caches will not")

    def on_signal(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, on_signal)
    atexit.register(stop_all)

    BENCH_ROOT.mkdir(parents=True, exist_ok=True)
    src = make_data(BENCH_ROOT, sizes, args.fresh_data)
    run_dir = BENCH_ROOT / f"run-{os.getpid()}"
    run_dir.mkdir()
    code = use_snapshot(args.code) if args.code != "worktree" else code_version()
    command = shlex.join([".venv/bin/python", "scripts/bench_fuse.py", *sys.argv[1:]])
    started = datetime.datetime.now().astimezone()
    wall_start = time.monotonic()
    bench = Bench(args, sizes, src, run_dir)
    plain = plain_workloads(sizes, args.timeout)
    intents = pick_intents(sizes.intents)
    try:
        for rnd in range(args.rounds):
            order = systems[rnd % len(systems):] + systems[: rnd % len(systems)]
            log(f"round {rnd + 1}/{args.rounds}: order {', '.join(order)}")
            for name in workloads:
                if name == "intent":
                    bench.intent_round(rnd, intents, args.intent_system)
                elif name == "pread":
                    bench.pread_round(rnd, order)
                else:
                    bench.plain_round(rnd, plain[name], order)
    finally:
        stop_all()
        leftovers = [p for p in mountinfo() if p.startswith(str(run_dir))]
        if leftovers:
            log(f"WARNING: still mounted: {leftovers}")
        raw = {"command": command, "started": started.isoformat(), "code": code,
               "plain": bench.results.rows, "intent": bench.intent_results.rows}
        (run_dir / "results.json").write_text(json.dumps(raw, indent=1))
        log(f"raw per-round values (also after a failure): {run_dir / 'results.json'}")
    wall = time.monotonic() - wall_start

    facts = machine_facts()
    have_plain = bool(bench.results.rows)
    cold_note = ("Cold = after `sync; echo 3 > /proc/sys/vm/drop_caches` (drops the FUSE page cache,\n"
                 "dentries and inodes too)." if bench.cold_ok else f"Cold rows skipped: {bench.cold_error}.")
    described = {
        "kernel": "`sparsefs mount SRC MNT --backend kernel` (/dev/fuse spoken directly, plain files by kernel "
                  "passthrough, 1 reader thread, source watcher on)",
        "kernel-r2": "the same with `--readers 2` (two reader threads on cloned /dev/fuse fds)",
        "mfusepy": "`sparsefs mount SRC MNT --backend mfusepy` (libfuse3 through mfusepy, source watcher on)",
        "kernel-nowatch": "`--backend kernel --no-watch`",
        "kernel-nopt": "`--backend kernel --no-passthrough` (plain reads served by the daemon into the kernel's "
                       "page cache, kept while the source is watched: what an ordinary user and Linux < 6.9 get)",
        "minimal": "`scripts/minimal_passthrough.py` (mfusepy, kernel_cache, attr/entry_timeout=5, "
                   "negative_timeout=0, use_ino, multithreaded, no flush handler)",
    }
    system_list = "; ".join(f"**{SYSTEMS[s]}** = {described[s]}" for s in systems if s in described)
    plain_md = f"""{PLAIN_TITLE}

Measured {started:%Y-%m-%d %H:%M %Z} with (from the repository root, as root):

    {command}

Machine: {facts}. Code: {code}. Wall time {wall / 60:.0f} min, {bench.mount_count} mounts.

> Caveat: this is a shared, noisy 2-core VM — absolute times are noise. Read the ratios: each is the
> median of per-round ratios, with the systems measured side by side in one run.

Method: {args.rounds} round(s); in each round every workload runs on native (the source directory) and on
each SparseFS mount: {system_list}. The systems are interleaved per workload with the order rotating per
round; only the system being timed is mounted (mount → cold run → {args.warm_reps} warm runs, median →
unmount). {cold_note} Times are medians over rounds; ratios are medians of per-round ratios.
pread: 4 KiB `os.pread` at random page-aligned offsets of the 200 MB file from a Python loop, timed with
`time.perf_counter_ns` per batch of {PREAD_BATCH} (median over {PREAD_BATCHES['warm']} batches warm,
{PREAD_BATCHES['first']} batches first-touch, one run per round); "first touch" = fresh mount, the source file
already in the page cache (read natively before mounting), every pread on a page not read before through that
mount; "warm" = after reading the whole file through the same root. The empty-loop row is the same loop around
`abs()`: Python's own share of each pread. Every pread run also compares 200 of its pages with the source.

### The issue's bars (kernel backend = the default)

Throughput bar: median of per-round native time / system time (≥ limit passes). Ratio bars: median of
per-round system time / native time (≤ limit passes). pread: absolute median per pread.

{bars_table(bench.results, systems) if have_plain else "(no plain workloads run)"}

### All workloads

{plain_table(bench.results, systems) if have_plain else "(no plain workloads run)"}
"""
    if have_plain and "kernel-r2" in systems and "kernel" in systems:
        plain_md += f"""
### Reader threads: `--readers 1` vs `--readers 2` (kernel backend)

Same run. Ratio < 1 means two reader threads were faster.

{readers_table(bench.results)}
"""
    intent_md = None
    if bench.intent_results.rows:
        # The "## Intent-read latency" section is only rewritten on request; otherwise this run's intent
        # numbers go into the plain-I/O section as a subsection.
        heading = INTENT_TITLE if args.write_intent_section else "### Intent-read latency in this run"
        where = "above" if args.write_intent_section else "this section"
        intent_note = (" (`bench_fuse.py` rewrites the `## Intent-read latency` section further down only with\n"
                       "`--write-intent-section`.)")
        intent_md = f"""{heading}

Same run and machine as {where}, on the {SYSTEMS[args.intent_system]} backend. `cat 'big.txt@intent=<question>'` on a
{sizes.text_mb:g} MB text made of the COVID-QA dev and QMSum documents (../shared/data/qa), intents are
{sizes.intents} dataset questions (rotated per round). Cold = the first intent read after a fresh SparseFS mount
(parse + index), with the page cache warm, and again after a fresh mount + drop_caches; warm =
{sizes.intents - 1} other intents on the same file right after (index cached), median per round. Times include
starting `cat`.{"" if args.write_intent_section else intent_note}

{intent_table(bench.intent_results, args.intent_system)}
"""
    if intent_md is not None and not args.write_intent_section:
        plain_md += "\n" + intent_md
        intent_md = None
    print()
    print(plain_md)
    if intent_md is not None:
        print(intent_md)
    log(f"mounts: {bench.mount_count}; wall {wall:.0f} s")
    if write:
        write_doc(plain_md, intent_md)
        log(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as err:
        log(f"bench_fuse: {err}")
        sys.exit(1)
