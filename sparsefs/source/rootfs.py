"""The source tree, reached only through a directory fd opened before mounting.

Every operation is an ``*at`` call relative to that fd, and every multi-
component path is resolved with ``openat2(RESOLVE_BENEATH)``, so no symlink
(absolute, relative, chained, or swapped in between check and use) and no
``..`` can reach outside the source root. Nothing here ever opens a path by
name from ``/``: in place mode the root is shadowed by our own mount, and
reading through it would deadlock the daemon.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager

_libc = ctypes.CDLL(None, use_errno=True)
_SYS_OPENAT2 = 437
_SYS_RENAMEAT2 = 316 if os.uname().machine == "x86_64" else 276
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_BENEATH = 0x08
UTIME_NOW = (1 << 30) - 1
UTIME_OMIT = (1 << 30) - 2
_AT_SYMLINK_NOFOLLOW = 0x100
_AT_FDCWD = -100
_ONE_CALL = 4000  # bytes a relative path may have for one *at() call (PATH_MAX is 4096 with the NUL)


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _raise_errno(name: str) -> None:
    err = ctypes.get_errno()
    raise OSError(err, f"{name}: {os.strerror(err)}")


_OPEN_FLAGS = (
    os.O_ACCMODE | os.O_CREAT | os.O_EXCL | os.O_NOCTTY | os.O_TRUNC | os.O_APPEND | os.O_NONBLOCK | os.O_DSYNC
    | os.O_SYNC | os.O_DIRECT | os.O_LARGEFILE | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NOATIME | os.O_PATH
    | os.O_TMPFILE
)


def openat2(dirfd: int, rel: str, flags: int, mode: int = 0) -> int:
    """openat2(2) confined beneath ``dirfd``; escaping raises EXDEV.

    openat2 rejects unknown flag bits and file-type bits in ``mode`` (FUSE
    passes both), so both are masked to what open(2) defines.
    """
    creating = flags & (os.O_CREAT | os.O_TMPFILE)
    how = _OpenHow((flags & _OPEN_FLAGS) | os.O_CLOEXEC, mode & 0o7777 if creating else 0,
                   RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)
    path = os.fsencode(rel)
    fd = _libc.syscall(_SYS_OPENAT2, dirfd, path, ctypes.byref(how), ctypes.sizeof(how))
    if fd < 0:
        _raise_errno("openat2")
    return int(fd)


def relative(path: str | None) -> str:
    """'/a/b' -> 'a/b'; '/' -> ''. Rejects '..' components outright.

    None is what libfuse passes for a file unlinked while open (hard_remove).
    """
    if path is None:
        raise OSError(errno.ENOENT, "the file was unlinked")
    rel = path.strip("/")
    if rel and ".." in rel.split("/"):
        raise OSError(errno.EACCES, "'..' is not allowed")
    return rel


def stat_dict(st: os.stat_result) -> dict[str, int]:
    """The attributes the FUSE layer reports, times in nanoseconds."""
    return {
        "st_mode": st.st_mode, "st_ino": st.st_ino, "st_dev": st.st_dev, "st_nlink": st.st_nlink,
        "st_uid": st.st_uid, "st_gid": st.st_gid, "st_size": st.st_size, "st_atime": st.st_atime_ns,
        "st_mtime": st.st_mtime_ns, "st_ctime": st.st_ctime_ns, "st_blocks": st.st_blocks,
        "st_blksize": st.st_blksize, "st_rdev": st.st_rdev,
    }


class SourceRoot:
    """Faithful passthrough operations on the tree below one directory fd."""

    def __init__(self, root_fd: int) -> None:
        if not stat.S_ISDIR(os.fstat(root_fd).st_mode):
            raise NotADirectoryError(root_fd)
        self.fd = root_fd

    @classmethod
    def open(cls, path: str) -> SourceRoot:
        return cls(os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))

    def close(self) -> None:
        os.close(self.fd)

    @contextmanager
    def parent(self, rel: str) -> Iterator[tuple[int, str]]:
        """(fd of the parent directory, base name); the fd is valid inside the block."""
        head, _, name = rel.rpartition("/")
        if not head:
            yield self.fd, name
            return
        with self.near(head) as (base, rest):
            dirfd = openat2(base, rest, os.O_PATH | os.O_DIRECTORY)
        try:
            yield dirfd, name
        finally:
            os.close(dirfd)

    @contextmanager
    def near(self, rel: str) -> Iterator[tuple[int, str]]:
        """(a directory fd, the rest of ``rel``), the rest short enough for one system call.

        A path a caller built relative to its own working directory may be close to PATH_MAX
        there; relative to the source root it can be longer (the mount's own prefix, or a cwd deep
        in it). Such a path is resolved a piece at a time, each piece with RESOLVE_BENEATH under
        the directory the previous one reached, so it stays confined beneath the root.
        """
        if len(rel) * 4 < _ONE_CALL or len(os.fsencode(rel)) < _ONE_CALL:
            yield self.fd, rel
            return
        fds: list[int] = []
        try:
            base, parts = self.fd, rel.split("/")
            while len(os.fsencode("/".join(parts))) >= _ONE_CALL:
                piece = _leading_piece(parts)
                base = openat2(base, "/".join(parts[:piece]), os.O_PATH | os.O_DIRECTORY)
                fds.append(base)
                parts = parts[piece:]
            yield base, "/".join(parts)
        finally:
            for fd in fds:
                os.close(fd)

    def lstat(self, rel: str) -> os.stat_result:
        """stat without following a final symlink; the hot path of every lookup."""
        if not rel:
            return os.fstat(self.fd)
        if "/" not in rel:
            return os.stat(rel, dir_fd=self.fd, follow_symlinks=False)
        with self.near(rel) as (base, rest):
            fd = openat2(base, rest, os.O_PATH | os.O_NOFOLLOW)
        try:
            return os.fstat(fd)
        finally:
            os.close(fd)

    def exists(self, rel: str) -> bool:
        try:
            self.lstat(rel)
        except OSError:
            return False
        return True

    def open_file(self, rel: str, flags: int, mode: int = 0) -> int:
        with self.near(rel) as (base, rest):
            return openat2(base, rest or ".", flags, mode)

    def scandir(self, rel: str) -> tuple[int, list[tuple[str, int, int]]]:
        """The directory's own inode, and (name, file-type bits, inode) for each entry."""
        fd = self.open_file(rel, os.O_RDONLY | os.O_DIRECTORY)
        try:
            with os.scandir(fd) as entries:
                listing = [(e.name, _type_bits(e), e.inode()) for e in entries]
            return os.fstat(fd).st_ino, listing
        finally:
            os.close(fd)

    def stat_entries(self, rel: str, names: list[str]) -> dict[str, os.stat_result]:
        """lstat of several entries of one directory, through one confined directory fd; vanished names are left out."""
        fd = self.open_file(rel, os.O_RDONLY | os.O_DIRECTORY)
        found: dict[str, os.stat_result] = {}
        try:
            for name in names:
                try:
                    found[name] = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except OSError:
                    continue
        finally:
            os.close(fd)
        return found

    def readlink(self, rel: str) -> str:
        with self.parent(rel) as (dirfd, name):
            return os.readlink(name, dir_fd=dirfd)

    def mkdir(self, rel: str, mode: int) -> None:
        with self.parent(rel) as (dirfd, name):
            os.mkdir(name, mode, dir_fd=dirfd)

    def mknod(self, rel: str, mode: int, dev: int) -> None:
        with self.parent(rel) as (dirfd, name):
            os.mknod(name, mode, dev, dir_fd=dirfd)

    def rmdir(self, rel: str) -> None:
        with self.parent(rel) as (dirfd, name):
            os.rmdir(name, dir_fd=dirfd)

    def unlink(self, rel: str) -> None:
        with self.parent(rel) as (dirfd, name):
            os.unlink(name, dir_fd=dirfd)

    def symlink(self, target: str, rel: str) -> None:
        with self.parent(rel) as (dirfd, name):
            os.symlink(target, name, dir_fd=dirfd)

    def link(self, existing: str, rel: str) -> None:
        with self.parent(existing) as (src_fd, src_name), self.parent(rel) as (dst_fd, dst_name):
            os.link(src_name, dst_name, src_dir_fd=src_fd, dst_dir_fd=dst_fd, follow_symlinks=False)

    def rename(self, old: str, new: str, flags: int = 0) -> None:
        with self.parent(old) as (src_fd, src_name), self.parent(new) as (dst_fd, dst_name):
            if flags == 0:
                os.rename(src_name, dst_name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
                return
            result = _libc.syscall(
                _SYS_RENAMEAT2, src_fd, os.fsencode(src_name), dst_fd, os.fsencode(dst_name), flags
            )
            if result != 0:
                _raise_errno("renameat2")

    def chmod(self, rel: str, mode: int) -> None:
        fd = self.open_file(rel, os.O_PATH | os.O_NOFOLLOW)
        try:
            if stat.S_ISLNK(os.fstat(fd).st_mode):
                raise OSError(errno.EOPNOTSUPP, "chmod on a symlink")
            os.chmod(f"/proc/self/fd/{fd}", mode)
        finally:
            os.close(fd)

    def chown(self, rel: str, uid: int, gid: int) -> None:
        with self.parent(rel) as (dirfd, name):
            os.chown(name or ".", uid, gid, dir_fd=dirfd, follow_symlinks=False)

    def utimens(self, rel: str, atime_ns: int, mtime_ns: int) -> None:
        times = (_Timespec * 2)(_timespec(atime_ns), _timespec(mtime_ns))
        with self.parent(rel) as (dirfd, name):
            target = os.fsencode(name or ".")
            if _libc.utimensat(dirfd, target, times, _AT_SYMLINK_NOFOLLOW) != 0:
                _raise_errno("utimensat")

    def open_regular(self, rel: str, flags: int, mode: int = 0) -> int:
        """Open a file that must be a regular file, without ever blocking on a FIFO or device.

        The kernel only forwards opens of what it believes are regular files, but
        the name may have been replaced (by a FIFO, say) since it looked; a
        blocking open would then hang the thread answering requests.
        """
        fd = self.open_file(rel, flags | os.O_NONBLOCK, mode)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(errno.ESTALE, f"{rel} is no longer a regular file")
            if not flags & os.O_NONBLOCK:
                fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def create_regular(self, rel: str, flags: int, mode: int) -> tuple[int, bool]:
        """``open_regular`` with O_CREAT, and whether this call made the file (tried with O_EXCL first: a
        watcher expects the echo of a new name only, sparsefs.source.freshness)."""
        try:
            return self.open_regular(rel, flags | os.O_CREAT | os.O_EXCL, mode), True
        except FileExistsError:
            if flags & os.O_EXCL:
                raise
        return self.open_regular(rel, flags | os.O_CREAT, mode), False

    def truncate(self, rel: str, length: int) -> None:
        fd = self.open_regular(rel, os.O_WRONLY)
        try:
            os.ftruncate(fd, length)
        finally:
            os.close(fd)

    def access(self, rel: str, mode: int) -> None:
        with self.parent(rel) as (dirfd, name):
            if not os.access(name or ".", mode, dir_fd=dirfd, follow_symlinks=False):
                raise OSError(errno.EACCES, "access denied")

    def statvfs(self) -> os.statvfs_result:
        return os.statvfs(self.fd)

    # ---- extended attributes: through an O_PATH fd of the entry itself, never a symlink's target ----
    @contextmanager
    def _entry_path(self, rel: str) -> Iterator[str]:
        """``/proc/self/fd/N`` of a confined O_PATH fd on ``rel`` (a final symlink: the link itself).

        Following that magic link reaches the entry the fd holds and stops there, so the ``*xattr``
        calls below act on the confined entry, symlinks included, as ``l*xattr`` would."""
        fd = self.open_file(rel, os.O_PATH | os.O_NOFOLLOW)
        try:
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)

    def getxattr(self, rel: str, name: str) -> bytes:
        with self._entry_path(rel) as path:
            return os.getxattr(path, name)

    def listxattr(self, rel: str) -> list[str]:
        with self._entry_path(rel) as path:
            return os.listxattr(path)

    def setxattr(self, rel: str, name: str, value: bytes, flags: int) -> None:
        with self._entry_path(rel) as path:
            os.setxattr(path, name, value, flags)

    def removexattr(self, rel: str, name: str) -> None:
        with self._entry_path(rel) as path:
            os.removexattr(path, name)


