"""The mfusepy (libfuse3 high-level API) binding of the operations core.

Thin on purpose: every method translates arguments, calls ``Core`` and maps
exceptions through ``sparsefs.fuse.errors``. Generated files (packs, control
files) are opened with per-file direct_io; real files use the page cache,
kept coherent by ``invalidate_path`` on source changes and revalidated at
each open (``sparsefs.fuse.pagecache``: ``keep_cache`` only while the file is
unchanged and settled), so ``kernel_cache`` (which forces ``keep_cache``) is off.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import logging
import os
from collections.abc import Callable
from typing import Any, TypeVar

import mfusepy

from sparsefs.fuse.errors import to_errno
from sparsefs.fuse.libfuse.hidden import HiddenFiles, is_hidden_name
from sparsefs.fuse.libfuse.links import Key, LinkNames
from sparsefs.fuse.libfuse.paths import PathMemory
from sparsefs.fuse.mounts import find_mount
from sparsefs.source.access import Credentials
from sparsefs.source.rootfs import UTIME_NOW, UTIME_OMIT, relative, utimens_path
from sparsefs.vfs.binding import LateBinding
from sparsefs.vfs.control import CONTROL_DIR
from sparsefs.vfs.core import Core

log = logging.getLogger("sparsefs.fuse")

F = TypeVar("F", bound=Callable[..., Any])

MOUNT_OPTIONS: dict[str, Any] = {
    "attr_timeout": 5,
    "entry_timeout": 5,
    "negative_timeout": 0,
    "max_threads": 16,
    "use_ino": True,
    "hard_remove": False,  # libfuse hides open files it unlinks (sparsefs.fuse.libfuse.hidden): fstat keeps working
    "fsname": "sparsefs",
    "subtype": "sparsefs",
}


_LOOP_ENDED_BY_SIGNAL = 8
_CONTROL = f"/{CONTROL_DIR}/"
FUSE_CAP_PARALLEL_DIROPS = 1 << 18  # libfuse3 fuse_common.h
FUSE_CAP_POSIX_ACL = 1 << 19  # the kernel enforces the source's POSIX ACLs (asked as system.posix_acl_* xattrs)


def guarded(method: F) -> F:
    """Map any exception of one request to an errno; a bug never kills the mount."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - the errno mapping is the point
            raise OSError(to_errno(exc, method.__name__), os.strerror(to_errno(exc, method.__name__))) from None

    return wrapper  # type: ignore[return-value]


def _fh(fi: Any) -> int | None:
    return None if fi is None else int(fi.fh)


