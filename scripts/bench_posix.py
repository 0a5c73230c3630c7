"""POSIX workloads on a SparseFS mount and on the native filesystem, side by side.

Each workload runs real third-party tools in a fresh directory and checks the
outcome itself; a workload passes when it passes natively and through the
mount alike (same checks, same result). Times are medians of ``--rounds``
runs; the ratio is mount / native.

Workloads:
  fio-seq      fio --verify=crc32c, sequential 1 MiB writes then verify
  fio-rand     fio --verify=crc32c, random 4 KiB writes then verify
  git          init, commit a tree, clone, commit in the clone, gc --aggressive, fsck --full
  sqlite-wal   a WAL database, 4 processes inserting concurrently, integrity_check, row count
  tar          extract a tarball, then tar --compare against it and diff -r against the tree
  rsync        rsync -a -c into the target and back out, diff -r both ways
  atomic-save  write-temp + fsync + rename over the file, a reader checking it is never torn

Usage:
  .venv/bin/python scripts/bench_posix.py [--rounds 3] [--backends kernel,mfusepy] [--scale 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests import mountutil  # noqa: E402

Workload = Callable[[Path, Path, int], None]  # (directory to work in, scratch outside it, scale)


def run(command: list[str], cwd: Path | None = None, timeout: float = 600) -> str:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(command)} -> {result.returncode}: {result.stderr[-600:]}")
    return result.stdout


def make_tree(top: Path, scale: int) -> None:
    """A small source-like tree: nested folders, text, a binary, an empty file, a symlink."""
    for d in range(4 * scale):
        folder = top / f"pkg{d}" / "sub"
        folder.mkdir(parents=True)
        for f in range(12):
            (folder / f"mod{f}.py").write_text(f"# module {d}.{f}\n" + "x = 1\n" * (f * 40 + d))
        (folder.parent / "data.bin").write_bytes(os.urandom(20_000 + d))
    (top / "empty").write_bytes(b"")
    (top / "link").symlink_to("pkg0/sub/mod0.py")


def fio(directory: Path, scratch: Path, scale: int, pattern: str, block: str) -> None:
    run(
        [
            "fio",
            "--name=verify",
            f"--directory={directory}",
            f"--rw={pattern}",
            f"--bs={block}",
            f"--size={16 * scale}M",
            "--verify=crc32c",
            "--verify_fatal=1",
            "--do_verify=1",
            "--ioengine=psync",
            "--numjobs=2",
            "--group_reporting",
            "--end_fsync=1",
            "--verify_state_save=0",  # else fio leaves local-verify-*.state files in the working directory
        ]
    )


def git(directory: Path, scratch: Path, scale: int) -> None:
    repo, env = directory / "repo", ["-c", "user.email=b@example.com", "-c", "user.name=bench"]
    make_tree(repo, scale)
    run(["git", "init", "-q"], cwd=repo)
    run(["git", *env, "add", "-A"], cwd=repo)
    run(["git", *env, "commit", "-qm", "first"], cwd=repo)
    run(["git", "clone", "-q", str(repo), str(directory / "clone")])
    clone = directory / "clone"
    (clone / "pkg0" / "new.py").write_text("y = 2\n" * 100)
    run(["git", *env, "add", "-A"], cwd=clone)
    run(["git", *env, "commit", "-qm", "second"], cwd=clone)
    run(["git", "gc", "-q", "--aggressive", "--prune=now"], cwd=clone)
    run(["git", "fsck", "--full", "--strict"], cwd=clone)
    assert run(["git", "rev-list", "--count", "HEAD"], cwd=clone).strip() == "2"


SQLITE_WRITER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], timeout=60, isolation_level=None)
db.execute("PRAGMA busy_timeout=60000")
for i in range(int(sys.argv[3])):
    db.execute("BEGIN IMMEDIATE")
    db.execute("INSERT INTO t(writer, n, payload) VALUES (?, ?, ?)", (int(sys.argv[2]), i, "p" * 200))
    db.execute("COMMIT")
"""


