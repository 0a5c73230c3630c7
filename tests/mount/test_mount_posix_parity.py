"""POSIX parity a user relies on (issue 18): the reported name limit, open unlinked files."""

from __future__ import annotations

import errno
import os

import pytest

from tests import mountutil
from tests.clients.test_mount_clients import sh

Mount = mountutil.Mount


# ---- name limits -----------------------------------------------------------------------------
def test_the_reported_name_limit_is_the_sources(mirror: Mount) -> None:
    mnt, src = mirror.mountpoint, mirror.source
    limit = os.statvfs(src).f_namemax
    assert os.statvfs(mnt).f_namemax == limit == os.pathconf(mnt, "PC_NAME_MAX")
    assert sh(["getconf", "NAME_MAX", str(mnt)]).strip() == str(limit)
    (mnt / ("n" * limit)).write_text("fits\n")
    with pytest.raises(OSError) as raised:
        (mnt / ("n" * (limit + 1))).write_text("too long\n")
    assert raised.value.errno == errno.ENAMETOOLONG
    pack = (mnt / ("notes.txt@intent=" + "budget " * 80)).read_bytes()  # a virtual name past 255 bytes
    assert pack


# ---- open, unlinked files ----------------------------------------------------------------------
def test_fstat_of_an_open_unlinked_file_answers_like_a_local_filesystem(mirror: Mount) -> None:
    path = mirror.mountpoint / "scratch.txt"
    path.write_text("still here\n")
    with open(path, "r+") as f:
        os.unlink(path)
        st = os.fstat(f.fileno())
        assert st.st_nlink == 0 and st.st_size == len("still here\n")
        f.seek(0, os.SEEK_END)
        f.write("more\n")
        f.flush()
        os.ftruncate(f.fileno(), 4)
        assert os.fstat(f.fileno()).st_size == 4
        os.fchmod(f.fileno(), 0o600)
        assert os.fstat(f.fileno()).st_mode & 0o777 == 0o600
        f.seek(0)
        assert f.read() == "stil"
    assert not path.exists() and not [n for n in os.listdir(mirror.source) if n.startswith(".fuse_hidden")]


def test_a_file_replaced_while_open_keeps_its_own_attributes(mirror: Mount) -> None:
    mnt = mirror.mountpoint
    (mnt / "kept.txt").write_text("old content\n")
    with open(mnt / "kept.txt") as f:
        (mnt / "new.txt").write_text("new\n")
        os.replace(mnt / "new.txt", mnt / "kept.txt")
        st = os.fstat(f.fileno())
        assert st.st_size == len("old content\n") and st.st_nlink == 0
        assert f.read() == "old content\n"
    assert (mnt / "kept.txt").read_text() == "new\n"
    assert not [n for n in os.listdir(mirror.source) if n.startswith(".fuse_hidden")]