def utimens_path(path: str, atime_ns: int, mtime_ns: int) -> None:
    """utimensat(2) on an absolute path (a ``/proc/self/fd/N`` of a held file), UTIME_NOW/OMIT included."""
    times = (_Timespec * 2)(_timespec(atime_ns), _timespec(mtime_ns))
    if _libc.utimensat(_AT_FDCWD, os.fsencode(path), times, 0) != 0:
        _raise_errno("utimensat")


def _leading_piece(parts: list[str]) -> int:
    """How many leading components of ``parts`` fit in one system call (at least one)."""
    size = 0
    for count, part in enumerate(parts):
        size += len(os.fsencode(part)) + 1
        if size >= _ONE_CALL:
            return max(count, 1)
    return len(parts)


def _timespec(ns: int) -> _Timespec:
    if ns in (UTIME_NOW, UTIME_OMIT):
        return _Timespec(0, ns)
    sec, nsec = divmod(ns, 10**9)
    return _Timespec(sec, nsec)


def _type_bits(entry: os.DirEntry[str]) -> int:
    if entry.is_symlink():
        return stat.S_IFLNK
    if entry.is_dir(follow_symlinks=False):
        return stat.S_IFDIR
    if entry.is_file(follow_symlinks=False):
        return stat.S_IFREG
    return stat.S_IFMT(entry.stat(follow_symlinks=False).st_mode)
