#!/usr/bin/env python3
"""Plain-I/O and intent-read benchmark: native vs SparseFS vs a minimal mfusepy passthrough.

Every workload is measured on three roots in the same run: the source
directory itself (native), a SparseFS mirror mount of it, and
``scripts/minimal_passthrough.py`` mounted on it. Within each round the
systems are interleaved per workload (their order rotates between rounds),
and only the system being measured is mounted, so a daemon (and SparseFS's
source watcher) never runs while another system is timed. Cold = right after
``sync; echo 3 > /proc/sys/vm/drop_caches`` (which also drops the FUSE page
cache, dentries and inodes); warm = the same workload repeated right after.
Reported: medians of per-round times and medians of per-round ratios.

    .venv/bin/python scripts/bench_fuse.py                 # 5 rounds, writes docs/BENCHMARKS.md
    .venv/bin/python scripts/bench_fuse.py --quick         # smoke run, small data, no write
    .venv/bin/python scripts/bench_fuse.py --workloads small,grep --systems sparsefs,minimal

Workloads: seq (200 MB sequential read, 1 MiB chunks), small (5,000 files of
1-8 KiB in 50 dirs: ``find . -type f -exec cat {} +``), stat (2,000-file tree:
``find . -printf '%s\\n'``), grep (``grep -r`` for a rare word over the 5,000
files), intent (``cat 'big.txt@intent=...'`` on a 5 MB text: cold = first
after a fresh mount, warm = other intents on the same file afterwards).
Needs root (mounting, drop_caches). Data is generated under /tmp and reused.
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
DOC = REPO / "docs" / "BENCHMARKS.md"
PLAIN_TITLE = "## Plain I/O (native vs SparseFS vs minimal mfusepy)"
INTENT_TITLE = "## Intent-read latency"
RARE_WORD = "quizzaciously"
BAR_RATIO = 1.25
BAR_WARM_S = 0.050
BAR_COLD_S = 2.0

SYSTEMS = {
    "native": "native",
    "sparsefs": "SparseFS",
    "minimal": "minimal",
    "sparsefs-nowatch": "SparseFS --no-watch",
}
WORKLOADS = ("seq", "small", "stat", "grep", "intent")


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
                f"-t{self.tree_files}x{self.tree_dirs}-x{self.text_mb}")


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
    _tree(src / "tree", sizes.tree_files, sizes.tree_dirs, rng, vocab, (64, 1024), set())
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
        if self.system.startswith("sparsefs"):
            cmd = [str(SPARSEFS), "mount", str(self.src), str(self.mnt), "--state-dir", str(self.state)]
            if self.system == "sparsefs-nowatch":
                cmd.append("--no-watch")
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
            match = re.search(r"daemon pid (\d+)", res.stdout)
            if match:
                self.pid = int(match.group(1))
            if res.returncode != 0 or not match:
                raise BenchError(f"sparsefs mount failed ({res.returncode}): {res.stdout}{res.stderr}")
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

    def stop(self) -> None:
        try:
            entry = mountinfo().get(str(self.mnt))
            if entry is not None:
                cmd = ([str(SPARSEFS), "umount", str(self.mnt)] if self.system.startswith("sparsefs")
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
            raise BenchError(f"seq read returned {nbytes} bytes from {root}")
        return float(elapsed)

    def small(root: Path) -> float:
        return run_timed(["find", ".", "-type", "f", "-exec", "cat", "{}", "+"], root / "small", timeout)[0]

    def tree(root: Path) -> float:
        elapsed, out = run_timed(["find", ".", "-printf", "%s\n"], root / "tree", timeout, capture=True)
        lines = out.count(b"\n")
        if lines != sizes.tree_files + sizes.tree_dirs + 1:
            raise BenchError(f"find listed {lines} entries under {root / 'tree'}")
        return elapsed

    def grep(root: Path) -> float:
        elapsed, out = run_timed(["grep", "-r", RARE_WORD, "."], root / "small", timeout, capture=True)
        lines = out.count(b"\n")
        if lines != 3:
            raise BenchError(f"grep found {lines} lines under {root / 'small'}")
        return elapsed

    mb = sizes.big_mb
    return {
        "seq": Workload("seq", f"sequential read {mb} MB (1 MiB chunks)", seq),
        "small": Workload("small", f"{sizes.small_files:,} small files: find + cat", small),
        "stat": Workload("stat", f"stat/readdir {sizes.tree_files:,}-file tree: find -printf %s", tree),
        "grep": Workload("grep", f"grep -r rare word, {sizes.small_files:,} files", grep),
    }


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
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms" if seconds >= 0.01 else f"{seconds * 1000:.1f} ms"
    return f"{seconds:.2f} s"


def ratio_stats(a: list[float], b: list[float]) -> tuple[float, float, float]:
    ratios = [x / y for x, y in zip(a, b, strict=True) if y > 0]
    return statistics.median(ratios), min(ratios), max(ratios)


def plain_table(results: Results, systems: list[str]) -> tuple[str, list[str]]:
    fuse = [s for s in systems if s != "native"]
    variants = [s for s in fuse if s.startswith("sparsefs")]
    head = ["workload"] + [SYSTEMS[s] for s in systems]
    if "native" in systems:
        head += [f"{SYSTEMS[s]}/native" for s in fuse]
    if "minimal" in systems:
        head += [f"{SYSTEMS[s]}/minimal" for s in variants] + [f"{SYSTEMS[s]}/minimal range" for s in variants]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    over = []
    for row in results.order:
        per = results.rows[row]
        cells = [row] + [fmt_time(statistics.median(per[s])) if s in per else "—" for s in systems]
        if "native" in systems:
            cells += [f"{ratio_stats(per[s], per['native'])[0]:.2f}×" for s in fuse]
        if "minimal" in systems:
            for s in variants:
                med, _, _ = ratio_stats(per[s], per["minimal"])
                cells.append(f"**{med:.2f}×**" if med > BAR_RATIO else f"{med:.2f}×")
                if med > BAR_RATIO:
                    over.append(f"{row} ({SYSTEMS[s]}/minimal {med:.2f}×)")
            for s in variants:
                _, lo, hi = ratio_stats(per[s], per["minimal"])
                cells.append(f"{lo:.2f}–{hi:.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines), over


def intent_table(results: Results) -> str:
    lines = ["| measurement | SparseFS (median of rounds) | min–max over rounds | bar | verdict |",
             "|---|---|---|---|---|"]
    for row in results.order:
        values = results.rows[row].get("sparsefs", [])
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


def code_version() -> str:
    """The commit measured, and which code directories had uncommitted changes."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=30,
                              check=False).stdout.rstrip("\n")
    head = git("rev-parse", "--short", "HEAD").strip() or "?"
    dirty = sorted({line[3:] for line in git("status", "--porcelain", "--", "sparsefs", "readers", "gate",
                                              "pyproject.toml").splitlines()})
    return f"git {head}" + (f" + uncommitted changes in {', '.join(dirty)}" if dirty else "")


