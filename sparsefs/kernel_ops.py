"""Kernel-protocol requests answered through the operations core.

One method per opcode: request in, reply payload out (``None`` for requests
the kernel expects no answer to), ``OSError`` for an errno. Ordinary files are
opened with kernel passthrough: the first open registers a backing file with
the kernel and every later open of the same node reuses its backing id, so
reads, writes and mmap of plain files never reach this process. Generated
files (EvidencePacks, the control tree) get ordinary READ replies with
direct_io. Device access (ioctls) goes through ``Device``; sending replies is
the session's job (``sparsefs.fuse_kernel``).
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import threading
from dataclasses import dataclass
from typing import Protocol

from sparsefs import kproto as k
from sparsefs.core import Core, OpenResult
from sparsefs.kernel_dirs import DirectoryOps
from sparsefs.nodes import Node, NodeTable
from sparsefs.rootfs import UTIME_NOW, UTIME_OMIT, stat_dict
from sparsefs.virtual import is_virtual_ino

log = logging.getLogger("sparsefs.kernel")

_PASSTHROUGH_FH_BASE = 1 << 50  # above the core's fds and generated handles
_RENAME_EXCHANGE = 2
_WRITE_MODES = os.O_WRONLY | os.O_RDWR


class Device(Protocol):
    """The backing-file ioctls of /dev/fuse."""

    def backing_open(self, fd: int) -> int: ...

    def backing_close(self, backing_id: int) -> None: ...


@dataclass
class _Handle:
    """An open file as the kernel knows it."""

    node: Node
    core_fh: int | None  # the core's fd or generated handle; None for a passthrough open
    writable: bool


@dataclass(frozen=True)
class Caller:
    uid: int
    gid: int
    pid: int


class KernelOps:
    """Answers kernel requests; thread-safe."""

    def __init__(self, core: Core, device: Device, timeout_s: float = 5.0) -> None:
        self.core = core
        self.device = device
        self.timeout_s = timeout_s
        self.passthrough = False  # set from the INIT negotiation
        self.nodes = NodeTable(core.root.lstat("").st_ino)
        self._handles: dict[int, _Handle] = {}
        self._ids = itertools.count(_PASSTHROUGH_FH_BASE)
        self._lock = threading.Lock()
        self._context = threading.local()
        self.dirs = DirectoryOps(core, self.nodes, self._entry)
        core.caller_pid = self._caller_pid

    # ---- request context -----------------------------------------------------
    def set_caller(self, request: k.Request) -> None:
        self._context.caller = Caller(request.uid, request.gid, request.pid)

    def _caller_pid(self) -> int | None:
        caller = getattr(self._context, "caller", None)
        return None if caller is None else caller.pid

    def _path(self, nodeid: int) -> str:
        path = self.nodes.path(nodeid)
        if path is None:
            raise OSError(errno.ENOENT, "no longer in the tree")
        return path

    def _child(self, request: k.Request, count: int = 1, skip: int = 0) -> tuple[str, ...]:
        names = k.split_names(request.body[skip:], count)
        base = self._path(request.nodeid)
        return tuple(base + name if base == "/" else f"{base}/{name}" for name in names)

    # ---- attributes --------------------------------------------------------
    def _entry(self, parent: int, name: str, attrs: dict[str, int]) -> bytes:
        node = self.nodes.remember(parent, name, attrs["st_ino"], generated=is_virtual_ino(attrs["st_ino"]))
        return k.pack_entry(node.nodeid, attrs, self._timeout(node))

    def _timeout(self, node: Node) -> float:
        """Control files (children of a generated directory) are live: the kernel must always ask."""
        parent = self.nodes.peek(node.parent)
        return 0.0 if parent is not None and parent.generated else self.timeout_s

    def _attrs(self, node: Node, fh: int | None = None) -> dict[str, int]:
        handle = self._handles.get(fh) if fh is not None else None
        if handle is not None and handle.core_fh is not None:
            return self.core.getattr(None, handle.core_fh)
        if node.keeper_fd >= 0:
            return stat_dict(os.fstat(node.keeper_fd))
        return self.core.getattr(self._path(node.nodeid))

    def lookup(self, request: k.Request) -> bytes:
        (path,) = self._child(request)
        return self._entry(request.nodeid, path.rpartition("/")[2], self.core.getattr(path))

    def getattr(self, request: k.Request) -> bytes:
        flags, _, fh = k.GETATTR_IN.unpack_from(request.body)
        node = self.nodes.get(request.nodeid)
        return k.pack_attr_out(self._attrs(node, fh if flags & k.GETATTR_FH else None), self._timeout(node))

    def setattr(self, request: k.Request) -> bytes:
        (valid, _, fh, size, _, atime, mtime, _, ansec, mnsec, _, mode, _, uid, gid, _) = k.SETATTR_IN.unpack_from(
            request.body)
        node = self.nodes.get(request.nodeid)
        path = self.nodes.path(node.nodeid)
        if valid & k.FATTR_MODE:
            self._on_node(node, path, lambda p: self.core.chmod(p, mode & 0o7777), lambda fd: os.fchmod(fd, mode))
        if valid & (k.FATTR_UID | k.FATTR_GID):
            owner = (uid if valid & k.FATTR_UID else -1, gid if valid & k.FATTR_GID else -1)
            self._on_node(node, path, lambda p: self.core.chown(p, *owner), lambda fd: os.fchown(fd, *owner))
        if valid & k.FATTR_SIZE:
            self._truncate(node, path, size, fh if valid & k.FATTR_FH else None)
        if valid & (k.FATTR_ATIME | k.FATTR_MTIME | k.FATTR_ATIME_NOW | k.FATTR_MTIME_NOW):
            times = (_time(valid, k.FATTR_ATIME, k.FATTR_ATIME_NOW, atime, ansec),
                     _time(valid, k.FATTR_MTIME, k.FATTR_MTIME_NOW, mtime, mnsec))
            self._on_node(node, path, lambda p: self.core.utimens(p, *times),
                          lambda fd: os.utime(f"/proc/self/fd/{fd}", ns=_explicit(times)))
        return k.pack_attr_out(self._attrs(node, fh if valid & k.FATTR_FH else None), self._timeout(node))

    def _on_node(self, node: Node, path: str | None, by_path: _PathOp, by_fd: _FdOp) -> None:
        """Apply a change by path, or through the kept fd of a file unlinked while open."""
        if path is not None:
            by_path(path)
        elif node.keeper_fd >= 0:
            by_fd(node.keeper_fd)
        else:
            raise OSError(errno.ENOENT, "no longer in the tree")

    def _truncate(self, node: Node, path: str | None, size: int, fh: int | None) -> None:
        handle = self._handles.get(fh) if fh is not None else None
        if handle is not None and handle.core_fh is not None:
            self.core.truncate(path, size, handle.core_fh)
        elif path is not None:
            self.core.truncate(path, size)
        elif node.keeper_fd >= 0:
            os.truncate(f"/proc/self/fd/{node.keeper_fd}", size)
        else:
            raise OSError(errno.ENOENT, "no longer in the tree")

    def access(self, request: k.Request) -> bytes:
        (mask,) = k.U32.unpack_from(request.body)
        self.core.access(self._path(request.nodeid), mask)
        return b""

    def statfs(self, request: k.Request) -> bytes:
        return k.pack_statfs(self.core.statfs("/"))

    def readlink(self, request: k.Request) -> bytes:
        return os.fsencode(self.core.readlink(self._path(request.nodeid)))

    # ---- namespace -----------------------------------------------------------
    def _created(self, request: k.Request, path: str) -> bytes:
        self._give_to_caller(path)
        return self._entry(request.nodeid, path.rpartition("/")[2], self.core.getattr(path))

    def _give_to_caller(self, path: str) -> None:
        """New files belong to whoever made them (with --allow-other); only a root daemon can give them."""
        caller = self._context.caller
        if os.geteuid() != 0 or (caller.uid, caller.gid) == (0, 0):
            return
        try:
            self.core.chown(path, caller.uid, caller.gid)
        except OSError as err:
            log.warning("could not give %s to %d:%d: %s", path, caller.uid, caller.gid, err)

    def mkdir(self, request: k.Request) -> bytes:
        mode, _umask = k.TWO_U32.unpack_from(request.body)
        (path,) = self._child(request, skip=k.TWO_U32.size)
        self.core.mkdir(path, mode)
        return self._created(request, path)

    def mknod(self, request: k.Request) -> bytes:
        mode, rdev, _umask, _ = k.MKNOD_IN.unpack_from(request.body)
        (path,) = self._child(request, skip=k.MKNOD_IN.size)
        self.core.mknod(path, mode, rdev)
        return self._created(request, path)

    def symlink(self, request: k.Request) -> bytes:
        name, target = k.split_names(request.body, 2)
        path = self._child_of(request.nodeid, name)
        self.core.symlink(path, target)
        return self._created(request, path)

    def link(self, request: k.Request) -> bytes:
        (old_nodeid,) = k.U64.unpack_from(request.body)
        (path,) = self._child(request, skip=k.U64.size)
        self.core.link(path, self._path(old_nodeid))
        return self._entry(request.nodeid, path.rpartition("/")[2], self.core.getattr(path))

    def _child_of(self, nodeid: int, name: str) -> str:
        base = self._path(nodeid)
        return base + name if base == "/" else f"{base}/{name}"

    def unlink(self, request: k.Request) -> bytes:
        return self._remove(request, self.core.unlink)

    def rmdir(self, request: k.Request) -> bytes:
        return self._remove(request, self.core.rmdir)

    def _remove(self, request: k.Request, remove: _PathOp) -> bytes:
        (path,) = self._child(request)
        name = path.rpartition("/")[2]
        victim = self.nodes.find(path)
        if victim is not None:
            self._keep_reachable(victim, path)
        remove(path)
        self.nodes.detach(request.nodeid, name)
        if victim is not None:
            self._drop_backing_if_idle(victim)
        return b""

    def rename(self, request: k.Request) -> bytes:
        (new_parent,) = k.U64.unpack_from(request.body)
        return self._rename(request, new_parent, 0, k.U64.size)

    def rename2(self, request: k.Request) -> bytes:
        new_parent, flags = k.RENAME2_IN.unpack_from(request.body)
        return self._rename(request, new_parent, flags, k.RENAME2_IN.size)

    def _rename(self, request: k.Request, new_parent: int, flags: int, skip: int) -> bytes:
        old_name, new_name = k.split_names(request.body[skip:], 2)
        old, new = self._child_of(request.nodeid, old_name), self._child_of(new_parent, new_name)
        replaced = None if flags & _RENAME_EXCHANGE else self.nodes.find(new)
        if replaced is not None:
            self._keep_reachable(replaced, new)
        self.core.rename(old, new, flags)
        self.nodes.rename(request.nodeid, old_name, new_parent, new_name, exchange=bool(flags & _RENAME_EXCHANGE))
        if replaced is not None:
            self._drop_backing_if_idle(replaced)
        return b""

    def _keep_reachable(self, node: Node, path: str) -> None:
        """A file about to lose its name while open: keep an fd so fstat, ftruncate and fsync still work."""
        with node.lock:
            if self._open_count(node) and node.keeper_fd < 0 and not node.generated:
                try:
                    node.keeper_fd = self.core.root.open_file(_rel(path), os.O_RDONLY | os.O_NONBLOCK)
                except OSError as err:
                    log.debug("no keeper for %s: %s", path, err)

    def _open_count(self, node: Node) -> int:
        with self._lock:
            return sum(1 for handle in self._handles.values() if handle.node is node)

    # ---- files -------------------------------------------------------------
    def open(self, request: k.Request) -> bytes:
        flags, _ = k.OPEN_IN.unpack_from(request.body)
        node = self.nodes.get(request.nodeid)
        if node.generated or not (self.passthrough and node.passthrough):
            return self._reply_open(node, self.core.open(self._path(node.nodeid), flags), flags)
        with node.lock:
            if node.backing_id is None:
                result = self.core.open(self._path(node.nodeid), flags)
                if result.direct_io or not self._register_backing(node, result.fh):
                    return self._reply_open(node, result, flags)
                os.close(result.fh)
            return self._passthrough_open(node, flags)

    def _register_backing(self, node: Node, fd: int) -> bool:
        try:
            node.backing_id = self.device.backing_open(fd)
        except OSError as err:
            log.warning("passthrough refused for %s (%s); serving it through the daemon", node.name, err)
            node.passthrough = False
            return False
        return True

    def _passthrough_open(self, node: Node, flags: int) -> bytes:
        assert node.backing_id is not None
        fh = self._add_handle(_Handle(node, None, bool(flags & _WRITE_MODES)), next(self._ids))
        return k.OPEN_OUT.pack(fh, k.FOPEN_PASSTHROUGH, node.backing_id)

    def _reply_open(self, node: Node, result: OpenResult, flags: int) -> bytes:
        fh = self._add_handle(_Handle(node, result.fh, bool(flags & _WRITE_MODES)), result.fh)
        return k.OPEN_OUT.pack(fh, k.FOPEN_DIRECT_IO if result.direct_io else k.FOPEN_KEEP_CACHE, 0)

    def _add_handle(self, handle: _Handle, fh: int) -> int:
        with self._lock:
            self._handles[fh] = handle
        return fh

    def create(self, request: k.Request) -> bytes:
        flags, mode, _umask, _ = k.CREATE_IN.unpack_from(request.body)
        (path,) = self._child(request, skip=k.CREATE_IN.size)
        result = self.core.create(path, flags, mode)
        try:
            self._give_to_caller(path)
            attrs = stat_dict(os.fstat(result.fh))
            entry = self._entry(request.nodeid, path.rpartition("/")[2], attrs)
        except BaseException:
            os.close(result.fh)
            raise
        node = self.nodes.get(k.ENTRY_HEAD.unpack_from(entry)[0])
        return entry + self._open_created(node, result, flags)

    def _open_created(self, node: Node, result: OpenResult, flags: int) -> bytes:
        if not (self.passthrough and node.passthrough):
            return self._reply_open(node, result, flags)
        with node.lock:
            if node.backing_id is None and not self._register_backing(node, result.fh):
                return self._reply_open(node, result, flags)
            os.close(result.fh)
            return self._passthrough_open(node, flags)

    def read(self, request: k.Request) -> bytes:
        fh, offset, size, _ = k.READ_IN.unpack_from(request.body)
        return self.core.read(None, size, offset, self._core_fh(fh))

    def write(self, request: k.Request) -> bytes:
        fh, offset, size, _, _, _, _ = k.WRITE_IN.unpack_from(request.body)
        handle = self._handle(fh)
        data = request.body[k.WRITE_IN.size : k.WRITE_IN.size + size]
        written = self.core.write(self.nodes.path(handle.node.nodeid), bytes(data), offset, self._core_fh(fh))
        return k.TWO_U32.pack(written, 0)

    def _handle(self, fh: int) -> _Handle:
        handle = self._handles.get(fh)
        if handle is None:
            raise OSError(errno.EBADF, "unknown handle")
        return handle

    def _core_fh(self, fh: int) -> int:
        core_fh = self._handle(fh).core_fh
        if core_fh is None:
            raise OSError(errno.EIO, "passthrough handles are served by the kernel")
        return core_fh

    def fsync(self, request: k.Request) -> bytes:
        fh, flags = k.FSYNC_IN.unpack_from(request.body)
        handle = self._handle(fh)
        if handle.core_fh is not None:
            self.core.fsync(None, bool(flags & k.FSYNC_FDATASYNC), handle.core_fh)
        else:
            self._sync_node(handle.node, bool(flags & k.FSYNC_FDATASYNC))
        return b""

    def _sync_node(self, node: Node, datasync: bool) -> None:
        sync = os.fdatasync if datasync else os.fsync
        if node.keeper_fd >= 0:
            sync(node.keeper_fd)
            return
        fd = self.core.root.open_file(_rel(self._path(node.nodeid)), os.O_RDONLY | os.O_NONBLOCK)
        try:
            sync(fd)
        finally:
            os.close(fd)

    def release(self, request: k.Request) -> bytes:
        fh, _, _ = k.RELEASE_IN.unpack_from(request.body)
        with self._lock:
            handle = self._handles.pop(fh, None)
        if handle is None:
            return b""
        path = self.nodes.path(handle.node.nodeid)
        if handle.core_fh is not None:
            self.core.release(path, handle.core_fh)
        elif handle.writable and path is not None:
            self.core.source_written(path)  # passthrough writes never passed through us
        if path is None:
            self._drop_backing_if_idle(handle.node)
        return b""

    # ---- forgetting ----------------------------------------------------------
    def forget(self, request: k.Request) -> None:
        (count,) = k.U64.unpack_from(request.body)
        self._forget(request.nodeid, count)

    def batch_forget(self, request: k.Request) -> None:
        (count, _) = k.TWO_U32.unpack_from(request.body)
        for index in range(count):
            nodeid, nlookup = k.FORGET_ONE.unpack_from(request.body, k.TWO_U32.size + index * k.FORGET_ONE.size)
            self._forget(nodeid, nlookup)

    def _forget(self, nodeid: int, count: int) -> None:
        node = self.nodes.forget(nodeid, count)
        if node is not None:
            self._release_backing(node)

    def _drop_backing_if_idle(self, node: Node) -> None:
        """A file gone from the tree and no longer open: let its disk space go now, not at FORGET."""
        if not self._open_count(node):
            self._release_backing(node)

    def _release_backing(self, node: Node) -> None:
        with node.lock:
            backing, keeper = node.backing_id, node.keeper_fd
            node.backing_id, node.keeper_fd = None, -1
        if backing is not None:
            try:
                self.device.backing_close(backing)
            except OSError as err:
                log.debug("backing close %d: %s", backing, err)
        if keeper >= 0:
            os.close(keeper)

    # ---- invalidation --------------------------------------------------------
    def source_gone(self, node: Node) -> None:
        """The watcher saw ``node``'s file deleted or replaced outside the mount."""
        if node.parent == 0 or node.generated:
            return
        self._drop_backing_if_idle(node)

    def open_handles(self) -> int:
        with self._lock:
            return len(self._handles)


def _rel(path: str) -> str:
    return path.lstrip("/")


def _time(valid: int, given: int, now: int, seconds: int, nsec: int) -> int:
    if valid & now:
        return UTIME_NOW
    if valid & given:
        return seconds * 10**9 + nsec
    return UTIME_OMIT


def _explicit(times: tuple[int, int]) -> tuple[int, int]:
    """os.utime has no UTIME_NOW/OMIT: a file reached only through its fd gets 'now' for either."""
    import time

    now = time.time_ns()
    return tuple(now if value in (UTIME_NOW, UTIME_OMIT) else value for value in times)  # type: ignore[return-value]


class _PathOp(Protocol):
    def __call__(self, path: str, /) -> object: ...


class _FdOp(Protocol):
    def __call__(self, fd: int, /) -> object: ...
