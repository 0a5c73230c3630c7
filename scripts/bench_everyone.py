#!/usr/bin/env python3
"""Fast for everyone (issue 26): root and ordinary-user mounts, with and without passthrough, beside native.

The tree is bench_metadata's 10k tree (8,000 tracked files in 400 directories,
2,000 ignored, a few edits) plus: a second git branch rewriting half the
tracked files (for the checkouts), a small npm project (``express``, installed
from the local npm cache), and a pytest suite of 30 files. Systems:

* ``native``, ``kernel``, ``kernel+--no-passthrough``, ``kernel+--no-open``,
  ``mfusepy`` (``+FLAG`` adds a mount flag; ``@REV`` runs another commit):
  the daemon and the commands run as root;
* ``user:native``, ``user:kernel``, ``user:mfusepy``...: the daemon and every
  command run as nobody, on a copy of the tree nobody owns; the mount is made
  by fusermount3 (no CAP_SYS_ADMIN, so no passthrough), in a private mount
  namespace where /dev/fuse is 0666 as on a standard distribution
  (tests/usermount.py says why).

Every command of every system is run and timed by a runner process of the
same user (a small Python loop around ``subprocess.run`` and
``perf_counter``), so root and user rows pay the same overhead, and each
``user:*`` row is compared with ``user:native``, every other row with
``native``. Per round, each system is mounted in turn (the order rotates),
warmed up once, then runs the read workloads in the real-use cadence (each
after ``--pause`` seconds) and the write workloads once, in order.
Request counts are the kernel backend's own (``kernel_requests`` in
stats.json, read before and after each command; the reads of stats.json
itself are subtracted). Reported: medians of per-round times, medians of
per-round ratios to native, and requests per command (last round).

    .venv/bin/python scripts/bench_everyone.py --rounds 3 \\
        --systems native,kernel,kernel+--no-passthrough,kernel+--no-open,mfusepy,user:native,user:kernel,user:mfusepy

Needs root. Prints markdown tables; raw values go to the run directory's results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench_metadata as meta

from tests import usermount

ROOT = meta.ROOT
EXCLUDE = ["npm-project/", "pytests/", "scratch/"]
READS: dict[str, list[str]] = {
    "git status": ["git", "status", "--porcelain"],
    "find": ["find", "."],
    "stat": ["find", ".", "-printf", "%s\\n"],
    "grep -r": ["grep", "-r", meta.RARE, "."],
    "rg": ["rg", meta.RARE],
    "cat every file": meta.OUTSIDE_GIT,
    "tar": ["sh", "-c", "tar cf - --exclude=./.git . | cat > /dev/null"],
}
SMALL_WRITES = ("import os\nfd = os.open('scratch/writes.log', os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)\n"
                "for _ in range(50000):\n    os.write(fd, b'0123456789')\n"
                "os.close(fd)\nos.unlink('scratch/writes.log')\n")
SQLITE = ("import os, sqlite3\ndb = sqlite3.connect('scratch/bench.db')\n"
          "db.execute('create table t (k integer primary key, v text)')\ndb.commit()\n"
          "for i in range(300):\n    db.execute('insert into t (v) values (?)', ('x' * 100,))\n    db.commit()\n"
          "db.close()\nos.unlink('scratch/bench.db')\n")
RUNNER = ("import json, subprocess, sys, time\n"
          "for line in sys.stdin:\n"
          "    job = json.loads(line)\n"
          "    started = time.perf_counter()\n"
          "    try:\n"
          "        done = subprocess.run(job['cmd'], cwd=job['cwd'], stdin=subprocess.DEVNULL,\n"
          "                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=job['timeout'],\n"
          "                              env=job['env'])\n"
          "        rc, err = done.returncode, done.stderr[-300:].decode(errors='replace')\n"
          "    except (OSError, subprocess.SubprocessError) as exc:\n"
          "        rc, err = -1, repr(exc)\n"
          "    print(json.dumps({'s': time.perf_counter() - started, 'rc': rc, 'err': err}), flush=True)\n")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---- the tree --------------------------------------------------------------------------------
def make_tree() -> Path:
    """bench_metadata's 10k tree, plus the branch, the npm project and the pytest suite (once)."""
    src = meta.make_tree("10k")
    ready = src.parent / "ready-everyone"
    if ready.exists():
        return src
    with open(src / ".git" / "info" / "exclude", "a") as exclude:
        exclude.write("\n".join(EXCLUDE) + "\n")
    if "other" not in meta_git(src, "branch", "--list", "other"):
        meta_git(src, "stash", "-q")
        meta_git(src, "checkout", "-qb", "other")
        for index, path in enumerate(sorted(src.glob("pkg*/mod*/file*.py"))):
            if index % 2 == 0:
                path.write_text(path.read_text() + "# other branch\n")
        meta_git(src, "commit", "-qam", "other branch")
        meta_git(src, "checkout", "-q", "master")
        meta_git(src, "stash", "pop", "-q")
    (src / "scratch").mkdir(exist_ok=True)
    npm = src / "npm-project"
    npm.mkdir(exist_ok=True)
    (npm / "package.json").write_text(json.dumps({"name": "bench", "version": "1.0.0", "private": True,
                                                  "dependencies": {"express": "^4.19.2"}}))
    subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--ignore-scripts"], cwd=npm, check=True,
                   capture_output=True, timeout=600)  # fills the npm cache; later installs are offline
    tests = src / "pytests"
    tests.mkdir(exist_ok=True)
    for index in range(30):
        body = "".join(f"def test_{index}_{case}():\n    assert sum(range({case})) == {case * (case - 1) // 2}\n"
                       for case in range(10))
        (tests / f"test_m{index:02d}.py").write_text(body)
    ready.write_text("ok\n")
    return src


