#!/usr/bin/env python3
"""Metadata at native pace (issue 19): git, find, stat, grep, rg, rm -rf and cat through the mount vs native.

Generates (once, reused) a source tree that looks like a project in a git
repository: ``--tree 10k`` is 8,000 tracked files in 400 directories plus
2,000 ignored ones under ``node_modules/``; ``50k`` is five times that. A few
tracked files are modified and a few are untracked, so ``git status`` and
``git diff`` have something to say. Then, per round, every system is mounted
in turn (the order rotates between rounds; only the system being timed is
mounted) and runs the same sequence:

* ``cat-cold``: ``drop_caches``, then cat of every file outside ``.git``;
* a warm-up pass of every command (not timed);
* **steady**: each command three times back to back (median);
* **cadence**: real-use rhythm: each command once after ``--pause`` seconds
  (default 7 s, longer than the old 5 s attribute timeouts), with every other
  command run in between;
* ``rm-rf``: a 2,000-file subtree copied into the source (natively, outside
  the mount, then listed once through it) is removed through the mount.

Systems: ``native`` (the source directory itself), ``kernel`` and ``mfusepy``
(``sparsefs mount SRC MNT --backend ...``), ``kernel@REV`` (the kernel
backend at another commit, e.g. the one before issue 19), and any of these
with ``+FLAG`` appended for an extra mount flag (``kernel+--no-open``). Each
mount runs a snapshot of its commit (``--code``, default HEAD), so edits made
during a run do not change what is measured.

Request counts: in the last round every timed FUSE command also counts the
requests the kernel sends its connection, per opcode, from the tracepoint
``fuse:fuse_request_send`` (a private tracefs instance filtered on the
connection). Reported: per tree and cadence, the median time per system, the
median of per-round ratios to native, and the requests per opcode.

    .venv/bin/python scripts/bench_metadata.py --tree 10k --rounds 5 \\
        --systems native,kernel,mfusepy,kernel@38b55b0
    .venv/bin/python scripts/bench_metadata.py --tree 50k --rounds 3 --systems native,kernel,kernel@38b55b0

Needs root (mounting, drop_caches, tracefs). Prints markdown tables and
writes every raw value to the run directory's results.json.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_fuse import snapshot_dir

REPO = Path(__file__).resolve().parents[1]
ROOT = Path("/tmp/sparsefs-bench")
TRACEFS = Path("/sys/kernel/tracing")
RARE = "quizzaciously"
TREES = {"10k": (400, 20, 2000), "50k": (2000, 20, 10000)}  # directories, files per directory, ignored files
OPCODES = {
    1: "LOOKUP", 2: "FORGET", 3: "GETATTR", 4: "SETATTR", 5: "READLINK", 9: "MKDIR", 10: "UNLINK", 11: "RMDIR",
    12: "RENAME", 14: "OPEN", 15: "READ", 16: "WRITE", 17: "STATFS", 18: "RELEASE", 22: "GETXATTR",
    23: "LISTXATTR", 25: "FLUSH", 27: "OPENDIR", 28: "READDIR", 29: "RELEASEDIR", 34: "ACCESS", 35: "CREATE",
    39: "IOCTL", 42: "BATCH_FORGET", 44: "READDIRPLUS", 45: "RENAME2", 52: "STATX",
}
OUTSIDE_GIT = ["find", ".", "-path", "./.git", "-prune", "-o", "-type", "f", "-exec", "cat", "{}", "+"]
COMMANDS: dict[str, list[str]] = {
    "git status": ["git", "status", "--porcelain"],
    "git diff": ["git", "diff"],
    "find": ["find", "."],
    "stat": ["find", ".", "-printf", "%s\\n"],
    "grep -r": ["grep", "-r", RARE, "."],
    "rg": ["rg", RARE],
    "cat every file": OUTSIDE_GIT,
}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---- the tree ---------------------------------------------------------------------------------
def make_tree(name: str) -> Path:
    """The source tree for ``name`` (generated once): a git repository with edits, untracked and ignored files."""
    dirs, per_dir, ignored = TREES[name]
    base = ROOT / f"meta-{name}"
    src = base / "src"
    if (base / "ready").exists():
        return src
    shutil.rmtree(base, ignore_errors=True)
    rng = random.Random(19)
    words = [f"{rng.choice('bcdfglmnprst')}{rng.choice('aeiou')}{rng.choice('klmnrst')}{i}" for i in range(3000)]
    for d in range(dirs):
        folder = src / f"pkg{d // 20:03d}" / f"mod{d:04d}"
        folder.mkdir(parents=True)
        for f in range(per_dir):
            lines = [f"def f{f}_{i}(x):\n    return x + {' + '.join(rng.sample(words, 4))}\n"
                     for i in range(rng.randint(2, 40))]
            (folder / f"file{f:02d}.py").write_text("".join(lines))
    modules = src / "node_modules"
    for i in range(ignored):
        folder = modules / f"dep{i // 50:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"index{i % 50:02d}.js").write_text(f"module.exports = {i};\n" * rng.randint(1, 30))
    (src / ".gitignore").write_text("node_modules/\n")
    (src / "rare.txt").write_text(f"one {RARE} line\n")
    _git(src, "init", "-q")
    _git(src, "add", "-A")
    _git(src, "commit", "-qm", "generated")
    for d in range(0, dirs, dirs // 5):
        with open(src / f"pkg{d // 20:03d}" / f"mod{d:04d}" / "file00.py", "a") as out:
            out.write("# edited\n")
        (src / f"pkg{d // 20:03d}" / f"untracked{d}.txt").write_text("new\n")
    template = base / "rm-template"
    for i in range(2000):
        folder = template / f"d{i // 50:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{i % 50:02d}.txt").write_text("x" * (i % 700))
    (base / "ready").write_text("ok\n")
    return src


def _git(cwd: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@b"}
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, timeout=600)


# ---- systems and mounts -----------------------------------------------------------------------
@dataclass(frozen=True)
class System:
    """``native``, or a backend at a commit with extra mount flags: ``kernel@REV+--flag``."""

    spec: str
    backend: str = ""
    rev: str = "HEAD"
    flags: tuple[str, ...] = ()

    @classmethod
    def parse(cls, spec: str) -> System:
        head, *flags = spec.split("+")
        backend, _, rev = head.partition("@")
        return cls(spec, "" if backend == "native" else backend, rev or "HEAD", tuple(flags))


def snapshot(rev: str) -> Path:
    """The committed packages of ``rev``, extracted once: what a mount of that revision runs."""
    return snapshot_dir(rev)[1]


@contextmanager
def mounted(system: System, src: Path, run_dir: Path) -> Iterator[Path]:
    """``src`` as ``system`` serves it (native: itself); always unmounted afterwards."""
    if not system.backend:
        yield src
        return
    mnt, state = run_dir / "mnt", run_dir / f"state-{abs(hash(system.spec))}"
    mnt.mkdir(exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(snapshot(system.rev))}
    command = [sys.executable, "-m", "sparsefs", "mount", str(src), str(mnt), "--state-dir", str(state),
               "--backend", system.backend, *system.flags]
    done = subprocess.run(command, env=env, cwd="/", capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"mount {system.spec} failed: {done.stdout}{done.stderr}")
    try:
        yield mnt
    finally:
        subprocess.run([sys.executable, "-m", "sparsefs", "umount", str(mnt)], env=env, cwd="/",
                       capture_output=True, timeout=60, check=False)
        if any(line.split()[4] == str(mnt) for line in Path("/proc/self/mountinfo").read_text().splitlines()):
            subprocess.run(["umount", "-l", str(mnt)], check=False, timeout=30)


def drop_caches() -> None:
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")
    time.sleep(0.3)


# ---- request counts from the tracepoint ------------------------------------------------------
class Requests:
    """Counts of ``fuse_request_send`` per opcode for one connection, in a private tracefs instance."""

    def __init__(self) -> None:
        self.dir = TRACEFS / "instances" / f"sparsefs-meta-{os.getpid()}"
        self.dir.mkdir(exist_ok=True)
        (self.dir / "buffer_size_kb").write_text("65536\n")
        (self.dir / "tracing_on").write_text("0\n")

    def start(self, mnt: Path) -> None:
        event = self.dir / "events" / "fuse" / "fuse_request_send"
        (event / "filter").write_text(f"connection == {os.minor(os.stat(mnt).st_dev)}\n")
        (event / "enable").write_text("1\n")
        (self.dir / "trace").write_text("")
        (self.dir / "tracing_on").write_text("1\n")

    def stop(self) -> dict[str, int]:
        (self.dir / "tracing_on").write_text("0\n")
        counts: collections.Counter[str] = collections.Counter()
        for line in (self.dir / "trace").read_text(errors="replace").splitlines():
            if "opcode" in line and not line.startswith("#"):
                code = int(line.split("opcode ", 1)[1].split()[0])
                counts[OPCODES.get(code, f"op{code}")] += 1
            elif line.startswith("# entries-in-buffer/entries-written:"):
                kept, written = line.split(":", 1)[1].split()[0].split("/")
                if kept != written:
                    counts["LOST"] = int(written) - int(kept)
        return dict(counts)

    def close(self) -> None:
        (self.dir / "tracing_on").write_text("0\n")
        for _ in range(20):
            try:
                self.dir.rmdir()
                return
            except OSError:
                time.sleep(0.1)


# ---- timing -----------------------------------------------------------------------------------
def timed(command: list[str], cwd: Path, timeout: float = 900) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, timeout=timeout, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode not in (0, 1):  # grep and rg answer 1 for no match
        raise RuntimeError(f"{command} in {cwd}: exit {done.returncode}: {done.stderr[:300]!r}")
    return elapsed


@dataclass
class Results:
    """times[tree][cadence][command][system] -> one value per round; counts[...][system] -> opcode counts."""

    times: dict[str, dict[str, dict[str, dict[str, list[float]]]]] = field(default_factory=dict)
    counts: dict[str, dict[str, dict[str, dict[str, dict[str, int]]]]] = field(default_factory=dict)

    def add(self, tree: str, cadence: str, command: str, system: str, value: float) -> None:
        row = self.times.setdefault(tree, {}).setdefault(cadence, {}).setdefault(command, {})
        row.setdefault(system, []).append(value)

    def count(self, tree: str, cadence: str, command: str, system: str, counts: dict[str, int]) -> None:
        self.counts.setdefault(tree, {}).setdefault(cadence, {}).setdefault(command, {})[system] = counts


class Bench:
    def __init__(self, args: argparse.Namespace, results: Results, run_dir: Path) -> None:
        self.args = args
        self.results = results
        self.run_dir = run_dir
        self.requests = Requests()
        self.commands = {name: cmd for name, cmd in COMMANDS.items() if shutil.which(cmd[0])
                         and name in args.commands}

    def measure(self, tree: str, cadence: str, name: str, system: System, root: Path, count: bool,
                command: list[str] | None = None, repeat: int = 1) -> None:
        """Time ``command`` ``repeat`` times back to back (median); count the requests of the last run."""
        values = [timed(command or self.commands[name], root) for _ in range(repeat - 1)]
        counting = count and bool(system.backend)
        if counting:
            self.requests.start(root)
        values.append(timed(command or self.commands[name], root))
        if counting:
            self.results.count(tree, cadence, name, system.spec, self.requests.stop())
        self.results.add(tree, cadence, name, system.spec, statistics.median(values))

    def one_system(self, tree: str, src: Path, system: System, last: bool) -> None:
        with mounted(system, src, self.run_dir) as root:
            drop_caches()
            self.measure(tree, "cold", "cat every file", system, root, last, OUTSIDE_GIT)
            for command in self.commands.values():
                timed(command, root)
            for name in self.commands:
                self.measure(tree, "steady", name, system, root, last, repeat=3)
            for name in self.commands:
                time.sleep(self.args.pause)
                self.measure(tree, "cadence", name, system, root, last)
            self.rm_rf(tree, src, root, system, last)

    def rm_rf(self, tree: str, src: Path, root: Path, system: System, count: bool) -> None:
        victim = src / "rm-me"
        shutil.rmtree(victim, ignore_errors=True)
        shutil.copytree(src.parent / "rm-template", victim)
        time.sleep(1.0)  # the mount's watcher hears of 2,000 new files
        timed(["find", "rm-me"], root)  # listed once, as a user would before removing it
        time.sleep(self.args.pause)
        self.measure(tree, "cadence", "rm -rf (2,000 files)", system, root, count, ["rm", "-rf", "rm-me"])
        if victim.exists():
            raise RuntimeError(f"rm -rf through {system.spec} left {victim}")

    def run(self, tree: str, systems: list[System]) -> None:
        src = make_tree(tree)
        for rnd in range(self.args.rounds):
            order = systems[rnd % len(systems):] + systems[: rnd % len(systems)]
            for system in order:
                log(f"{tree} round {rnd + 1}/{self.args.rounds}: {system.spec}")
                self.one_system(tree, src, system, last=rnd == self.args.rounds - 1)


# ---- report -----------------------------------------------------------------------------------
def fmt(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds >= 0.1 else f"{seconds * 1000:.1f} ms"


def table(results: Results, tree: str, cadence: str, systems: list[System]) -> str:
    rows = results.times.get(tree, {}).get(cadence, {})
    names = [s.spec for s in systems]
    head = "| command | " + " | ".join(names) + " |\n|---|" + "---|" * len(names) + "\n"
    out = []
    for command, per in rows.items():
        native = per.get("native")
        cells = []
        for name in names:
            values = per.get(name)
            if not values:
                cells.append("—")
                continue
            cell = fmt(statistics.median(values))
            if native and name != "native":
                ratios = [v / n for v, n in zip(values, native, strict=False)]
                cell += f" ({statistics.median(ratios):.2f}×)"
            cells.append(cell)
        out.append(f"| {command} | " + " | ".join(cells) + " |")
    return head + "\n".join(out) + "\n"


def counts_table(results: Results, tree: str, cadence: str, systems: list[System]) -> str:
    rows = results.counts.get(tree, {}).get(cadence, {})
    fuse = [s.spec for s in systems if s.backend]
    head = "| command | " + " | ".join(fuse) + " |\n|---|" + "---|" * len(fuse) + "\n"
    out = []
    for command, per in rows.items():
        cells = []
        for name in fuse:
            counts = per.get(name, {})
            total = sum(v for k, v in counts.items() if k != "LOST")
            top = ", ".join(f"{k} {v:,}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]) if k != "LOST")
            cells.append(f"{total:,}: {top}" if counts else "0")
        out.append(f"| {command} | " + " | ".join(cells) + " |")
    return head + "\n".join(out) + "\n"


def report(results: Results, trees: list[str], systems: list[System]) -> str:
    parts = []
    for tree in trees:
        for cadence, title in (("cadence", "real-use cadence (each command after a pause, others between)"),
                               ("steady", "steady state (three runs back to back, median)"),
                               ("cold", "cold (after drop_caches)")):
            if results.times.get(tree, {}).get(cadence):
                parts.append(f"#### {tree} tree, {title}\n\n" + table(results, tree, cadence, systems))
                if results.counts.get(tree, {}).get(cadence):
                    parts.append(f"Requests per command ({tree}, {cadence}, last round):\n\n"
                                 + counts_table(results, tree, cadence, systems))
    return "\n".join(parts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", default="10k", help="comma-separated: 10k, 50k")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--systems", default="native,kernel,mfusepy")
    parser.add_argument("--pause", type=float, default=7.0, help="seconds before each command in the cadence pass")
    parser.add_argument("--commands", default=",".join(COMMANDS), help="subset of: " + ", ".join(COMMANDS))
    args = parser.parse_args()
    args.commands = set(args.commands.split(","))
    if os.geteuid() != 0:
        parser.error("needs root (mount, drop_caches, tracefs)")
    systems = [System.parse(spec) for spec in args.systems.split(",")]
    run_dir = ROOT / f"meta-run-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir.mkdir(parents=True)
    results = Results()
    bench = Bench(args, results, run_dir)
    trees = args.tree.split(",")
    try:
        for tree in trees:
            bench.run(tree, systems)
    finally:
        bench.requests.close()
        (run_dir / "results.json").write_text(json.dumps({"times": results.times, "counts": results.counts,
                                                          "args": vars(args) | {"commands": sorted(args.commands)}},
                                                         indent=1))
    print(f"Run: {run_dir}; systems {', '.join(s.spec for s in systems)}; "
          f"{args.rounds} rounds; pause {args.pause:g} s; kernel {os.uname().release}\n")
    print(report(results, trees, systems))
    return 0


if __name__ == "__main__":
    sys.exit(main())
