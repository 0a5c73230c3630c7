"""Sources inotify cannot see (issue 25.10): a source on a network or FUSE filesystem, or one holding such a
mount, where another host changes files without this kernel knowing.

The stand-in for NFS is tests/remotefs.py (a FUSE passthrough whose backing folder the test changes
underneath, caching attributes 1 s as an NFS client does): this machine's kernel has no NFS. On both
backends: the mode chosen and why (stats.json, doctor), and another host's edits, new files and new names
seen on the next open, never after the 24 h caches a watched source gets (docs/SEMANTICS.md, "Sources
inotify cannot see").
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparsefs.fuse import mounts
from tests import mountutil
from tests.conftest import HANG_GUARD_S, is_pack
from tests.remotefs import ACTIMEO_S

REMOTEFS = Path(__file__).resolve().parents[1] / "remotefs.py"
SETTLE_S = ACTIMEO_S + 0.3  # the stand-in's own attribute cache (an NFS client's actimeo) must expire first


@pytest.fixture
def remote_share(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(backing folder, where it is mounted through the stand-in): the test writes the backing folder as
    another host writes an NFS export."""
    backing, share = tmp_path / "backing", tmp_path / "share"
    backing.mkdir()
    share.mkdir()
    (backing / "report.md").write_text("# Report\n\nRevenue grew 4 percent in 2023.\n" * 20)
    (backing / "small.txt").write_text("version one\n")
    process = _mount_remote(backing, share)
    try:
        yield backing, share
    finally:
        _unmount_remote(share, process)


def _mount_remote(backing: Path, at: Path) -> subprocess.Popen[bytes]:
    process = subprocess.Popen([sys.executable, str(REMOTEFS), str(backing), str(at)], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    ready = mountutil.wait_for(lambda: (e := mounts.find_mount(at)) is not None and e.fstype == "fuse.remotefs",
                               timeout=20)
    if not ready:
        _unmount_remote(at, process)
        pytest.fail("the stand-in remote filesystem did not mount")
    return process


def _unmount_remote(at: Path, process: subprocess.Popen[bytes]) -> None:
    if mounts.find_mount(at) is not None:
        subprocess.run(["fusermount3", "-u", "-z", str(at)], capture_output=True, timeout=10, check=False)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=5)


def _stats(mnt: Path) -> dict[str, Any]:
    return dict(json.loads((mnt / ".sparsefs" / "stats.json").read_bytes()))


def _rewrite(path: Path, text: str) -> None:
    """Another host's edit: new content of the same size, in place."""
    assert len(text) == path.stat().st_size
    with open(path, "r+") as out:
        out.write(text)


def test_a_source_on_a_remote_filesystem_is_checked_on_every_open(remote_share: tuple[Path, Path],
                                                                   tmp_path: Path, backend: str) -> None:
    backing, share = remote_share
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    mount = mountutil.start(share, mnt, tmp_path / "state", backend=backend)
    try:
        with mountutil.hang_guard(mount, HANG_GUARD_S):
            watcher = _stats(mnt)["watcher"]
            assert watcher["mode"] == "on-access" and watcher["filesystem"] == "fuse", watcher
            assert watcher["reason"].startswith("the source is on fuse (statfs f_type 0x65735546)")
            for _ in range(2):  # twice: a watched source would now serve it from the page cache
                assert (mnt / "small.txt").read_text() == "version one\n"
            before = (mnt / "report.md@intent=revenue growth").read_bytes()
            _rewrite(backing / "small.txt", "version two\n")
            _rewrite(backing / "report.md", (backing / "report.md").read_text().replace("4 percent", "7 percent"))
            time.sleep(SETTLE_S)
            assert (mnt / "small.txt").read_text() == "version two\n"  # the open itself checked
            after = (mnt / "report.md@intent=revenue growth").read_bytes()
            assert is_pack(after) and b"7 percent" in after and after != before
            (backing / "new.txt").write_text("made on another host\n")
            assert mountutil.wait_for(lambda: (mnt / "new.txt").exists(), timeout=SETTLE_S + 1)
            doctor = subprocess.run([sys.executable, "-m", "sparsefs", "doctor"], capture_output=True, text=True,
                                    timeout=60, check=False).stdout
            line = next(row for row in doctor.splitlines() if f"mount {mnt}:" in row)
            assert "checked on each open: the source is on fuse" in line, line
    finally:
        mountutil.stop(mount)