def meta_git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@b"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True,
                          timeout=600).stdout


def user_copy(src: Path) -> Path:
    """The tree, copied once for nobody (who must own what it writes)."""
    base = ROOT / "user-10k"
    if not (base / "ready").exists():
        shutil.rmtree(base, ignore_errors=True)
        (base / "npm-cache").mkdir(parents=True)
        subprocess.run(["cp", "-a", str(src), str(base / "src")], check=True, timeout=1800)
        shutil.copytree(Path.home() / ".npm", base / "npm-cache", dirs_exist_ok=True, symlinks=True)
        subprocess.run(["chown", "-R", f"{usermount.USER}:{usermount.USER}", str(base)], check=True, timeout=600)
        os.chmod(base, 0o755)
        (base / "ready").write_text("ok\n")
    return base


# ---- systems ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class System:
    spec: str
    user: bool
    inner: meta.System

    @classmethod
    def parse(cls, spec: str) -> System:
        user = spec.startswith("user:")
        return cls(spec, user, meta.System.parse(spec.removeprefix("user:")))

    @property
    def native(self) -> str:
        return "user:native" if self.user else "native"


class Runner:
    """A process of the measured user that runs commands and times them."""

    def __init__(self, prefix: list[str], python: str, env: dict[str, str]) -> None:
        self.env = env
        self.proc = subprocess.Popen([*prefix, python, "-I", "-c", RUNNER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, cwd="/")

    def run(self, command: list[str], cwd: Path, timeout: float = 900) -> float:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps({"cmd": command, "cwd": str(cwd), "timeout": timeout, "env": self.env})
                              + "\n")
        self.proc.stdin.flush()
        result = json.loads(self.proc.stdout.readline())
        if result["rc"] not in (0, 1):
            raise RuntimeError(f"{command} in {cwd}: exit {result['rc']}: {result['err']}")
        return float(result["s"])

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


def _env(home: Path, npm_cache: Path) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LC_ALL": "C.UTF-8",
            "npm_config_cache": str(npm_cache), "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b",
            "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@b"}