def sqlite_wal(directory: Path, scratch: Path, scale: int) -> None:
    path, writers, rows = directory / "db.sqlite", 4, 150 * scale
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
        db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, writer INT, n INT, payload TEXT)")
    procs = [
        subprocess.Popen([sys.executable, "-c", SQLITE_WRITER, str(path), str(w), str(rows)]) for w in range(writers)
    ]
    assert all(p.wait(timeout=600) == 0 for p in procs), "a writer failed"
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert db.execute("SELECT count(*), count(DISTINCT writer || '-' || n) FROM t").fetchone() == (
            writers * rows,
            writers * rows,
        )
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert run(["sqlite3", str(path), "PRAGMA integrity_check;"]).strip() == "ok"  # the CLI agrees


def tar(directory: Path, scratch: Path, scale: int) -> None:
    tree, archive = scratch / "tar-tree", scratch / "tree.tar"
    make_tree(tree, scale)
    with tarfile.open(archive, "w") as t:
        t.add(tree, arcname="tree")
    run(["tar", "-xf", str(archive), "-C", str(directory)])
    run(["tar", "--compare", "-f", str(archive), "-C", str(directory)])
    run(["diff", "-r", "--no-dereference", str(tree), str(directory / "tree")])


def rsync(directory: Path, scratch: Path, scale: int) -> None:
    tree, back = scratch / "rsync-tree", scratch / "rsync-back"
    make_tree(tree, scale)
    run(["rsync", "-a", "-c", f"{tree}/", f"{directory / 'copy'}/"])
    run(["rsync", "-a", "-c", f"{directory / 'copy'}/", f"{back}/"])
    run(["diff", "-r", "--no-dereference", str(tree), str(directory / "copy")])
    run(["diff", "-r", "--no-dereference", str(tree), str(back)])
    assert "pkg" not in run(["rsync", "-a", "-c", "-n", "-i", f"{tree}/", f"{directory / 'copy'}/"])


def atomic_save(directory: Path, scratch: Path, scale: int) -> None:
    saves, missing, torn = save_atomically(directory, 100 * scale)
    assert not torn and not missing, (
        f"{saves} saves: a reader saw {len(torn)} torn and {len(missing)} missing "
        f"files (natively the name always holds one whole version), e.g. {(torn + missing)[:2]}"
    )


def save_atomically(directory: Path, saves: int) -> tuple[int, list[str], list[str]]:
    """An editor's save (temp file, fsync, rename over) ``saves`` times while a reader re-reads the file:
    (saves, failed opens, reads that mixed versions)."""
    target, missing, torn, stop = directory / "doc.txt", list[str](), list[str](), threading.Event()
    target.write_text("version 0\n" * 500)

    def watch() -> None:
        while not stop.is_set():
            try:
                lines = set(target.read_text().splitlines())
            except OSError as err:
                missing.append(f"{type(err).__name__}: {err.strerror}")
                continue
            if len(lines) != 1:
                torn.append(f"{len(lines)} versions mixed")

    reader = threading.Thread(target=watch)
    reader.start()
    try:
        for v in range(1, saves):
            tmp = directory / f".doc.txt.{v}.tmp"
            with open(tmp, "w") as f:
                f.write(f"version {v}\n" * 500)
                f.flush()
                os.fsync(f.fileno())
            os.rename(tmp, target)
    finally:
        stop.set()
        reader.join()
    assert target.read_text() == f"version {saves - 1}\n" * 500
    assert sorted(os.listdir(directory)) == ["doc.txt"]
    return saves, missing, torn


WORKLOADS: dict[str, Workload] = {
    "fio-seq": lambda d, s, n: fio(d, s, n, "write", "1M"),
    "fio-rand": lambda d, s, n: fio(d, s, n, "randwrite", "4k"),
    "git": git,
    "sqlite-wal": sqlite_wal,
    "tar": tar,
    "rsync": rsync,
    "atomic-save": atomic_save,
}


