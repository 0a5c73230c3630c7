"""Hard links (issue 18): attributes are per inode, coherent through every name at once, on both backends."""

from __future__ import annotations

import os
from pathlib import Path

from tests import mountutil

Mount = mountutil.Mount


def _same_inode_attrs(a: Path, b: Path) -> None:
    """Both names report what the source reports for the inode, right now."""
    sa, sb = os.stat(a), os.stat(b)
    for field in ("st_ino", "st_nlink", "st_mode", "st_uid", "st_gid", "st_size", "st_ctime_ns"):
        assert getattr(sa, field) == getattr(sb, field), (field, a, b)


# ---- hard links --------------------------------------------------------------------------------
def test_hard_link_attributes_are_coherent_through_every_name(mirror: Mount) -> None:
    mnt, src = mirror.mountpoint, mirror.source
    a, b, c = mnt / "notes.txt", mnt / "nested" / "b.txt", mnt / "c.txt"
    assert os.stat(a).st_nlink == 1  # the kernel now caches a with one link
    os.link(a, b)
    assert os.stat(a).st_nlink == 2 == os.stat(b).st_nlink
    os.link(b, c)
    assert [os.stat(p).st_nlink for p in (a, b, c)] == [3, 3, 3]
    os.chmod(b, 0o600)
    assert os.stat(a).st_mode & 0o777 == 0o600 == os.stat(c).st_mode & 0o777
    os.chown(c, 1234, 5678)
    assert (os.stat(a).st_uid, os.stat(b).st_gid) == (1234, 5678)
    _same_inode_attrs(a, b)
    _same_inode_attrs(a, c)
    assert os.stat(a).st_ctime_ns == (src / "notes.txt").stat().st_ctime_ns
    os.unlink(c)
    assert os.stat(a).st_nlink == 2 == os.stat(b).st_nlink
    os.rename(b, mnt / "renamed.txt")
    assert os.stat(a).st_ctime_ns == (src / "notes.txt").stat().st_ctime_ns
    os.replace(mnt / "README.md", mnt / "renamed.txt")  # the link is replaced: one name left
    assert os.stat(a).st_nlink == 1 == (src / "notes.txt").stat().st_nlink


def test_writes_through_one_name_show_through_the_other(mirror: Mount) -> None:
    mnt = mirror.mountpoint
    a, b = mnt / "notes.txt", mnt / "hard.txt"
    os.link(a, b)
    assert os.stat(b).st_size == os.stat(a).st_size
    with open(a, "ab") as f:
        f.write(b"appended through a\n")
    assert os.stat(b).st_size == os.stat(a).st_size == (mirror.source / "notes.txt").stat().st_size
    assert b.read_bytes().endswith(b"appended through a\n")
    os.truncate(b, 3)
    assert os.stat(a).st_size == 3 and a.read_bytes() == b.read_bytes()


def test_the_mfusepy_link_registry_invalidates_the_other_names_only() -> None:
    from sparsefs.fuse.libfuse.links import LinkNames

    invalidated: list[str] = []
    links = LinkNames(invalidated.append, limit=3)
    linked = {"st_dev": 1, "st_ino": 7, "st_nlink": 2, "st_mode": 0o100644}
    links.seen("/a", {**linked, "st_nlink": 1})  # one link: nothing to keep coherent
    assert links.key("/a") is None
    for path in ("/a", "/b"):
        links.seen(path, linked)
    links.changed(links.key("/a"), "/a")
    assert invalidated == ["/b"]
    links.moved("/b", "/c")
    links.removed("/a")
    invalidated.clear()
    links.changed((1, 7), "/x")
    assert invalidated == ["/c"]
    for n in range(5):
        links.seen(f"/n{n}", {**linked, "st_ino": 100 + n})
    assert links.key("/c") is None and links.key("/n4") == (1, 104)  # the oldest are forgotten first