@contextmanager
def serving(system: System, src: Path, run_dir: Path) -> Iterator[tuple[Path, Runner]]:
    """(the root commands run in, a runner of the system's user); always unmounted afterwards."""
    if not system.user:
        with meta.mounted(system.inner, src, run_dir) as root:
            runner = Runner([], sys.executable, _env(Path.home(), Path.home() / ".npm"))
            try:
                yield root, runner
            finally:
                runner.close()
        return
    base = user_copy(src)
    env = _env(base, base / "npm-cache")
    python = str(usermount.user_python())
    if not system.inner.backend:
        runner = Runner(usermount.AS_USER, python, env)
        try:
            yield base / "src", runner
        finally:
            runner.close()
        return
    code = str(meta.snapshot(system.inner.rev))
    mount = usermount.start(base, base / "src", *system.inner.flags, backend=system.inner.backend, code=code)
    runner = Runner(["nsenter", "-m", "-t", str(mount.process.pid), *usermount.AS_USER], python, env)
    try:
        yield mount.mountpoint, runner
    finally:
        runner.close()
        usermount.stop(mount)


# ---- measuring -------------------------------------------------------------------------------
@dataclass
class Results:
    times: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # command -> system -> per round
    counts: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)  # command -> system -> opcodes

    def add(self, command: str, system: str, seconds: float) -> None:
        self.times.setdefault(command, {}).setdefault(system, []).append(seconds)


class Bench:
    def __init__(self, args: argparse.Namespace, results: Results, run_dir: Path) -> None:
        self.args = args
        self.results = results
        self.run_dir = run_dir

    def one(self, system: System, name: str, command: list[str], root: Path, runner: Runner, counts: Any) -> None:
        before = counts()
        seconds = runner.run(command, root)
        after = counts()
        self.results.add(name, system.spec, seconds)
        if after or before:
            own = counts.own  # one read of stats.json: its share falls between the two snapshots
            delta = {op: after.get(op, 0) - before.get(op, 0) - own.get(op, 0) for op in after}
            self.results.counts.setdefault(name, {})[system.spec] = {op: n for op, n in delta.items() if n > 0}

    def system_round(self, system: System, src: Path) -> None:
        with serving(system, src, self.run_dir) as (root, runner):
            counts = self._counter(system, root, runner)
            for command in READS.values():
                runner.run(command, root)  # warm-up
            for name, command in READS.items():
                time.sleep(self.args.pause)
                self.one(system, name, command, root, runner, counts)
            if "--no-open" not in system.inner.flags:  # a read-only mount: no write workload
                self.writes(system, root, runner, counts)

    def _counter(self, system: System, root: Path, runner: Runner) -> Any:
        """A function returning the kernel backend's request counts now, minus its own reads' share."""
        if system.inner.backend != "kernel":
            def nothing() -> dict[str, int]:
                return {}
            nothing.own = {}  # type: ignore[attr-defined]
            return nothing
        stats = str(root / ".sparsefs" / "stats.json")

        def read() -> dict[str, int]:
            out = subprocess.run([*self._prefix(system, runner), "cat", stats], capture_output=True, text=True,
                                 timeout=30, check=True).stdout
            return dict(json.loads(out)["kernel_requests"])

        first, second = read(), read()
        read.own = {op: second.get(op, 0) - first.get(op, 0) for op in second}  # type: ignore[attr-defined]
        return read

    @staticmethod
    def _prefix(system: System, runner: Runner) -> list[str]:
        """How to run a one-off command as the system's user (in its namespace)."""
        args = [str(arg) for arg in runner.proc.args]  # type: ignore[union-attr]
        return args[: args.index("-I") - 1]

    def writes(self, system: System, root: Path, runner: Runner, counts: Any) -> None:
        python = str(usermount.user_python()) if system.user else sys.executable
        steps: list[tuple[str, list[str], Path]] = [
            ("checkout (4,000 files)", ["git", "checkout", "-q", "other"], root),
            ("first git status after checkout", ["git", "status", "--porcelain"], root),
            ("checkout back", ["git", "checkout", "-q", "master"], root),
            ("first git status after checkout back", ["git", "status", "--porcelain"], root),
            ("small writes (50,000 x 10 B)", [python, "-I", "-c", SMALL_WRITES], root),
            ("sqlite (300 commits)", [python, "-I", "-c", SQLITE], root),
            ("npm install (express, offline)", ["sh", "-c", NPM], root / "npm-project"),
            ("pytest (300 tests)", [python, "-c", PYTEST, "pytests"], root),
        ]
        runner.run(["git", "stash", "-q"], root)
        try:
            for name, command, cwd in steps:
                time.sleep(self.args.pause / 2)
                self.one(system, name, command, cwd, runner, counts)
        finally:
            runner.run(["git", "checkout", "-q", "master"], root)
            runner.run(["git", "stash", "pop", "-q"], root)

    def run(self, systems: list[System]) -> None:
        src = make_tree()
        for rnd in range(self.args.rounds):
            order = systems[rnd % len(systems):] + systems[: rnd % len(systems)]
            for system in order:
                log(f"round {rnd + 1}/{self.args.rounds}: {system.spec} (load {os.getloadavg()[0]:.1f})")
                self.system_round(system, src)


