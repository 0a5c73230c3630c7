"""Kernel-protocol requests answered through the operations core.

One method per opcode: request in, reply payload out (``None`` for requests
the kernel expects no answer to), ``OSError`` for an errno. Names and
attributes live here; open files (kernel passthrough, backing ids) in
``sparsefs.fuse.kernel.files``; directory listings in ``sparsefs.fuse.kernel.dirs``.
Sending replies is the session's job (``sparsefs.fuse.kernel.session``).
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import threading
import time
from collections.abc import Callable
from typing import Protocol

from sparsefs.fuse.kernel import proto as k
from sparsefs.fuse.kernel.cache import LIVE_S, NO_OPEN_LIVE_S, SHORT_S, CachePolicy
from sparsefs.fuse.kernel.dirs import DirectoryOps
from sparsefs.fuse.kernel.files import Device, FileOps
from sparsefs.fuse.kernel.nodes import ROOT, Node, NodeTable
from sparsefs.fuse.kernel.privs import kill_suidgid, privileged
from sparsefs.fuse.kernel.xattrs import XattrOps
from sparsefs.source.access import Credentials
from sparsefs.source.rootfs import UTIME_NOW, UTIME_OMIT, stat_dict
from sparsefs.vfs.control import CONTROL_DIR
from sparsefs.vfs.core import Core
from sparsefs.vfs.virtual import is_virtual_ino

log = logging.getLogger("sparsefs.kernel")

_RENAME_EXCHANGE = 2


class KernelOps:
    """Answers kernel requests; thread-safe."""

    def __init__(self, core: Core, device: Device) -> None:
        self.core = core
        root = core.root.lstat("")
        self.cache = CachePolicy(core.freshness, root.st_dev)
        self.nodes = NodeTable(root.st_ino)
        self.files = FileOps(core, self.nodes, device)
        self._last: dict[int, os.stat_result | dict[str, int]] = {}  # nodeid -> attributes last handed out
        self._context = threading.local()
        self.dirs = DirectoryOps(core, self.nodes, self._entry, self.real_entry)
        self.xattrs = XattrOps(core, self.nodes, self.files)
        self.forget_name: Callable[[int, str], None] = lambda parent, name: None  # the notifier's, once serving
        self.no_open = False  # --no-open: OPEN answers ENOSYS once; READs then come by node

    # ---- request context -----------------------------------------------------
    def set_caller(self, request: k.Request) -> None:
        self._context.caller = request  # uid, gid and pid of whoever made the request

    def caller_pid(self) -> int | None:
        """The pid of the request this thread answers (the binding's caller, sparsefs.vfs.binding)."""
        caller = getattr(self._context, "caller", None)
        return None if caller is None else int(caller.pid)

    def caller_credentials(self) -> Credentials | None:
        """The uid, gid (fuse_in_header) and groups of the request this thread answers."""
        caller = getattr(self._context, "caller", None)
        return None if caller is None else Credentials.of_request(caller.uid, caller.gid, caller.pid)

    def _path(self, nodeid: int) -> str:
        path = self.nodes.path(nodeid)
        if path is None:  # ESTALE: the kernel looks the name up again (see kernel_files._need)
            raise OSError(errno.ESTALE, "no longer in the tree")
        return path

    def _child(self, request: k.Request, count: int = 1, skip: int = 0) -> tuple[str, ...]:
        names = k.split_names(request.body[skip:], count)
        base = self._path(request.nodeid)
        return tuple(base + name if base == "/" else f"{base}/{name}" for name in names)

    # ---- attributes --------------------------------------------------------
    def _entry(self, parent: int, name: str, attrs: dict[str, int]) -> bytes:
        ino = attrs["st_ino"]
        node = self.nodes.remember(parent, name, ino, is_virtual_ino(ino), attrs.get("st_dev", 0), attrs["st_mode"],
                                   attrs.get("st_nlink", 1))
        self._last[node.nodeid] = attrs
        return k.pack_entry(node.nodeid, self._settled(node, attrs), self._timeout(node, attrs))

    def in_control_tree(self, node: Node) -> bool:
        """Is ``node`` .sparsefs or below it?"""
        while node.parent not in (0, ROOT):
            parent = self.nodes.peek(node.parent)
            if parent is None:
                return False
            node = parent
        return node.parent == ROOT and node.name == CONTROL_DIR

    def _settled(self, node: Node, attrs: dict[str, int]) -> dict[str, int]:
        """--no-open: the kernel keeps every file's pages across reads and drops them only when its size or
        mtime changes, so a live control file's snapshot carries the time it was taken as its mtime."""
        if self.no_open and node.generated and self._timeout(node) == NO_OPEN_LIVE_S:
            return attrs | {"st_mtime": time.time_ns()}
        return attrs

    def _timeout(self, node: Node, attrs: dict[str, int] | None = None) -> float:
        """How long the kernel may keep this node's entry and attributes (sparsefs.fuse.kernel.cache).

        The control tree is live (its listings and snapshots change without notice): the kernel
        must always ask. Packs keep the short timeout; real files follow the freshness mode."""
        if node.generated:
            parent = self.nodes.peek(node.parent)
            live = (parent is not None and parent.generated) or (node.parent == ROOT and node.name == CONTROL_DIR)
            if live and self.no_open and node.kind == stat.S_IFREG:
                return NO_OPEN_LIVE_S  # no handle pins a snapshot: one per second, so a read sees one whole
            return LIVE_S if live else SHORT_S
        if attrs is None:
            return self.cache.real(self.cache.root_dev, 2)  # not known here: as if hard-linked (short)
        return self.cache.real(attrs.get("st_dev", 0), attrs.get("st_nlink", 1), attrs.get("st_mode", 0))

    def _attrs(self, node: Node, fh: int | None = None) -> dict[str, int]:
        core_fh = self.files.core_fh(fh)
        if core_fh is not None:
            return self.core.getattr(None, core_fh)
        opened = self.files.with_keeper(node, os.fstat)  # an open file: the inode that was opened
        return stat_dict(opened) if opened is not None else self.core.getattr(self._path(node.nodeid))

    def lookup(self, request: k.Request) -> bytes:
        (path,) = self._child(request)
        name = path.rpartition("/")[2]
        if self._plainly_real(request.nodeid, name):
            try:
                st = self.core.root.lstat(path[1:])
            except FileNotFoundError:
                return self._absent(request.nodeid, name, path)  # no '@': it cannot be a virtual name either
            return self.real_entry(request.nodeid, name, st)
        return self._entry(request.nodeid, name, self.core.getattr(path))

    def _absent(self, parent: int, name: str, path: str) -> bytes:
        """A negative entry the kernel may keep while the watcher would tell it otherwise; else ENOENT.

        The name is remembered as absent before it is checked again: a create that the first check
        missed and whose event found the name not yet remembered (so no invalidation) is seen here."""
        timeout = self.cache.negative(parent, name, path)
        if not timeout:
            raise OSError(errno.ENOENT, "no such file")
        try:
            st = self.core.root.lstat(path[1:])
        except FileNotFoundError:
            return k.pack_negative_entry(timeout)
        self.cache.forget_absent(parent, name)
        return self.real_entry(parent, name, st)

    def _plainly_real(self, parent: int, name: str) -> bool:
        """A name that can only be a real file: no '@', not the control tree (the hot path)."""
        if "@" in name or (parent == ROOT and name == CONTROL_DIR):
            return False
        node = self.nodes.peek(parent)
        return node is not None and not node.generated

    def real_entry(self, parent: int, name: str, st: os.stat_result) -> bytes:
        node = self.nodes.remember(parent, name, st.st_ino, False, st.st_dev, st.st_mode, st.st_nlink)
        self._last[node.nodeid] = st
        return k.pack_entry_stat(node.nodeid, st, self.cache.real(st.st_dev, st.st_nlink, st.st_mode))

    def getattr(self, request: k.Request) -> bytes:
        flags, _, fh = k.GETATTR_IN.unpack_from(request.body)
        node = self.nodes.get(request.nodeid)
        if not node.generated and self.files.core_fh(fh) is None:
            opened = self.files.with_keeper(node, os.fstat)
            path = self.nodes.path(node.nodeid) if opened is None else None
            if opened is None and path is None:  # removed: as Linux, its last attributes, no links
                return k.pack_attr_out(self._removed_attrs(node), SHORT_S)
            st = opened if opened is not None else self.core.root.lstat((path or "/")[1:])
            if opened is None and not same_object(node, st):
                self._replaced(node, path or "/")
            self._last[node.nodeid] = st
            return k.pack_attr_out_stat(st, self.cache.real(st.st_dev, st.st_nlink, st.st_mode))
        attrs = self._settled(node, self._attrs(node, fh if flags & k.GETATTR_FH else None))
        return k.pack_attr_out(attrs, self._timeout(node, attrs))

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
        if valid & k.FATTR_KILL_SUIDGID:  # killpriv_v2: a truncate without CAP_FSETID, or a chown
            self._on_node(node, path, self._kill_by_path, kill_suidgid)
        if valid & (k.FATTR_ATIME | k.FATTR_MTIME | k.FATTR_ATIME_NOW | k.FATTR_MTIME_NOW):
            times = (_time(valid, k.FATTR_ATIME, k.FATTR_ATIME_NOW, atime, ansec),
                     _time(valid, k.FATTR_MTIME, k.FATTR_MTIME_NOW, mtime, mnsec))
            self._on_node(node, path, lambda p: self.core.utimens(p, *times),
                          lambda fd: os.utime(f"/proc/self/fd/{fd}", ns=_explicit(times, os.fstat(fd))))
        attrs = self._attrs(node, fh if valid & k.FATTR_FH else None)
        return k.pack_attr_out(attrs, self._timeout(node, attrs))

    def _on_node(self, node: Node, path: str | None, by_path: _PathOp, by_fd: _FdOp) -> None:
        """Apply a change by path (if it still leads to this node's file), or through the kept fd of a file
        unlinked while open."""
        if path is not None and not node.generated and not same_object(node, self.core.root.lstat(path[1:])):
            self._replaced(node, path)
        if path is not None:
            by_path(path)
        elif not self.files.on_open_file(node, by_fd):
            raise OSError(errno.ENOENT, "no longer in the tree")

    def _kill_by_path(self, path: str) -> None:
        mode = self.core.root.lstat(path[1:]).st_mode
        if stat.S_ISREG(mode) and privileged(mode):
            self.core.chmod(path, stat.S_IMODE(mode) & ~(stat.S_ISUID | (stat.S_ISGID if mode & stat.S_IXGRP else 0)))

    def _truncate(self, node: Node, path: str | None, size: int, fh: int | None) -> None:
        core_fh = self.files.core_fh(fh)
        if core_fh is not None:
            self.core.truncate(path, size, core_fh)
        elif path is not None:
            self.core.truncate(path, size)
        elif not self.files.on_open_file(node, lambda fd: os.truncate(f"/proc/self/fd/{fd}", size)):
            raise OSError(errno.ENOENT, "no longer in the tree")

    def access(self, request: k.Request) -> bytes:
        (mask,) = k.U32.unpack_from(request.body)
        path = self.nodes.path(request.nodeid)
        if path is None:
            _check_access(self._removed_attrs(self.nodes.get(request.nodeid)), request, mask)
        else:
            self.core.access(path, mask)
        return b""

    def handed_out(self, node: Node, st: os.stat_result) -> bool:
        """Are ``st`` the attributes the kernel was last given for ``node`` (atime aside)?"""
        last = self._last.get(node.nodeid)
        if last is None:
            return False
        if isinstance(last, os.stat_result):
            return _attr_key(last) == _attr_key(st)
        return tuple(last.get(key) for key in _ATTR_KEYS) == _attr_key(st)

    def _replaced(self, node: Node, path: str) -> None:
        """``path`` leads to another object than ``node`` now (replaced outside, not yet heard of): the node
        is answered for as a vanished file from now on, the kernel is told to forget the name, and this
        request fails with ESTALE, which makes the kernel walk the path again (LOOKUP_REVAL) and find the
        new object fresh. Never the new object's attributes for the old node (the kernel would mark a
        node whose type changed bad: EIO until it is forgotten)."""
        entry = self.nodes.entry(path)
        if entry is not None and self.nodes.detach(*entry, only=node) is not None:
            self.source_gone(node)
            self.forget_name(*entry)
        raise OSError(errno.ESTALE, f"{path} leads to another file now")

    def _removed_attrs(self, node: Node) -> dict[str, int]:
        """A removed node's attributes as last handed out, with no links (fstat on a removed file or cwd)."""
        last = self._last.get(node.nodeid)
        if last is None:
            raise OSError(errno.ESTALE, "no longer in the tree")
        return {**(stat_dict(last) if isinstance(last, os.stat_result) else last), "st_nlink": 0}

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
        try:
            self.core.give_to_caller(path, caller.uid, caller.gid)
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
        self._losing_name(path)
        remove(path)
        victim = self.nodes.detach(request.nodeid, path.rpartition("/")[2])
        if victim is not None and victim.parent == 0:  # its last name: let its space go (a hard link keeps it)
            self.files.gone_from_tree(victim)
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
        if replaced is not None and replaced.cached_opens:
            self.files.hold_for_reading(replaced)
        self.core.rename(old, new, flags)
        self.nodes.rename(request.nodeid, old_name, new_parent, new_name, exchange=bool(flags & _RENAME_EXCHANGE))
        if replaced is not None and replaced.parent == 0:
            self.files.gone_from_tree(replaced)
        return b""

    def _losing_name(self, path: str) -> None:
        """A page-cache open of the file at ``path`` must still read it once the name is gone."""
        node = self.nodes.find(path)
        if node is not None and node.cached_opens:
            self.files.hold_for_reading(node)

    # ---- files -------------------------------------------------------------
    def reopen(self, nodeid: int, flags: int) -> bytes | None:
        """The fast path's OPEN (sparsefs.fuse.kernel.fastpath): a read-only reopen of a kept file, or None."""
        node = self.nodes.peek(nodeid)
        if node is None or self.no_open:
            return None
        last = self._last.get(nodeid)
        size = None if last is None else last.st_size if isinstance(last, os.stat_result) else last.get("st_size")
        return self.files.reopen(node, flags, size)

    def open(self, request: k.Request) -> bytes:
        if self.no_open:  # from now on the kernel opens files itself (FUSE_NO_OPEN_SUPPORT): no OPEN, no RELEASE
            raise OSError(errno.ENOSYS, "--no-open")
        flags, open_flags = k.OPEN_IN.unpack_from(request.body)
        last = self._last.get(request.nodeid)  # the size the kernel holds: small files may use the page cache
        size = None if last is None else last.st_size if isinstance(last, os.stat_result) else last.get("st_size")
        return self.files.open(self.nodes.get(request.nodeid), flags, size, bool(open_flags & k.OPEN_KILL_SUIDGID))

    def create(self, request: k.Request) -> bytes:
        flags, mode, _umask, open_flags = k.CREATE_IN.unpack_from(request.body)
        (path,) = self._child(request, skip=k.CREATE_IN.size)
        result = self.core.create(path, flags, mode)
        if open_flags & k.OPEN_KILL_SUIDGID:
            kill_suidgid(result.fh)
        nodeid = 0
        try:
            self._give_to_caller(path)
            entry = self.real_entry(request.nodeid, path.rpartition("/")[2], os.fstat(result.fh))
            nodeid = k.ENTRY_HEAD.unpack_from(entry)[0]
            return entry + self.files.open_created(self.nodes.get(nodeid), result, flags)
        except BaseException:
            os.close(result.fh)
            if nodeid:
                self._forget(nodeid, 1)  # the kernel never received this entry
            raise

    def read(self, request: k.Request) -> bytes | memoryview:
        fh, offset, size, _ = k.READ_IN.unpack_from(request.body)
        if fh == 0 and self.no_open:
            return self._read_unopened(self.nodes.get(request.nodeid), offset, size)
        return self.files.read(fh, offset, size)

    def _read_unopened(self, node: Node, offset: int, size: int) -> bytes | memoryview:
        """--no-open: a READ by node alone. A real file is read from its keeper into the page cache; a
        generated one is opened, read and closed in the core (the pack frozen for that name and version,
        or the control file's snapshot its size was given with)."""
        if not node.generated:
            return self.files.read_unopened(node, offset, size)
        path = self._path(node.nodeid)
        opened = self.core.open(path, os.O_RDONLY)
        try:
            return self.core.read(path, size, offset, opened.fh)
        finally:
            self.core.release(path, opened.fh)

    def write(self, request: k.Request) -> bytes:
        fh, offset, size, write_flags, _, _, _ = k.WRITE_IN.unpack_from(request.body)
        data = bytes(request.body[k.WRITE_IN.size : k.WRITE_IN.size + size])
        return k.TWO_U32.pack(self.files.write(fh, offset, data, bool(write_flags & k.WRITE_KILL_SUIDGID)), 0)

    def fsync(self, request: k.Request) -> bytes:
        fh, flags = k.FSYNC_IN.unpack_from(request.body)
        self.files.fsync(fh, bool(flags & k.FSYNC_FDATASYNC))
        return b""

    def release(self, request: k.Request) -> bytes:
        fh, _, _ = k.RELEASE_IN.unpack_from(request.body)
        self.files.release(fh)
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
            self._last.pop(nodeid, None)
            self.files.forgotten(node)

    # ---- invalidation --------------------------------------------------------
    def source_gone(self, node: Node) -> None:
        """The watcher saw a name of ``node``'s file deleted or replaced outside the mount: if it was
        the last name, let the kept file go."""
        if node.parent == 0 and not node.generated:
            self.files.gone_from_tree(node)

    def open_handles(self) -> int:
        return self.files.open_handles()


_ATTR_KEYS = ("st_ino", "st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_mtime", "st_ctime")


def _attr_key(st: os.stat_result) -> tuple[int, ...]:
    """What the kernel caches of a file, as ``stat_dict`` spells it (times in ns); atime aside."""
    return st.st_ino, st.st_mode, st.st_nlink, st.st_uid, st.st_gid, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def same_object(node: Node, st: os.stat_result) -> bool:
    """Does ``st`` (what the node's path leads to now) describe the node's own file?"""
    return st.st_ino == node.ino and node.kind in (0, stat.S_IFMT(st.st_mode))


def _time(valid: int, given: int, now: int, seconds: int, nsec: int) -> int:
    if valid & now:
        return UTIME_NOW
    if valid & given:
        return seconds * 10**9 + nsec
    return UTIME_OMIT


def _explicit(times: tuple[int, int], current: os.stat_result) -> tuple[int, int]:
    """os.utime has no UTIME_NOW/OMIT: spell them out for a file reached only through its fd."""
    now = time.time_ns()
    atime, mtime = (now if value == UTIME_NOW else value for value in times)
    return (current.st_atime_ns if atime == UTIME_OMIT else atime,
            current.st_mtime_ns if mtime == UTIME_OMIT else mtime)


class _PathOp(Protocol):
    def __call__(self, path: str, /) -> object: ...


class _FdOp(Protocol):
    def __call__(self, fd: int, /) -> object: ...


def _check_access(attrs: dict[str, int], caller: k.Request, mask: int) -> None:
    """access(2) from the mode bits, for a node no path reaches any more (root: all but X on a plain file)."""
    mode = attrs["st_mode"]
    if caller.uid == 0:
        allowed = os.R_OK | os.W_OK | (os.X_OK if mode & 0o111 or stat.S_ISDIR(mode) else 0)
    else:
        shift = 6 if caller.uid == attrs["st_uid"] else 3 if caller.gid == attrs["st_gid"] else 0
        allowed = (mode >> shift) & 0o7
    if mask & ~allowed & 0o7:
        raise OSError(errno.EACCES, "permission denied")
