"""Extended attributes (issue 18): passed through to the source, confined like every other path."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest

from tests import mountutil
from tests.clients.test_mount_clients import sh

Mount = mountutil.Mount


# ---- extended attributes ---------------------------------------------------------------------
def test_extended_attributes_pass_through_to_the_source(mirror: Mount) -> None:
    mnt, src = mirror.mountpoint, mirror.source
    os.setxattr(mnt / "notes.txt", "user.origin", b"through the mount")
    assert os.getxattr(src / "notes.txt", "user.origin") == b"through the mount"
    os.setxattr(src / "README.md", "user.tag", b"outside")
    assert os.getxattr(mnt / "README.md", "user.tag") == b"outside"
    assert "user.tag" in os.listxattr(mnt / "README.md")
    os.setxattr(mnt / "src", "user.dir", b"a directory")
    assert os.getxattr(src / "src", "user.dir") == b"a directory"
    with pytest.raises(OSError) as raised:
        os.setxattr(mnt / "notes.txt", "user.origin", b"again", os.XATTR_CREATE)
    assert raised.value.errno == errno.EEXIST
    os.removexattr(mnt / "notes.txt", "user.origin")
    assert "user.origin" not in os.listxattr(src / "notes.txt")
    with pytest.raises(OSError) as raised:
        os.getxattr(mnt / "notes.txt", "user.origin")
    assert raised.value.errno == errno.ENODATA
    with open(mnt / "README.md", "rb") as f:  # by descriptor too
        assert os.getxattr(f.fileno(), "user.tag") == b"outside"


def test_tools_preserve_extended_attributes(mirror: Mount, tmp_path: Path) -> None:
    mnt, src = mirror.mountpoint, mirror.source
    os.setxattr(src / "notes.txt", "user.kept", b"yes")
    sh(["cp", "--preserve=xattr", str(mnt / "notes.txt"), str(mnt / "copy.txt")])
    assert os.getxattr(src / "copy.txt", "user.kept") == b"yes"
    out = tmp_path / "out"
    sh(["rsync", "-aX", f"{mnt}/", f"{out}/"])
    assert os.getxattr(out / "notes.txt", "user.kept") == b"yes"
    back = subprocess.run(["rsync", "-aX", f"{out}/notes.txt", f"{mnt}/back.txt"], capture_output=True, check=False)
    assert back.returncode == 0, back.stderr
    assert os.getxattr(src / "back.txt", "user.kept") == b"yes"


def test_virtual_and_control_paths_have_no_extended_attributes(mirror: Mount) -> None:
    mnt = mirror.mountpoint
    pack = mnt / "notes.txt@scout"
    assert pack.read_bytes()
    assert os.listxattr(pack) == [] and os.listxattr(mnt / ".sparsefs" / "stats.json") == []
    with pytest.raises(OSError) as raised:
        os.getxattr(pack, "user.origin")
    assert raised.value.errno == errno.ENODATA
    with pytest.raises(OSError) as raised:
        os.setxattr(mnt / ".sparsefs" / "SKILL.md", "user.x", b"1")
    assert raised.value.errno in (errno.EROFS, errno.EPERM, errno.ENOTSUP)


def test_extended_attributes_of_a_link_are_the_links_own(mirror: Mount, tmp_path: Path) -> None:
    """The kernel follows a symlink in the caller's namespace (as natively); the daemon never follows one."""
    outside = tmp_path / "outside.txt"
    outside.write_text("secret\n")
    os.setxattr(outside, "user.secret", b"outside")
    os.symlink(outside, mirror.source / "out-link")
    assert os.listxattr(mirror.mountpoint / "out-link", follow_symlinks=False) == []
    with pytest.raises(OSError) as raised:
        os.getxattr(mirror.mountpoint / "out-link", "user.secret", follow_symlinks=False)
    assert raised.value.errno == errno.ENODATA