class MfusepyOperations(mfusepy.Operations):  # type: ignore[misc]
    """mfusepy Operations (raw_fi mode) delegating to the core."""

    use_ns = True

    def __init__(self, core: Core, binding: LateBinding) -> None:
        """``binding``: the one ``core`` was built with; attached in ``init`` (libfuse's, once mounted)."""
        self.core = core
        self.binding = binding
        self._fuse_ptr: int | None = None
        self.links = LinkNames(self.invalidate_path)  # every name of a hard-linked file, kept coherent
        self.hidden = HiddenFiles(core.root)  # open files unlinked through the mount
        self.paths = PathMemory()  # the file type and page stamp last handed out per path
        self.allow_other = False  # set by serve: other users read through the mount

    def init_with_config(self, conn: Any, config: Any) -> None:
        # Without parallel dirops the kernel serializes lookups per directory: one slow
        # evidence lookup would stall every plain lookup in the same folder.
        if conn is not None and conn.capable & FUSE_CAP_PARALLEL_DIROPS:
            conn.want |= FUSE_CAP_PARALLEL_DIROPS
        if conn is not None and self.allow_other and conn.capable & FUSE_CAP_POSIX_ACL:
            conn.want |= FUSE_CAP_POSIX_ACL  # other users: the source's ACLs, as default_permissions its modes
        self._fuse_ptr = mfusepy._libfuse.fuse_get_context().contents.fuse
        self.binding.attach(caller_pid=lambda: int(mfusepy.fuse_get_context()[2]), invalidate=self.invalidate_path,
                            caller=_caller_credentials)
        self.binding.mark_ready()

    def invalidate_path(self, path: str) -> None:
        """Drop the kernel's cached pages and attributes of ``path`` (if it knows it). The file type handed
        out stays remembered: libfuse drops the inode's attributes, not the kernel's entry, so the kernel
        may still ask for the old inode's attributes by this path."""
        self.paths.forget_pages(path)
        self._drop_kernel_cache(path)

    def _drop_kernel_cache(self, path: str) -> None:
        if self._fuse_ptr:
            _invalidate(ctypes.c_void_p(self._fuse_ptr), os.fsencode(path))

    def _inode(self, path: str) -> Key | None:
        """(device, inode) of ``path`` if it has other names (known, or found with a stat now)."""
        key = self.links.key(path)
        if key is not None:
            return key
        try:
            st = self.core.root.lstat(relative(path))
        except OSError:
            return None
        attrs = {"st_dev": st.st_dev, "st_ino": st.st_ino, "st_nlink": st.st_nlink, "st_mode": st.st_mode}
        self.links.seen(path, attrs)
        return self.links.key(path)

    def _changed(self, path: str) -> None:
        """``path``'s inode changed (mode, owner, times, size): every other name of it must re-read."""
        self.links.changed(self._inode(path), path)

    @guarded
    def getattr(self, path: str | None, fh: Any = None) -> dict[str, int]:
        if fh is None and self.hidden.holds(path):
            return self.hidden.getattr(str(path))
        attrs = self.core.getattr(path, _fh(fh))
        if path is not None and fh is None:
            if self.paths.kind_changed(path, attrs["st_mode"]):  # replaced outside by another kind of file
                raise OSError(errno.ESTALE, "the name leads to another kind of file now")
            self.links.seen(path, attrs)
        return attrs

    @guarded
    def readdir(self, path: str, fh: int) -> list[Any]:
        return [(name, {"st_mode": mode, "st_ino": ino}, 0) for name, mode, ino in self.core.readdir(path)]

    @guarded
    def readlink(self, path: str) -> str:
        return self.core.readlink(path)

    @guarded
    def open(self, path: str, fi: Any) -> int:
        if self.hidden.holds(path):
            fi.fh, fi.direct_io, fi.keep_cache = self.hidden.reopen(path, fi.flags), 0, 1
            return 0
        if is_hidden_name(path) and not self.core.root.exists(relative(path)):
            # An open that found the old file just before a rename replaced it, arriving after its last
            # close let it go: ESTALE makes the kernel walk the name again, as the kernel backend does.
            raise OSError(errno.ESTALE, "replaced while being opened")
        control = path.startswith(_CONTROL)
        if control:
            # A control file serves the snapshot its last stat took; libfuse's 5 s attribute timeout let the
            # kernel skip that stat, so stats.json read 5 s old numbers: take a fresh one, and drop the cached
            # size so fstat on this handle asks (and gets this snapshot's).
            self.core.getattr(path)
        result = self.core.guard_open(path, fi.flags) or self.core.open(path, fi.flags)
        fi.fh, fi.direct_io = result.fh, int(result.direct_io)
        fi.keep_cache = 0 if result.direct_io else int(self._keep_pages(path, result.fh))
        if control:
            self.invalidate_path(path)
        return 0

    def _keep_pages(self, path: str, fd: int) -> bool:
        """May this open keep the kernel's pages (sparsefs.fuse.pagecache)? A file changed unseen (a store
        through an outside mapping) also has its cached size and times dropped."""
        keep, changed = self.paths.keep_pages(path, os.fstat(fd))
        if changed:
            self._drop_kernel_cache(path)
        return keep

    def _give_to_caller(self, path: str) -> None:
        """New files belong to whoever created them (matters with --allow-other).

        Only a root daemon can give files away; a failure here must not turn a
        successful create into an error (the file exists and the handle is open).
        """
        uid, gid, _ = mfusepy.fuse_get_context()
        try:
            self.core.give_to_caller(path, uid, gid)
        except OSError as err:
            log.warning("could not give %s to %d:%d: %s", path, uid, gid, err)

    @guarded
    def create(self, path: str, mode: int, fi: Any) -> int:
        self.paths.forget(path)
        result = self.core.create(path, fi.flags, mode)
        fi.fh = result.fh
        self._give_to_caller(path)
        return 0

    @guarded
    def read(self, path: str | None, size: int, offset: int, fi: Any) -> bytes:
        return self.core.read(path, size, offset, int(fi.fh))

    @guarded
    def write(self, path: str | None, data: bytes, offset: int, fi: Any) -> int:
        written = self.core.write(path, data, offset, int(fi.fh))
        if path is not None:
            self.links.changed(self.links.key(path), path)  # known links only: no stat per write
        return written

    @guarded
    def truncate(self, path: str | None, length: int, fh: Any = None) -> int:
        if fh is None and self.hidden.holds(path):
            return self.hidden.on(str(path), lambda held: os.truncate(held, length)) or 0
        self.core.truncate(path, length, _fh(fh))
        if path is not None:
            self._changed(path)
        return 0

    @guarded
    def fsync(self, path: str | None, datasync: int, fi: Any) -> int:
        self.core.fsync(path, bool(datasync), int(fi.fh))
        return 0

    @guarded
    def release(self, path: str | None, fi: Any) -> int:
        self.core.release(path, int(fi.fh))
        return 0

    @guarded
    def mkdir(self, path: str, mode: int) -> int:
        self.paths.forget(path)
        self.core.mkdir(path, mode)
        self._give_to_caller(path)
        return 0

    @guarded
    def mknod(self, path: str, mode: int, dev: int) -> int:
        self.paths.forget(path)
        self.core.mknod(path, mode, dev)
        self._give_to_caller(path)
        return 0

    @guarded
    def rmdir(self, path: str) -> int:
        self.core.rmdir(path)
        self.paths.forget(path, tree=True)
        return 0

    @guarded
    def unlink(self, path: str) -> int:
        if self.hidden.holds(path):
            self.hidden.forget(path)  # libfuse at the last close of a hidden file
            return 0
        key = self._inode(path)
        self.core.unlink(path)
        self.paths.forget(path)
        self.links.removed(path)
        self.links.changed(key, path)
        return 0

    @guarded
    def rename(self, old: str, new: str, flags: int = 0) -> int:
        if self.hidden.holds(old):
            raise OSError(errno.ENOENT, "an unlinked file cannot be linked again")
        if not flags and is_hidden_name(new) and not self.core.root.exists(relative(new)):
            key = self._inode(old)
            self.hidden.hide(old, new)  # libfuse hides a file that is open: it is unlinked in the source now
            self.links.removed(old)
            self.links.changed(key, old)
            return 0
        moving, replaced = self._inode(old), self._inode(new)
        self.core.rename(old, new, flags)
        self.paths.forget(old, tree=True)
        self.paths.forget(new, tree=True)
        self.links.moved(old, new)
        self.links.changed(moving, new)
        if replaced != moving:
            self.links.changed(replaced, new)
        return 0

    @guarded
    def symlink(self, link_path: str, target: str) -> int:  # mfusepy's argument order
        self.paths.forget(link_path)
        self.core.symlink(link_path, target)
        self._give_to_caller(link_path)
        return 0

    @guarded
    def link(self, target: str, source: str) -> int:
        self.paths.forget(target)
        self.core.link(target, source)
        attrs = self.core.getattr(target)
        self.links.seen(source, attrs)
        self.links.seen(target, attrs)
        self._changed(target)  # the existing names' nlink and ctime
        return 0

    @guarded
    def chmod(self, path: str, mode: int) -> int:
        if self.hidden.holds(path):
            return self.hidden.on(path, lambda held: os.chmod(held, mode)) or 0
        self.core.chmod(path, mode)
        self._changed(path)
        return 0

    @guarded
    def chown(self, path: str, uid: int, gid: int) -> int:
        if self.hidden.holds(path):
            return self.hidden.on(path, lambda held: os.chown(held, uid, gid)) or 0
        self.core.chown(path, uid, gid)
        self._changed(path)
        return 0

    @guarded
    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        atime, mtime = times if times is not None else (UTIME_NOW, UTIME_NOW)
        if self.hidden.holds(path):
            return self.hidden.on(path, lambda held: utimens_path(held, int(atime), int(mtime))) or 0
        self.core.utimens(path, int(atime), int(mtime))
        self._changed(path)
        return 0

    @guarded
    def statfs(self, path: str) -> dict[str, int]:
        return self.core.statfs(path)

    @guarded
    def access(self, path: str, amode: int) -> int:
        if self.hidden.holds(path):
            if not self.hidden.on(path, lambda held: os.access(held, amode)):
                raise OSError(errno.EACCES, "access denied")
            return 0
        self.core.access(path, amode)
        return 0

    @guarded
    def getxattr(self, path: str, name: str, position: int = 0) -> bytes:
        if self.hidden.holds(path):
            return self.hidden.on(path, lambda held: os.getxattr(held, name))
        return self.core.getxattr(path, name)

    @guarded
    def listxattr(self, path: str) -> list[str]:
        if self.hidden.holds(path):
            return self.hidden.on(path, os.listxattr)
        return self.core.listxattr(path)

    @guarded
    def setxattr(self, path: str, name: str, value: bytes, options: int, position: int = 0) -> int:
        if self.hidden.holds(path):
            return self.hidden.on(path, lambda held: os.setxattr(held, name, value, options)) or 0
        self.core.setxattr(path, name, value, options)
        self._changed(path)  # ctime
        return 0

    @guarded
    def removexattr(self, path: str, name: str) -> int:
        if self.hidden.holds(path):
            return self.hidden.on(path, lambda held: os.removexattr(held, name)) or 0
        self.core.removexattr(path, name)
        self._changed(path)
        return 0