def test_a_remote_mount_inside_a_watched_source_is_checked_on_open(remote_share: tuple[Path, Path],
                                                                    tmp_path: Path, backend: str) -> None:
    """A local workspace with a share mounted in one of its folders: the rest is watched (24 h caches), the
    share is not (no watches spent on it) and is checked on each open, with no long-lived caches."""
    backing, _ = remote_share
    src, mnt = tmp_path / "src", tmp_path / "mnt"
    (src / "local").mkdir(parents=True)
    (src / "local" / "notes.txt").write_text("local notes\n")
    (src / "shared").mkdir()
    mnt.mkdir()
    inner = _mount_remote(backing, src / "shared")
    try:
        mount = mountutil.start(src, mnt, tmp_path / "state", backend=backend)
        try:
            with mountutil.hang_guard(mount, HANG_GUARD_S):
                _check_mixed(backing, src, mnt)
        finally:
            mountutil.stop(mount)
    finally:
        _unmount_remote(src / "shared", inner)


def _check_mixed(backing: Path, src: Path, mnt: Path) -> None:
    watcher = _stats(mnt)["watcher"]
    assert watcher["mode"] == "inotify" and watcher["filesystem"] == "local", watcher
    assert watcher["checked_on_access"] == [{"path": "shared", "fs": "fuse.remotefs"}]
    assert watcher["watches"] == 2 and "'shared' (fuse.remotefs)" in watcher["reason"]  # the root and local/
    for _ in range(2):
        assert (mnt / "shared" / "small.txt").read_text() == "version one\n"
    with pytest.raises(OSError) as raised:
        os.stat(mnt / "shared" / "later.txt")  # a name the kernel would keep as absent for a day, if watched
    assert raised.value.errno == errno.ENOENT
    _rewrite(backing / "small.txt", "version two\n")
    (backing / "later.txt").write_text("made on another host\n")
    time.sleep(SETTLE_S)
    assert (mnt / "shared" / "small.txt").read_text() == "version two\n"
    assert (mnt / "shared" / "later.txt").read_text() == "made on another host\n"
    (src / "local" / "notes.txt").write_text("edited locally\n")  # the watched part: seen by inotify
    assert mountutil.wait_for(lambda: (mnt / "local" / "notes.txt").read_text() == "edited locally\n", 2)


def test_a_share_mounted_into_the_source_while_served_is_found(remote_share: tuple[Path, Path], tmp_path: Path,
                                                               backend: str) -> None:
    backing, _ = remote_share
    src, mnt = tmp_path / "src", tmp_path / "mnt"
    (src / "later").mkdir(parents=True)
    mnt.mkdir()
    mount = mountutil.start(src, mnt, tmp_path / "state", backend=backend)
    try:
        with mountutil.hang_guard(mount, HANG_GUARD_S):
            watcher = _stats(mnt)["watcher"]
            # on-access here means inotify ran out at start (the machine-wide limit, which other suites on a
            # shared machine may still lower): then nothing tracks mounts, and everything is checked anyway
            assert watcher["mode"] == "inotify" and watcher["checked_on_access"] == [], watcher
            inner = _mount_remote(backing, src / "later")
            try:
                assert mountutil.wait_for(lambda: _stats(mnt)["watcher"]["checked_on_access"] ==
                                          [{"path": "later", "fs": "fuse.remotefs"}], timeout=10), \
                    _stats(mnt)["watcher"]
                assert (mnt / "later" / "small.txt").read_text() == "version one\n"
                _rewrite(backing / "small.txt", "version two\n")
                time.sleep(SETTLE_S)
                assert (mnt / "later" / "small.txt").read_text() == "version two\n"
            finally:
                _unmount_remote(src / "later", inner)
            assert mountutil.wait_for(lambda: _stats(mnt)["watcher"]["checked_on_access"] == [], timeout=10)
    finally:
        mountutil.stop(mount)