@dataclass
class Outcome:
    """One workload on one target: pass/fail and the time of each round."""

    passed: bool = True
    error: str = ""
    seconds: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds) if self.seconds else float("nan")


def run_workload(name: str, directory: Path, scale: int) -> tuple[bool, str, float]:
    """Run one workload in a fresh subdirectory of ``directory``; (passed, error, seconds)."""
    work = directory / f"{name}-{time.monotonic_ns()}"
    work.mkdir()
    with tempfile.TemporaryDirectory(prefix="bench-posix-scratch-") as scratch:
        started = time.perf_counter()
        try:
            WORKLOADS[name](work, Path(scratch), scale)
        except (AssertionError, OSError, subprocess.SubprocessError, sqlite3.Error) as err:
            return False, f"{type(err).__name__}: {err}"[:800], time.perf_counter() - started
        elapsed = time.perf_counter() - started
    shutil.rmtree(work, ignore_errors=True)
    return True, "", elapsed


@contextmanager
def target(kind: str, base: Path) -> Iterator[Path]:
    """A directory to work in: native, or a mirror mount of a native directory with ``kind`` backend."""
    src = base / f"src-{kind}"
    src.mkdir()
    if kind == "native":
        yield src
        return
    mnt = base / f"mnt-{kind}"
    mnt.mkdir()
    mount = mountutil.start(src, mnt, base / f"state-{kind}", backend=kind)
    try:
        yield mnt
    finally:
        mountutil.stop(mount)


def measure(targets: list[str], names: list[str], rounds: int, scale: int) -> dict[str, dict[str, Outcome]]:
    results: dict[str, dict[str, Outcome]] = {t: {n: Outcome() for n in names} for t in targets}
    with tempfile.TemporaryDirectory(prefix="bench-posix-") as base:
        for kind in targets:
            with target(kind, Path(base)) as directory:
                for _ in range(rounds):  # interleaving rounds inside one mount keeps mount set-up out of the times
                    for name in names:
                        passed, error, seconds = run_workload(name, directory, scale)
                        outcome = results[kind][name]
                        outcome.seconds.append(seconds)
                        if not passed:
                            outcome.passed, outcome.error = False, error
    return results


def report(results: dict[str, dict[str, Outcome]], names: list[str]) -> str:
    kinds = list(results)
    head = (
        "| workload | "
        + " | ".join(f"{k} (s)" for k in kinds)
        + " | "
        + " | ".join(f"{k}/native" for k in kinds if k != "native")
        + " | same outcome |"
    )
    lines = [head, "|" + "---|" * (len(kinds) * 2 + 1)]
    for name in names:
        cells = [f"{results[k][name].median:.2f}" + ("" if results[k][name].passed else " FAIL") for k in kinds]
        native = results.get("native", {}).get(name)
        ratios = [f"{results[k][name].median / native.median:.2f}x" if native else "-" for k in kinds if k != "native"]
        same = len({results[k][name].passed for k in kinds}) == 1
        lines.append(f"| {name} | " + " | ".join(cells + ratios) + f" | {'yes' if same else 'NO'} |")
    errors = [f"- {k} {n}: {results[k][n].error}" for k in kinds for n in names if not results[k][n].passed]
    return "\n".join(lines + (["", *errors] if errors else []))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backends", default="kernel,mfusepy")
    parser.add_argument("--scale", type=int, default=1, help="grow every workload's data this many times")
    parser.add_argument("--only", default="", help="comma-separated workload names")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    names = [n for n in WORKLOADS if not args.only or n in args.only.split(",")]
    targets = ["native", *[b for b in args.backends.split(",") if b]]
    results = measure(targets, names, args.rounds, args.scale)
    print(report(results, names))
    if args.json:
        args.json.write_text(json.dumps({k: {n: vars(o) for n, o in v.items()} for k, v in results.items()}, indent=1))
    return 0 if all(o.passed for v in results.values() for o in v.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