class _Fuse(mfusepy.FUSE):  # type: ignore[misc]
    """mfusepy.FUSE passing rename(2) flags, UTIME_NOW/UTIME_OMIT and ftruncate handles through intact."""

    def truncate_fuse_3(self, path: bytes | None, length: int, fip: Any) -> int:
        # mfusepy drops the handle here; ftruncate on a file unlinked while open needs it.
        decoded = None if path is None else path.decode(self.encoding, self.errors)
        return int(self.operations.truncate(decoded, length, fip.contents if fip else None))

    def utimens_fuse_3(self, path: bytes | None, buf: Any, fip: Any) -> int:
        times = (_timespec_ns(buf.contents.actime), _timespec_ns(buf.contents.modtime)) if buf else None
        return int(self.operations.utimens(None if path is None else path.decode(self.encoding, self.errors), times))

    def rename_fuse_3(self, old: bytes, new: bytes, flags: int) -> int:
        return int(self.operations.rename(old.decode(self.encoding, self.errors),
                                          new.decode(self.encoding, self.errors), flags))


def _timespec_ns(ts: Any) -> int:
    if ts.tv_nsec in (UTIME_NOW, UTIME_OMIT):
        return int(ts.tv_nsec)
    return int(ts.tv_sec) * 10**9 + int(ts.tv_nsec)


