#!/usr/bin/env python3
"""Minimal read-mostly mfusepy passthrough: the plain-I/O baseline for SparseFS.

Path-joining (``SRC + path``), no confinement, no virtual files, no watcher.
Mount options are the "best plain-read setup" of ../shared/FUSE-NOTES.md:
foreground, multithreaded, kernel_cache, attr_timeout=entry_timeout=5,
negative_timeout=0, use_ino, and no flush handler.

    python scripts/minimal_passthrough.py SRC MNT      # serves until unmounted
    fusermount3 -u MNT
"""

from __future__ import annotations

import os
import stat
import sys
from typing import Any

import mfusepy

_STAT_KEYS = ("st_mode", "st_ino", "st_dev", "st_nlink", "st_uid", "st_gid", "st_size",
              "st_blocks", "st_blksize", "st_rdev")
_STATVFS_KEYS = ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree",
                 "f_favail", "f_namemax")


class Passthrough(mfusepy.Operations):  # type: ignore[misc]
    use_ns = True

    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)

    def _full(self, path: str) -> str:
        return self.root + path if path != "/" else self.root

    def getattr(self, path: str, fh: Any = None) -> dict[str, int]:
        st = os.fstat(fh) if fh is not None else os.lstat(self._full(path))  # OSError -> -errno (mfusepy)
        attrs = {key: getattr(st, key) for key in _STAT_KEYS}
        attrs.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
        return attrs

    def readdir(self, path: str, fh: int) -> list[Any]:
        entries: list[Any] = [".", ".."]
        with os.scandir(self._full(path)) as it:
            for entry in it:  # file type from d_type: no stat per entry
                mode = (stat.S_IFLNK if entry.is_symlink() else
                        stat.S_IFDIR if entry.is_dir(follow_symlinks=False) else stat.S_IFREG)
                entries.append((entry.name, {"st_mode": mode, "st_ino": entry.inode()}, 0))
        return entries

    def readlink(self, path: str) -> str:
        return os.readlink(self._full(path))

    def open(self, path: str, flags: int) -> int:
        return os.open(self._full(path), flags)

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        return os.pread(fh, size, offset)

    def release(self, path: str, fh: int) -> int:
        os.close(fh)
        return 0

    def statfs(self, path: str) -> dict[str, int]:
        sv = os.statvfs(self._full(path))
        return {key: getattr(sv, key) for key in _STATVFS_KEYS}


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(f"usage: {argv[0]} SRC MNT", file=sys.stderr)
        return 2
    mfusepy.FUSE(Passthrough(argv[1]), argv[2], foreground=True, nothreads=False, kernel_cache=True,
                 attr_timeout=5, entry_timeout=5, negative_timeout=0, use_ino=True, fsname="minimal",
                 subtype="minimal")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
