"""A stand-in for a network filesystem in tests: an mfusepy passthrough whose backing folder another "host"
(the test) changes underneath, so inotify on this mount never hears of it (issue 25.10).

Like an NFS client, it caches attributes and entries for ``ACTIMEO_S`` and re-reads a file's pages when it
is opened after a change (close-to-open). This machine's kernel has no NFS (no CONFIG_NFS_FS, no nfsd, no
module loading; docs/BENCHMARKS.md says how that was checked), so this is what the tests can mount.

    python tests/remotefs.py BACKING MNT      # serves until unmounted (fusermount3 -u MNT)
"""

from __future__ import annotations

import os
import stat
import sys
from typing import Any

import mfusepy

ACTIMEO_S = 1.0
_STAT_KEYS = ("st_mode", "st_ino", "st_nlink", "st_uid", "st_gid", "st_size", "st_blocks", "st_blksize")
_STATVFS_KEYS = ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree", "f_favail",
                 "f_namemax")


class Remote(mfusepy.Operations):  # type: ignore[misc]
    """Read-write passthrough of ``root`` (paths joined: test code, never served to anyone else)."""

    use_ns = True

    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)

    def _full(self, path: str) -> str:
        return self.root + path if path != "/" else self.root

    def getattr(self, path: str, fh: Any = None) -> dict[str, int]:
        st = os.fstat(fh) if fh is not None else os.lstat(self._full(path))
        attrs = {key: getattr(st, key) for key in _STAT_KEYS}
        attrs.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
        return attrs

    def readdir(self, path: str, fh: int) -> list[Any]:
        entries: list[Any] = [".", ".."]
        with os.scandir(self._full(path)) as found:
            for entry in found:
                mode = stat.S_IFDIR if entry.is_dir(follow_symlinks=False) else stat.S_IFREG
                entries.append((entry.name, {"st_mode": mode, "st_ino": entry.inode()}, 0))
        return entries

    def open(self, path: str, flags: int) -> int:
        return os.open(self._full(path), flags)

    def create(self, path: str, mode: int, fi: Any = None) -> int:
        return os.open(self._full(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        return os.pread(fh, size, offset)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        return os.pwrite(fh, data, offset)

    def truncate(self, path: str, length: int, fh: Any = None) -> int:
        os.truncate(fh if fh is not None else self._full(path), length)
        return 0

    def unlink(self, path: str) -> int:
        os.unlink(self._full(path))
        return 0

    def mkdir(self, path: str, mode: int) -> int:
        os.mkdir(self._full(path), mode)
        return 0

    def rename(self, old: str, new: str) -> int:
        os.rename(self._full(old), self._full(new))
        return 0

    def release(self, path: str, fh: int) -> int:
        os.close(fh)
        return 0

    def statfs(self, path: str) -> dict[str, int]:
        sv = os.statvfs(self._full(path))
        return {key: getattr(sv, key) for key in _STATVFS_KEYS}


def main(argv: list[str]) -> int:
    mfusepy.FUSE(Remote(argv[1]), argv[2], foreground=True, nothreads=False, attr_timeout=ACTIMEO_S,
                 entry_timeout=ACTIMEO_S, negative_timeout=0, use_ino=True, fsname="remote", subtype="remotefs")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