def replace_section(text: str, title: str, body: str) -> str:
    """Replace the '## title' section (up to the next '## ' heading); keep a '### Profile notes' tail."""
    start = text.find(title + "\n")
    if start < 0:
        return text.rstrip("\n") + "\n\n" + body.rstrip("\n") + "\n"
    nxt = text.find("\n## ", start + len(title))
    end = len(text) if nxt < 0 else nxt + 1
    old = text[start:end]
    notes = old.find("\n### Profile notes")
    keep = old[notes + 1:].rstrip("\n") + "\n" if notes >= 0 else ""
    new = body.rstrip("\n") + "\n" + ("\n" + keep if keep else "")
    return text[:start] + new + ("\n" if nxt >= 0 else "") + text[end:]


def write_doc(plain: str, intent: str) -> None:
    DOC.parent.mkdir(parents=True, exist_ok=True)
    text = DOC.read_text() if DOC.exists() else "# Benchmarks\n"
    text = replace_section(text, PLAIN_TITLE, plain)
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
    parser.add_argument("--systems", default="native,sparsefs,minimal",
                        help=f"comma list of {','.join(SYSTEMS)} (intent always uses sparsefs)")
    parser.add_argument("--timeout", type=float, default=300.0, help="per command, seconds")
    parser.add_argument("--fresh-data", action="store_true", help="regenerate the data set")
    parser.add_argument("--write", dest="write", action="store_true", default=None, help="write docs/BENCHMARKS.md")
    parser.add_argument("--no-write", dest="write", action="store_false", help="do not write docs/BENCHMARKS.md")
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
    code = code_version()
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
                    bench.intent_round(rnd, intents, "sparsefs")
                else:
                    bench.plain_round(rnd, plain[name], order)
    finally:
        stop_all()
        leftovers = [p for p in mountinfo() if p.startswith(str(run_dir))]
        if leftovers:
            log(f"WARNING: still mounted: {leftovers}")
    wall = time.monotonic() - wall_start

    facts = machine_facts()
    table, over = plain_table(bench.results, systems) if bench.results.rows else ("(no plain workloads run)", [])
    cold_note = ("Cold = after `sync; echo 3 > /proc/sys/vm/drop_caches` (drops the FUSE page cache,\n"
                 "dentries and inodes too)." if bench.cold_ok else f"Cold rows skipped: {bench.cold_error}.")
    plain_md = f"""{PLAIN_TITLE}

Measured {started:%Y-%m-%d %H:%M %Z} with (from the repository root, as root):

    {command}

Machine: {facts}. Code: {code}.

> Caveat: this is a shared, noisy 2-core VM — absolute times are noise. Read the ratios: each is the
> median of per-round ratios, with the systems measured side by side in one run.

Method: {args.rounds} round(s); in each round every workload runs on native (the source directory),
a SparseFS mirror mount (`sparsefs mount SRC MNT`, default options, source watcher on) and
`scripts/minimal_passthrough.py` (mfusepy, kernel_cache, attr/entry_timeout=5, negative_timeout=0,
use_ino, multithreaded, no flush handler), interleaved with the order rotating per round. Only the
system being timed is mounted (mount → cold run → {args.warm_reps} warm runs, median → unmount).
{cold_note} Times are medians over rounds; the range column is min–max of the per-round
SparseFS/minimal ratio. Bar: SparseFS/minimal ≤ {BAR_RATIO}× (**bold** = over).

{table}
"""
    if over:
        plain_md += "\nOver the bar: " + "; ".join(over) + ".\n"
    intent_md = f"""{INTENT_TITLE}

Same run and machine as above. `cat 'big.txt@intent=<question>'` on a {sizes.text_mb:g} MB text made of the
COVID-QA dev and QMSum documents (../shared/data/qa), intents are {sizes.intents} dataset questions
(rotated per round). Cold = the first intent read after a fresh SparseFS mount (parse + index), with the
page cache warm, and again after a fresh mount + drop_caches; warm = {sizes.intents - 1} other intents on the
same file right after (index cached), median per round. Times include starting `cat`.

{intent_table(bench.intent_results) if bench.intent_results.rows else "(intent workload not run)"}
"""
    print()
    print(plain_md)
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
