"""`sparsefs read` and the API beside a running mount: served through it, one episode state."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from sparsefs import ReadFailed, Workspace
from sparsefs.app.cli import main
from sparsefs.app.mountinfo import MountInfo, acquire_for_mount, write_info
from sparsefs.app.reading import mount_above
from sparsefs.store.state import StateDirBusy, StateLock
from tests import mountutil
from tests.conftest import HANG_GUARD_S, is_pack


@pytest.fixture
def mirror(workspace: Path, tmp_path: Path) -> Iterator[mountutil.Mount]:
    """One backend (the default) is enough: the route is plain file access through whichever serves the mount."""
    (tmp_path / "mnt").mkdir()
    yield from _mounted(workspace, tmp_path / "mnt", tmp_path / "state")


@pytest.fixture
def in_place(workspace: Path, tmp_path: Path) -> Iterator[mountutil.Mount]:
    yield from _mounted(workspace, None, tmp_path / "state")


def _mounted(source: Path, mountpoint: Path | None, state: Path) -> Iterator[mountutil.Mount]:
    mount = mountutil.start(source, mountpoint, state)
    try:
        with mountutil.hang_guard(mount, HANG_GUARD_S):
            yield mount
    finally:
        mountutil.stop(mount)


def run_read(*args: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "sparsefs", "read", *args], capture_output=True, cwd=cwd,
                          timeout=60, check=False)


def test_a_mirrored_source_is_read_through_its_mount(mirror: mountutil.Mount) -> None:
    ws = Workspace(mirror.source, mirror.state_dir, timeout=10)  # the mount holds this state dir
    first = ws.ask("annual-report.md", "intent", "R&D expenses 2023", fmt="json")
    assert first.route == "mount" and first.mountpoint == str(mirror.mountpoint)
    name = "annual-report.md@refine=engineers&format=json"
    through_mount = orjson.loads((mirror.mountpoint / name).read_bytes())
    assert through_mount["episode"] == first.json()["episode"]  # one episode, one Gate
    assert ws.read(name).content == (mirror.mountpoint / name).read_bytes()  # the same frozen pack
    episodes = list((mirror.mountpoint / ".sparsefs" / "episodes").iterdir())
    assert [p.name for p in episodes] == [f"{first.json()['episode']}.json"]
    stats = subprocess.run([sys.executable, "-m", "sparsefs", "stats", str(mirror.mountpoint), "--json"],
                           capture_output=True, timeout=60, check=True)
    summary = orjson.loads(stats.stdout)  # read from the mount's .sparsefs/log.jsonl
    assert summary["packs_served"] == 2 and summary["episodes"][0]["packs"] == 2
    assert summary["source"] == str(mirror.mountpoint / ".sparsefs" / "log.jsonl")


def test_a_path_inside_a_mount_goes_through_it(mirror: mountutil.Mount) -> None:
    assert mount_above(mirror.mountpoint / "nested") == (mirror.mountpoint, "nested")
    result = Workspace(mirror.mountpoint / "nested", mirror.state_dir).read("deeper/leaf.txt@raw")
    assert result.route == "mount" and result.content == b"leaf\n"


def test_cli_read_in_an_in_place_mount(in_place: mountutil.Mount) -> None:
    result = run_read("annual-report.md@intent=staff/headcount at year end", "-v", cwd=in_place.mountpoint)
    assert result.returncode == 0, result.stderr
    assert b"served mount" in result.stderr and result.stdout.startswith(b"annual-report.md@intent e")
    assert is_pack(result.stdout) and b"\n[L" in result.stdout  # the '/' in the intent took no path apart
    plain = run_read("annual-report.md", "--action", "raw", cwd=in_place.mountpoint)
    assert plain.stdout == (in_place.mountpoint / "annual-report.md").read_bytes()


def test_cli_read_without_a_mount(workspace: Path, tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(workspace)
    state = str(tmp_path / "state")
    code = main(["read", "annual-report.md", "--intent", "R&D expenses 2023", "-k", "2", "--json", "--state-dir",
                 state, "-v"])
    out, err = capsysbinary.readouterr()
    assert code == 0, err
    assert b"served in-process" in err and orjson.loads(out)["intent"] == "R&D expenses 2023"
    assert main(["read", "annual-report.md"]) == 1 and b"say what to read" in capsysbinary.readouterr().err
    assert main(["read", "/etc/passwd@raw", "--state-dir", state]) == 1
    out, err = capsysbinary.readouterr()
    assert b"outside the root" in err and not out


def test_an_in_place_mount_over_a_mount_point_is_the_one_read(workspace: Path, tmp_path: Path) -> None:
    """The workspace is itself a mount point (a bind mount here); SparseFS mounted over it shadows it."""
    subprocess.run(["mount", "--bind", str(workspace), str(workspace)], check=True, timeout=30)
    try:
        mount = mountutil.start(workspace, None, tmp_path / "state")
        try:
            assert mount_above(workspace) == (workspace, "")
            result = Workspace(workspace, tmp_path / "elsewhere", timeout=10).read("annual-report.md@raw")
            assert result.route == "mount" and result.mountpoint == str(workspace)
            assert not (tmp_path / "elsewhere").exists()  # no second writer of episode state
        finally:
            mountutil.stop(mount)
    finally:
        subprocess.run(["umount", "-l", str(workspace)], check=False, timeout=30)


def test_a_stale_mount_is_named_not_read(workspace: Path, tmp_path: Path) -> None:
    (tmp_path / "mnt").mkdir()
    mount = mountutil.start(workspace, tmp_path / "mnt", tmp_path / "state")
    try:
        os.kill(mount.process.pid, signal.SIGKILL)
        mount.process.wait(timeout=15)
        with pytest.raises(ReadFailed, match="stale SparseFS mount"):
            mount_above(tmp_path / "mnt" / "nested")
    finally:
        mountutil.stop(mount)


def test_a_mount_waits_for_a_reader_then_serves_its_reads(workspace: Path, tmp_path: Path) -> None:
    (tmp_path / "mnt").mkdir()
    state = tmp_path / "state"
    ws = Workspace(workspace, state, timeout=10)
    with ws:
        assert ws.route == "in-process"
        threading.Timer(1.0, ws.release).start()  # a `with` block that ends while the mount waits
        mount = mountutil.start(workspace, tmp_path / "mnt", state)
    try:
        assert "in use" not in mount.stderr()
        assert ws.read("annual-report.md@raw").route == "mount"
    finally:
        mountutil.stop(mount)


def test_who_holds_the_state_dir_decides_wait_or_refuse(tmp_path: Path) -> None:
    reader = StateLock(tmp_path)
    reader.acquire()
    try:
        started = time.monotonic()
        with pytest.raises(StateDirBusy, match=r"held by a SparseFS read \(pid \d+"):
            acquire_for_mount(StateLock(tmp_path), wait_s=0.3)
        assert time.monotonic() - started >= 0.3  # it waited for the reader
        write_info(tmp_path, MountInfo(os.getpid(), "/src", "/mnt/x", 3, str(tmp_path)))  # now "a mount" holds it
        with pytest.raises(StateDirBusy, match="in use by the SparseFS mount at /mnt/x"):
            acquire_for_mount(StateLock(tmp_path), wait_s=30)
    finally:
        reader.release()
    late = StateLock(tmp_path)
    acquire_for_mount(late, wait_s=0.3)
    late.release()
