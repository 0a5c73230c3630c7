"""Real POSIX workloads through the mount (both backends) with the outcome they have natively.

The short version of scripts/bench_posix.py: fio --verify sequential and
random, git clone/commit/gc/fsck, sqlite3 WAL with concurrent writers, tar
extract + compare, rsync -c round trip, and an editor's atomic save. Each
workload checks its own outcome; natively every one passes.
"""

from __future__ import annotations

import errno
import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from tests import mountutil
from tests.conftest import kernel_family

Mount = mountutil.Mount
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_posix.py"
TOOLS = ("fio", "git", "sqlite3", "tar", "rsync", "diff")


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_posix", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_posix", module)
    spec.loader.exec_module(module)
    return module


BENCH = _bench()


@pytest.fixture(autouse=True)
def _tools() -> None:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"missing {missing}: scripts/setup installs them (apt fio git sqlite3 rsync)")


def test_every_workload_passes_through_the_mount(mirror: Mount, backend: str, tmp_path: Path) -> None:
    native = tmp_path / "native"
    native.mkdir()
    removed = _removed_outcomes(mirror.mountpoint)
    if kernel_family(backend):  # libfuse's path layer answers ESTALE for a node no path reaches (docs/SEMANTICS.md)
        assert removed == _removed_outcomes(native)
    failures = []
    for name in BENCH.WORKLOADS:
        if name != "atomic-save":
            passed, error, _ = BENCH.run_workload(name, mirror.mountpoint, 1)
            failures += [] if passed else [f"{name}: {error}"]
    assert not failures, "\n".join(failures)
    an_atomic_save_is_never_seen_torn_and_its_name_almost_never_missing(mirror, backend)


def an_atomic_save_is_never_seen_torn_and_its_name_almost_never_missing(mirror: Mount, backend: str) -> None:
    """Natively the name always holds one whole version. Through FUSE a reader whose path walk found the
    replaced file can, at that instant, still land on it: the daemon answers ESTALE and the kernel walks
    again (it used to answer ENOENT: 40 of 99 reads failed on the kernel backend); only a second rename
    inside that retry shows through, rarely (see docs/SEMANTICS.md)."""
    directory = mirror.mountpoint / "save"
    directory.mkdir()
    saves, missing, torn = BENCH.save_atomically(directory, 300)
    assert not torn
    assert len(missing) <= saves // 30, f"{len(missing)} of {saves} reads found no file: {missing[:3]}"


def _removed_outcomes(base: Path) -> list[str]:
    """What fstat, listdir and access answer on a removed directory, file and cwd still held open. The kernel
    backend answered ESTALE ("Stale file handle") where Linux answers with the last attributes, no links."""
    (base / "gone-dir").mkdir()
    (base / "gone.txt").write_text("x\n")
    (base / "gone-cwd").mkdir()
    dir_fd = os.open(base / "gone-dir", os.O_RDONLY | os.O_DIRECTORY)
    path_fd = os.open(base / "gone.txt", os.O_PATH)
    try:
        os.rmdir(base / "gone-dir")
        os.unlink(base / "gone.txt")
        outcomes = [_outcome(lambda: os.fstat(dir_fd).st_nlink), _outcome(lambda: os.listdir(dir_fd))]
        outcomes.append(_outcome(lambda: os.fstat(path_fd).st_nlink))
    finally:
        os.close(dir_fd)
        os.close(path_fd)
    cwd = (
        "import os, sys; os.chdir(sys.argv[1]); os.rmdir(sys.argv[1]); print(os.stat('.').st_nlink, os.access('.', 5))"
    )
    done = subprocess.run([sys.executable, "-c", cwd, base / "gone-cwd"], capture_output=True, text=True, timeout=30)
    return [*outcomes, done.stdout.strip() or done.stderr.strip().splitlines()[-1]]


def _outcome(op: Callable[[], object]) -> str:
    try:
        return repr(op())
    except OSError as err:
        return errno.errorcode.get(err.errno or 0, str(err))
