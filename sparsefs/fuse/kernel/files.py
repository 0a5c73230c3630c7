"""Open files of the kernel backend: passthrough backing ids, page-cache opens, keeper fds, handles.

**With passthrough** (root, Linux >= 6.9) an ordinary file is served by the
kernel from the source file. Its node gets one backing id, registered from an
fd of the source file (the *keeper*) at its first open; the daemon keeps both
for as long as the kernel keeps the node. The backing id already holds the
source file open in the kernel, so the keeper costs only an fd slot, and it
gives ``fstat``, ``ftruncate`` and ``fsync`` of an open file the very inode
the caller opened, even after the name was unlinked, renamed or replaced
outside the mount. Idle files stay kept (``sparsefs.fuse.kernel.keeping``).

**Without passthrough** (no CAP_SYS_ADMIN, a kernel before 6.9,
``--no-passthrough``, or the kernel refused a backing file) every read-only
open of a real file is a *page-cache open*: answered with no fd at all (the
first open of a node keeps its fd as the keeper), its READs served from the
keeper into the kernel's page cache, and ``FOPEN_KEEP_CACHE`` while the pages
are known current, so a file read again costs no READ. Opens for writing get
their own fd and write through the daemon and the page cache.

The first open, and every open for writing, opens the source file with the
caller's flags, so a refusal (EROFS, ETXTBSY, EACCES, a name that is no longer
a regular file) reaches the caller as itself; a name that leads to another
file than the node's now answers ESTALE (the kernel walks it again). A
read-only reopen of a kept file makes no system call until a READ.

**Small files read while watched come from the page cache under passthrough
too** (issue 19): every passthrough read makes the kernel forget the file's
cached atime, so after a ``grep -r`` each ``stat`` cost a GETATTR. A read-only
open of a regular file of at most ``PAGE_CACHED_MAX`` bytes, while watched, is
a page-cache open. The kernel forbids a passthrough open beside
such an open, so while any is open every other open of the node is one too (a
write then goes through the daemon); after a passthrough write the next
page-cache open drops the pages.

**Whether an open keeps the pages** is decided at every page-cache open
(``sparsefs.fuse.pagecache``): the file's (inode, size, mtime, ctime) must be
the stamp the pages were started from, and the pages must have been started
past the writeback window after the last ctime, since stores through an
outside shared mapping raise no inotify event. A stamp that moved also drops
the kernel's cached attributes.

**Set-user-ID files** (``sparsefs.fuse.kernel.privs``): a passthrough write
never reaches the daemon, which must clear the bits, so a write open of a file
with suid (or sgid and group-exec) is served by the daemon with direct I/O
(the kernel allows that beside passthrough opens).

Generated files (packs, control files) are core handles answered with READ
replies and direct I/O. A node never mixes passthrough with page-cache opens.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from sparsefs.fuse import pagecache
from sparsefs.fuse.kernel import proto as k
from sparsefs.fuse.kernel.keeping import IdleFiles, close_fd
from sparsefs.fuse.kernel.nodes import Node, NodeTable
from sparsefs.fuse.kernel.privs import kill_suidgid, privileged
from sparsefs.fuse.kernel.transport import read_buffer
from sparsefs.source.freshness import check_kernel_open
from sparsefs.vfs.core import Core, OpenResult

log = logging.getLogger("sparsefs.kernel")

_PASSTHROUGH_FH_BASE = 1 << 50  # above the core's fds and generated handles
_GENERATED_BASE = 1 << 40  # the core's generated handles start here (sparsefs.vfs.core); below: source fds
_WRITE_MODES = os.O_WRONLY | os.O_RDWR
PAGE_CACHED_MAX = 256 * 1024  # read-only opens of files up to this size use the page cache while watched
T = TypeVar("T")


class Device(Protocol):
    """The backing-file ioctls of /dev/fuse, and notifications (those that take no lock a request holds)."""

    def backing_open(self, fd: int) -> int: ...

    def backing_close(self, backing_id: int) -> None: ...

    def notify(self, code: int, payload: bytes) -> bool: ...


@dataclass
class Handle:
    """An open file as the kernel knows it."""

    node: Node
    core_fh: int | None  # the core's fd or generated handle; None for a passthrough or page-cache open
    writable: bool
    cached: bool = False  # a real file in the kernel's page-cache mode (counted in node.cached_opens)


class FileOps:
    """OPEN, CREATE's open, READ, WRITE, FSYNC, RELEASE; thread-safe."""

    def __init__(self, core: Core, nodes: NodeTable, device: Device) -> None:
        self.core = core
        self.nodes = nodes
        self.device = device
        self.passthrough = False  # set from the INIT negotiation; cleared if the kernel refuses backing files
        self.killpriv = False  # FUSE_HANDLE_KILLPRIV_V2 granted: the daemon clears suid/sgid when asked
        self._handles: dict[int, Handle] = {}
        self._ids = itertools.count(_PASSTHROUGH_FH_BASE)
        self._lock = threading.Lock()
        self.idle = IdleFiles(device)  # files kept while nobody has them open
        # the notifier's (sparsefs.fuse.kernel.notify): drop a node's pages once its writeback window has passed
        self.settle_later: Callable[[Node, pagecache.Stamp], None] = lambda node, stamp: None

    # ---- opening -----------------------------------------------------------
    def _by_passthrough(self, node: Node) -> bool:
        return not node.generated and (node.backing_id is not None or (self.passthrough and node.passthrough))

    def open(self, node: Node, flags: int, size: int | None = None, kill_privs: bool = False) -> bytes:
        """``size``: the file's size as last handed out, if known (small files may use the page cache);
        ``kill_privs``: the kernel asks to clear suid/sgid after an O_TRUNC open (FUSE_OPEN_KILL_SUIDGID)."""
        # on-access mode only (sparsefs.source.freshness): may let go of a replaced file
        check_kernel_open(self.core.freshness, self, node)
        card = self._guard_card(node, flags)
        if card is not None:
            return self._core_open(node, card, flags)
        if node.generated:
            return self._core_open(node, self.core.open(_need(self.nodes.path(node.nodeid)), flags), flags)
        if not self._by_passthrough(node):
            return self._daemon_open(node, flags, kill_privs)
        writing = bool(flags & _WRITE_MODES)
        with node.lock:
            kept = node.backing_id is not None
            path = None if kept and not writing else self.nodes.path(node.nodeid)
            if not kept or (writing and (path is not None or node.cached_opens)):
                result = self._open_source(node, path, flags)  # the caller's own errors surface here
                if kill_privs:
                    kill_suidgid(result.fh)
                if node.cached_opens and not result.direct_io:  # the kernel refuses passthrough beside them
                    return self._cached_core_open(node, result, flags)
                if writing and self.killpriv and not result.direct_io and privileged(os.fstat(result.fh).st_mode):
                    return self._core_open(node, result, flags, direct_io=True)  # writes must reach the daemon
                if result.direct_io or not self._adopt(node, result.fh, flags):
                    return self._core_open(node, result, flags)
            from_pages = not writing and self._from_pages(node, size)
            reply = self._page_cached_open(node) if from_pages else self._passthrough_open(node, flags)
        self._busy(node)
        return reply

    def reopen(self, node: Node, flags: int, size: int | None) -> bytes | None:
        """A read-only reopen of a kept file: the reply, with no system call beyond the revalidation's fstat;
        None when the general path (``open``) must answer (sparsefs.fuse.kernel.fastpath)."""
        if flags & _WRITE_MODES or node.generated or self.core.guard is not None or self.core.freshness.on_access:
            return None
        with node.lock:
            if self._by_passthrough(node):
                if node.backing_id is None:
                    return None
                from_pages = self._from_pages(node, size)
                reply = self._page_cached_open(node) if from_pages else self._passthrough_open(node, flags)
            elif node.verified or node.keeper_fd >= 0:
                reply = self._page_cached_open(node)
            else:
                return None
        self.idle.busy(node)
        return reply

    def _daemon_open(self, node: Node, flags: int, kill_privs: bool = False) -> bytes:
        """An open served by the daemon into the kernel's page cache (no passthrough here, or refused).

        The first open of a node, and every open for writing, opens the source file with the caller's
        flags (its refusals reach the caller); a read-only reopen makes no system call until a READ."""
        writing = bool(flags & _WRITE_MODES)
        with node.lock:
            if writing or not (node.verified or node.keeper_fd >= 0):
                result = self._open_source(node, self.nodes.path(node.nodeid), flags)
                if kill_privs:
                    kill_suidgid(result.fh)
                if result.direct_io:  # a virtual name after all
                    return self._core_open(node, result, flags)
                if writing:
                    return self._cached_core_open(node, result, flags)
                self._keep_fd(node, result.fh, flags)
            reply = self._page_cached_open(node)
        self._busy(node)
        return reply

    def _open_source(self, node: Node, path: str | None, flags: int) -> OpenResult:
        """The source file at ``path`` opened with the caller's flags; ESTALE if the name leads to another
        file than the node's now (replaced outside, not yet heard of): the kernel walks the name again."""
        result = self.core.open(_need(path), flags)
        if not result.direct_io and os.fstat(result.fh).st_ino != node.ino:
            os.close(result.fh)
            raise OSError(errno.ESTALE, "the name leads to another file now")
        return result

    def _keep_fd(self, node: Node, fd: int, flags: int) -> None:
        """Under node.lock: the fd of a node's first open becomes its keeper (or is closed if it has one)."""
        node.verified = True
        if node.keeper_fd < 0:
            node.keeper_fd, node.keeper_reads = fd, flags & os.O_ACCMODE != os.O_WRONLY
        else:
            os.close(fd)

    def _from_pages(self, node: Node, size: int | None) -> bool:
        """Serve this read-only open from the page cache? Always beside another such open (the kernel
        refuses to mix); else for a small file while watched and not open by passthrough."""
        small = size is not None and size <= PAGE_CACHED_MAX
        fresh = self.core.freshness  # a path is walked only where blind mounts make it matter: opens are hot
        return bool(node.cached_opens) or (small and node.open_count == 0
                                           and fresh.watched(self.nodes.path(node.nodeid) if fresh.blind else None))

    def _guard_card(self, node: Node, flags: int) -> OpenResult | None:
        """A guard card (sparsefs.guard.policy), served with direct_io; only while no passthrough open holds
        the node: the kernel refuses a non-passthrough open beside one (the reader then gets the bytes).
        Checked again under the node's lock once the card is built; a passthrough open that lands
        between that check and this reply is the one race left (the reader then gets EIO)."""
        if self.core.guard is None or node.generated or flags & _WRITE_MODES or node.open_count > 0:
            return None
        path = self.nodes.path(node.nodeid)
        return None if path is None else self.core.guard_open(path, flags, lambda: self._unopened(node))

    @staticmethod
    def _unopened(node: Node) -> bool:
        with node.lock:
            return node.open_count == 0

    def open_created(self, node: Node, result: OpenResult, flags: int) -> bytes:
        """The open half of CREATE, for the fd the core created the file with."""
        node.written_at = time.monotonic()
        if not self._by_passthrough(node):
            with node.lock:
                return self._cached_core_open(node, result, flags)
        with node.lock:
            if not self._adopt(node, result.fh, flags):
                return self._core_open(node, result, flags)
            reply = self._passthrough_open(node, flags)
        self._busy(node)
        return reply

    def _adopt(self, node: Node, fd: int, flags: int) -> bool:
        """Use ``fd`` (opened with ``flags``) for ``node`` (backing file, keeper) or close it; False if
        passthrough was refused."""
        if node.backing_id is None:
            try:
                node.backing_id = self.device.backing_open(fd)
            except OSError as err:
                self._refused(node, err)
                return False
        self._keep_fd(node, fd, flags)
        return True

    def _refused(self, node: Node, err: OSError) -> None:
        # EPERM (no CAP_SYS_ADMIN), ELOOP (a stacked source such as overlayfs) and the like hold for
        # every file: stop asking. Files that already have a backing id keep it.
        log.warning("kernel passthrough refused for %s (%s); plain reads now go through the daemon", node.name, err)
        node.passthrough = False
        self.passthrough = False
        self.core.stats.passthrough = False

    def _passthrough_open(self, node: Node, flags: int) -> bytes:
        assert node.backing_id is not None
        node.open_count += 1
        if flags & _WRITE_MODES:
            node.pages_stale = True  # written beside the page cache: the next page-cache open drops it
        fh = self._add(Handle(node, None, bool(flags & _WRITE_MODES)), next(self._ids))
        return k.OPEN_OUT.pack(fh, k.FOPEN_PASSTHROUGH, node.backing_id)

    def _page_cached_open(self, node: Node) -> bytes:
        """A read-only open answered from the page cache; under node.lock. No fd is needed until a READ
        (a page the kernel lacks): a file past the fd budget reopens without opening anything."""
        keep = self._keep_pages(node)
        node.open_count += 1
        node.cached_opens += 1
        fh = self._add(Handle(node, None, False, cached=True), next(self._ids))
        return k.OPEN_OUT.pack(fh, k.FOPEN_KEEP_CACHE if keep else 0, 0)

    def _cached_core_open(self, node: Node, result: OpenResult, flags: int) -> bytes:
        """A write open through the daemon and the page cache (beside page-cache opens, or without passthrough);
        under node.lock."""
        keep = self._keep_pages(node)
        node.cached_opens += 1
        if node.keeper_fd < 0:  # fstat, fchmod, fsync of the open file reach its inode after an unlink too
            node.keeper_fd, node.keeper_reads = os.dup(result.fh), flags & os.O_ACCMODE != os.O_WRONLY
        fh = self._add(Handle(node, result.fh, bool(flags & _WRITE_MODES), cached=True), result.fh)
        return k.OPEN_OUT.pack(fh, k.FOPEN_KEEP_CACHE if keep else 0, 0)

    def _keep_pages(self, node: Node) -> bool:
        """May this open keep the kernel's pages of ``node`` (sparsefs.fuse.pagecache)? Under node.lock.

        The stamp comes from the keeper (the very inode the node is), else from the path: a name that
        now leads to another inode is the new file's, and the kernel looks it up again (ESTALE)."""
        if node.keeper_fd >= 0:
            now = pagecache.stamp(os.fstat(node.keeper_fd))
        else:
            now = pagecache.stamp(self.core.root.lstat(_need(self.nodes.path(node.nodeid))[1:]))
            if now[0] != node.ino:
                raise OSError(errno.ESTALE, "the name leads to another file now")
        changed = node.pages.stamp is not None and node.pages.stamp != now
        keep = pagecache.may_keep(node.pages, now, settles=True) and not node.pages_stale
        if not pagecache.settled(node.pages) and node.settling != now:
            node.settling = now
            self.settle_later(node, now)  # dropped once more when the writeback window has passed
        node.paged = True
        node.pages_stale = False
        if changed:  # changed unseen (a mapped store): the kernel's size and times are stale too
            self.device.notify(k.NOTIFY_INVAL_INODE, k.INVAL_INODE.pack(node.nodeid, -1, 0))
        return keep

    def _core_open(self, node: Node, result: OpenResult, flags: int, direct_io: bool = False) -> bytes:
        fh = self._add(Handle(node, result.fh, bool(flags & _WRITE_MODES)), result.fh)
        direct = direct_io or result.direct_io
        node.paged |= not direct  # pages with no stamp: every outside change drops them
        return k.OPEN_OUT.pack(fh, k.FOPEN_DIRECT_IO if direct else k.FOPEN_KEEP_CACHE, 0)

    def _add(self, handle: Handle, fh: int) -> int:
        with self._lock:
            self._handles[fh] = handle
        return fh

    # ---- I/O through the daemon ----------------------------------------------
    def handle(self, fh: int) -> Handle:
        handle = self._handles.get(fh)
        if handle is None:
            raise OSError(errno.EBADF, "unknown handle")
        return handle

    def core_fh(self, fh: int | None) -> int | None:
        """The core's handle behind a kernel handle, if it is one (None for passthrough or no handle)."""
        handle = self._handles.get(fh) if fh is not None else None
        return None if handle is None else handle.core_fh

    def read(self, fh: int, offset: int, size: int) -> bytes | memoryview:
        handle = self.handle(fh)
        if handle.cached and handle.core_fh is None:
            return self._read_pages(handle.node, offset, size)
        return self.core.read(None, size, offset, self._daemon_served(fh))

    def _read_pages(self, node: Node, offset: int, size: int) -> memoryview:
        """Fill the page cache of a page-cache open from a readable keeper fd (see ``hold_for_reading``).

        Read into this thread's buffer and sent from it (the reply goes out before the thread reads its
        next request): a READ of a megabyte then costs no allocation and no copy in Python."""
        view = read_buffer(size)
        with node.lock:
            self._readable_keeper(node)
            count = os.preadv(node.keeper_fd, [view], offset)
        self.core.stats.add("plain_bytes_read", count)
        return view[:count]

    def read_unopened(self, node: Node, offset: int, size: int) -> memoryview:
        """--no-open: the kernel opened the file itself; fill its page cache from the node's keeper."""
        return self._read_pages(node, offset, size)

    def hold_for_reading(self, node: Node) -> None:
        """``node`` is about to lose its name (unlink, rename over): if page-cache opens may still read
        it, hold a readable fd now, while the name still leads to it."""
        with node.lock:
            if node.cached_opens:
                self._readable_keeper(node)

    def _readable_keeper(self, node: Node) -> None:
        """Under node.lock: the keeper is let go past the fd budget, and the first open's fd (which it
        is) may be write-only; reopen it readable by path."""
        if node.keeper_fd >= 0 and node.keeper_reads:
            return
        fd = self.core.root.open_regular(_need(self.nodes.path(node.nodeid))[1:], os.O_RDONLY)
        if os.fstat(fd).st_ino != node.ino:  # the name leads to another file now: not this node's bytes
            os.close(fd)
            raise OSError(errno.ESTALE, "the name leads to another file now")
        close_fd(node.keeper_fd)
        node.keeper_fd, node.keeper_reads = fd, True

    def write(self, fh: int, offset: int, data: bytes, kill_privs: bool = False) -> int:
        """``kill_privs``: the writer lacks CAP_FSETID (FUSE_WRITE_KILL_SUIDGID): clear suid/sgid, as a
        local write would (the daemon's own write, as root, would not)."""
        path = self.nodes.path(self.handle(fh).node.nodeid)
        core_fh = self._daemon_served(fh)
        written = self.core.write(path, data, offset, core_fh)
        if kill_privs and core_fh < _GENERATED_BASE:
            kill_suidgid(core_fh)
        return written

    def _daemon_served(self, fh: int) -> int:
        core_fh = self.handle(fh).core_fh
        if core_fh is None:
            raise OSError(errno.EIO, "passthrough handles are served by the kernel")
        return core_fh

    def fsync(self, fh: int, datasync: bool) -> None:
        handle = self.handle(fh)
        if handle.core_fh is not None:
            self.core.fsync(None, datasync, handle.core_fh)
            return
        if not self.on_open_file(handle.node, os.fdatasync if datasync else os.fsync):
            raise OSError(errno.EBADF, "file is no longer open")

    def with_keeper(self, node: Node, action: Callable[[int], T]) -> T | None:
        """``action(fd)`` on the open file's own fd, or None if the node has none (not open)."""
        with node.lock:
            return action(node.keeper_fd) if node.keeper_fd >= 0 else None

    def on_open_file(self, node: Node, action: Callable[[int], object]) -> bool:
        """Run ``action(fd)`` on the open file's own fd; False if the node is not open.

        A file kept by backing id alone (no keeper fd) is reached by its path while it has one."""
        with node.lock:
            if node.keeper_fd >= 0:
                action(node.keeper_fd)
                return True
            path = self.nodes.path(node.nodeid) if node.backing_id is not None else None
            if path is None:
                return False
            fd = self.core.root.open_file(path[1:], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            try:
                action(fd)
            finally:
                os.close(fd)
            return True

    # ---- closing -------------------------------------------------------------
    def release(self, fh: int) -> None:
        with self._lock:
            handle = self._handles.pop(fh, None)
        if handle is None:
            return
        if handle.writable:
            self._written(handle)
        if handle.core_fh is not None:
            self.core.release(self.nodes.path(handle.node.nodeid), handle.core_fh)
            if handle.cached:
                with handle.node.lock:
                    handle.node.cached_opens -= 1
            return
        path = self.nodes.path(handle.node.nodeid) if handle.writable else None
        if path is not None:
            self.core.source_written(path)  # passthrough writes never passed through us
        self._closed_once(handle, detached=handle.node.parent == 0)

    def _written(self, handle: Handle) -> None:
        """A write handle closes: the kernel saw every write it made (passthrough writes leave no pages,
        writes through the daemon updated the pages they wrote), so cached pages now match the file as it
        is; the watcher's echo of these writes then drops nothing (sparsefs.fuse.kernel.notify)."""
        node = handle.node
        with node.lock:
            node.written_at = time.monotonic()
            fd = handle.core_fh if handle.core_fh is not None and handle.core_fh < _GENERATED_BASE else node.keeper_fd
            if node.paged and node.pages.stamp is not None and fd >= 0:
                node.pages.stamp = pagecache.stamp(os.fstat(fd))

    def _closed_once(self, handle: Handle, detached: bool) -> None:
        node = handle.node
        with node.lock:
            node.open_count -= 1
            node.cached_opens -= handle.cached
            if node.open_count > 0:
                return
        if detached:
            self._let_go(node)
        else:
            self.idle.keep(node)

    def gone_from_tree(self, node: Node) -> None:
        """The file was unlinked or replaced: if nobody has it open, let its space go now, not at FORGET."""
        self._let_go(node)

    def forgotten(self, node: Node) -> None:
        """The kernel forgot the node: nothing can be open on it any more."""
        self._let_go(node)

    def open_handles(self) -> int:
        with self._lock:
            return len(self._handles)

    def kept_idle(self) -> int:
        return self.idle.count()

    @property
    def idle_limit(self) -> int:
        return self.idle.limit

    @idle_limit.setter
    def idle_limit(self, limit: int) -> None:
        self.idle.limit = limit

    def _busy(self, node: Node) -> None:
        self.idle.busy(node)

    def _let_go(self, node: Node) -> None:
        self.idle.let_go(node)


def _need(path: str | None) -> str:
    """ESTALE, not ENOENT, for a node that left the tree (replaced by a rename, say): the kernel then
    walks the path again (LOOKUP_REVAL) and opens what the name holds now, as a native open would."""
    if path is None:
        raise OSError(errno.ESTALE, "no longer in the tree")
    return path