def _invalidate(fuse_ptr: ctypes.c_void_p, path: bytes) -> None:
    fn = mfusepy._libfuse.fuse_invalidate_path
    fn.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    fn.restype = ctypes.c_int
    result = fn(fuse_ptr, path)
    if result != 0:
        log.debug("fuse_invalidate_path(%r) = %d", path, result)


def _caller_credentials() -> Credentials:
    """fuse_get_context()'s uid, gid and pid, with the caller's supplementary groups (sparsefs.source.access)."""
    uid, gid, pid = mfusepy.fuse_get_context()
    return Credentials.of_request(int(uid), int(gid), int(pid))


def serve(core: Core, binding: LateBinding, mountpoint: str, allow_other: bool = False) -> None:
    """Mount and serve until unmounted or signalled (SIGINT/SIGTERM unmount cleanly)."""
    options = dict(MOUNT_OPTIONS)
    if allow_other:
        options.update(allow_other=True, default_permissions=True)
    try:
        operations = MfusepyOperations(core, binding)
        operations.allow_other = allow_other
        _Fuse(operations, mountpoint, raw_fi=True, foreground=True, **options)
    except RuntimeError as err:
        # libfuse's fuse_main answers 8 when its loop was ended by SIGINT/SIGTERM/SIGHUP; the
        # unmount already happened then. Anything else (or a mount still present) is a failure.
        if err.args != (_LOOP_ENDED_BY_SIGNAL,) or find_mount(mountpoint):
            raise