NPM = "rm -rf node_modules package-lock.json && npm install --offline --no-audit --no-fund --ignore-scripts"
PYTEST = ("import site, sys\n"
          f"site.addsitedir({json.dumps(sysconfig.get_paths()['purelib'])})\n"
          "import pytest\nsys.exit(pytest.main(['-q', sys.argv[1]]))\n")


# ---- report ----------------------------------------------------------------------------------
def table(results: Results, systems: list[System]) -> str:
    names = [s.spec for s in systems]
    head = "| command | " + " | ".join(names) + " |\n|---|" + "---|" * len(names) + "\n"
    rows = []
    for command, per in results.times.items():
        cells = []
        for system in systems:
            values, native = per.get(system.spec), per.get(system.native)
            if not values:
                cells.append("—")
                continue
            cell = meta.fmt(statistics.median(values))
            if native and system.spec != system.native:
                ratios = [v / n for v, n in zip(values, native, strict=False)]
                cell += f" ({statistics.median(ratios):.2f}×)"
            cells.append(cell)
        rows.append(f"| {command} | " + " | ".join(cells) + " |")
    return head + "\n".join(rows) + "\n"


def counts_table(results: Results, systems: list[System]) -> str:
    kernel = [s.spec for s in systems if s.inner.backend == "kernel"]
    head = "| command | " + " | ".join(kernel) + " |\n|---|" + "---|" * len(kernel) + "\n"
    rows = []
    for command, per in results.counts.items():
        cells = []
        for spec in kernel:
            counts = per.get(spec, {})
            top = ", ".join(f"{op} {n:,}" for op, n in sorted(counts.items(), key=lambda kv: -kv[1])[:5])
            cells.append(f"{sum(counts.values()):,}: {top}" if counts else "0")
        rows.append(f"| {command} | " + " | ".join(cells) + " |")
    return head + "\n".join(rows) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--systems", default="native,kernel,kernel+--no-passthrough,mfusepy,user:native,user:kernel")
    parser.add_argument("--pause", type=float, default=7.0, help="seconds before each read command (cadence)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        parser.error("needs root (mounting, the ordinary user's namespace)")
    systems = [System.parse(spec) for spec in args.systems.split(",")]
    run_dir = ROOT / f"everyone-run-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir.mkdir(parents=True)
    results = Results()
    load_before = os.getloadavg()
    try:
        Bench(args, results, run_dir).run(systems)
    finally:
        (run_dir / "results.json").write_text(json.dumps({"times": results.times, "counts": results.counts,
                                                          "args": vars(args)}, indent=1))
    print(f"Run: {run_dir}; {args.rounds} rounds; pause {args.pause:g} s; kernel {os.uname().release}; "
          f"load average before {load_before[0]:.1f}, after {os.getloadavg()[0]:.1f}\n")
    print(table(results, systems))
    print("Requests per command (kernel backend, last round):\n\n" + counts_table(results, systems))
    return 0


if __name__ == "__main__":
    sys.exit(main())
