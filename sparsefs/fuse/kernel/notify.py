"""Invalidation of the kernel's caches: what the watcher and the core learn reaches the kernel here.

``invalidate_path`` is the binding's ``invalidate`` (sparsefs.vfs.binding): the
core calls it for every change made outside the mount (the watcher), a pack
whose size changed, and the parent directory of every name created, removed or
renamed outside. Attributes are dropped at once (``NOTIFY_INVAL_INODE`` with no
pages takes no lock a request could hold, so it is safe inside a request);
everything that takes a directory or page lock — page and listing
invalidation, ``NOTIFY_INVAL_ENTRY`` for a name that no longer leads to the
same inode or a negative entry for a name that now exists — goes through this
notifier's own thread, never a thread answering requests (it could deadlock on
the very lock the request holds).

When the mount stops being watched (inotify ran out while mounted), nothing
would invalidate the long-lived caches any more: everything the kernel holds
is dropped at once (``NOTIFY_INC_EPOCH`` for every entry, negative ones
included, and attributes and pages of every node), and from then on the
replies carry the short timeouts (sparsefs.fuse.kernel.cache).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import queue
import stat
import threading
import time
from typing import NamedTuple

from sparsefs.fuse import pagecache
from sparsefs.fuse.kernel import proto as k
from sparsefs.fuse.kernel.nodes import Node
from sparsefs.fuse.kernel.ops import KernelOps, same_object
from sparsefs.fuse.kernel.transport import FuseDevice
from sparsefs.source.freshness import Echoes

log = logging.getLogger("sparsefs.kernel")
_ALL = "all"


class _Changed(NamedTuple):
    node: Node
    path: str


class _NewName(NamedTuple):
    parent: int
    name: str
    path: str


class _Forget(NamedTuple):
    parent: int
    name: str


Notice = _Changed | _NewName | _Forget | str
_WAKE = "wake"  # a page drop may be due


class Notifier:
    """Sends invalidations for ``ops``' nodes; one thread for everything that may wait on a lock."""

    def __init__(self, ops: KernelOps, device: FuseDevice) -> None:
        self.ops = ops
        self.device = device
        self._queue: queue.SimpleQueue[Notice | None] = queue.SimpleQueue()
        self._due: list[tuple[float, int, Node, pagecache.Stamp]] = []  # (time.time(), tie, node, stamp), a heap
        self._due_lock = threading.Lock()
        self._ties = itertools.count()

    def probe_epoch(self) -> bool:
        """Can the kernel drop every entry at once? (Then negative entries may be long-lived.)"""
        self.ops.cache.epoch = self.device.notify(k.NOTIFY_INC_EPOCH, b"")
        return self.ops.cache.epoch

    def invalidate_path(self, path: str) -> None:
        """``path`` changed: its attributes now; its pages, its name or its absence from the notifier thread."""
        node = self.ops.nodes.find(path)
        if node is not None:
            if not node.generated and self._current(node, path):
                return  # the kernel holds what the file is now: the echo of a change made through the mount
            self.device.notify(k.NOTIFY_INVAL_INODE, k.INVAL_INODE.pack(node.nodeid, -1, 0))
            self._queue.put(_Changed(node, path))
            return
        entry = self.ops.nodes.entry(path)
        if entry is not None:
            self._queue.put(_NewName(*entry, path))  # the kernel may remember it as absent: it exists now, or again

    def forget_name_later(self, parent: int, name: str) -> None:
        """The kernel must forget ``name`` in ``parent`` (it leads to another file now); safe inside a request."""
        self._queue.put(_Forget(parent, name))

    def _current(self, node: Node, path: str) -> bool:
        """Does the kernel hold exactly what ``path`` is now: the node's own file, the attributes last handed
        out, and pages (if it may have any) started from this very version? A write through the mount
        leaves the kernel so (it drops its own attributes after each write, and the next stat fetched the
        new ones); a change from outside never does. A directory never is: its cached listing may be stale
        whatever its attributes say (the echo of a name made through the mount reports no directory)."""
        if node.kind == stat.S_IFDIR or time.monotonic() - node.written_at > Echoes.ECHO_S:
            return False  # only a file the mount wrote moments ago: anything else changed outside
        try:
            st = self.ops.core.root.lstat(path.lstrip("/"))
        except OSError:
            return False
        pages_current = not node.paged or node.pages.stamp == pagecache.stamp(st)
        return same_object(node, st) and self.ops.handed_out(node, st) and pages_current

    def untrusted(self) -> None:
        """The watcher stopped while the kernel holds long-lived caches: drop them all."""
        self._queue.put(_ALL)

    def stop(self) -> None:
        self._queue.put(None)

    def settle_later(self, node: Node, stamp: pagecache.Stamp) -> None:
        """Drop ``node``'s pages once ``stamp``'s writeback window has passed, if they are still from it
        (sparsefs.fuse.pagecache); safe inside a request (it only records the time)."""
        with self._due_lock:
            heapq.heappush(self._due, (pagecache.settle_at(node.pages), next(self._ties), node, stamp))
        self._queue.put(_WAKE)

    def _wait(self) -> Notice | None:
        """The next notice, or _WAKE when a page drop falls due."""
        with self._due_lock:
            due = self._due[0][0] if self._due else None
        try:
            return self._queue.get(timeout=None if due is None else max(0.0, due - time.time()))
        except queue.Empty:
            return _WAKE

    def _settle_due(self) -> None:
        """Drop the pages whose writeback window has passed (still from the stamp they were started from)."""
        while True:
            with self._due_lock:
                if not self._due or self._due[0][0] > time.time():
                    return
                _, _, node, stamp = heapq.heappop(self._due)
            with node.lock:
                current = node.pages.stamp == stamp and node.settling == stamp
                if current:
                    node.pages.since, node.settling = time.time(), None
            if current and self.ops.nodes.peek(node.nodeid) is node:
                self.device.notify(k.NOTIFY_INVAL_INODE, k.INVAL_INODE.pack(node.nodeid, 0, 0))

    def run(self) -> None:
        while (notice := self._wait()) is not None:
            try:
                self._settle_due()
                if notice == _WAKE:
                    continue
                if isinstance(notice, _Changed):
                    self._settle(notice.node, notice.path)
                elif isinstance(notice, _NewName):
                    self._new_name(notice.parent, notice.name, notice.path)
                elif isinstance(notice, _Forget):
                    self._forget_name(notice.parent, notice.name)
                else:
                    self._drop_everything()
            except Exception:  # the notifier outlives any one failure
                log.exception("invalidation failed: %r", notice)

    def _settle(self, node: Node, path: str) -> None:
        """Pages (or the cached listing) of a daemon-served node; the name ``path`` if it no longer leads
        to ``node``'s inode (one name of a hard-linked file may go while the others stay)."""
        if node.generated:  # direct_io: no pages (but pages with --no-open), and the name stays valid
            if self.ops.no_open:
                self.device.notify(k.NOTIFY_INVAL_INODE, k.INVAL_INODE.pack(node.nodeid, 0, 0))
            return
        # pages: a daemon-served or page-cache-opened file has some (sparsefs.fuse.kernel.files); for a
        # file only ever read by passthrough the mapping is empty and this costs nothing
        self.device.notify(k.NOTIFY_INVAL_INODE, k.INVAL_INODE.pack(node.nodeid, 0, 0))
        entry = self.ops.nodes.entry(path)
        if path == "/" or entry is None or self._still_names(path, node.ino):
            return
        parent, name = entry
        self._forget_name(parent, name)
        if self.ops.nodes.detach(parent, name, only=node) is not None:
            self.ops.source_gone(node)

    def _new_name(self, parent: int, name: str, path: str) -> None:
        """A name the kernel knows nothing of changed: forget it as absent; if it is a new link to an inode
        the kernel knows under another name, refresh that inode (inotify reports only the new name).

        A name that does not exist now needs nothing: the kernel holds no node for it, so at most a
        negative entry, which is right (a create after this lstat brings its own event). That is the
        echo of every unlink through the mount (rm -rf), where the entry's invalidation would wait
        for the very directory lock the next unlink takes."""
        try:
            st = self.ops.core.root.lstat(path.lstrip("/"))
        except FileNotFoundError:
            return
        except OSError:
            st = None
        if self.ops.cache.forget_absent(parent, name):  # only a name handed out as absent needs it
            self._forget_name(parent, name)
        if st is None:
            return
        node = self.ops.nodes.by_inode(st.st_dev, st.st_ino, st.st_mode) if st.st_nlink > 1 else None
        if node is not None:
            self.device.notify(k.NOTIFY_INVAL_INODE, k.INVAL_INODE.pack(node.nodeid, -1, 0))

    def _forget_name(self, parent: int, name: str) -> None:
        raw = os.fsencode(name)
        self.device.notify(k.NOTIFY_INVAL_ENTRY, k.INVAL_ENTRY.pack(parent, len(raw), 0) + raw + b"\0")

    def _still_names(self, path: str, ino: int) -> bool:
        try:
            return self.ops.core.root.lstat(path.lstrip("/")).st_ino == ino
        except OSError:
            return False

    def _drop_everything(self) -> None:
        epoch = self.device.notify(k.NOTIFY_INC_EPOCH, b"")
        if epoch:
            self.ops.cache.forget_all_absent()
        for node in self.ops.nodes.all_nodes():
            offset = -1 if node.generated else 0
            self.device.notify(k.NOTIFY_INVAL_INODE, k.INVAL_INODE.pack(node.nodeid, offset, 0))
            if not epoch and node.parent:
                for parent, name in ((node.parent, node.name), *node.aliases):
                    self._forget_name(parent, name)
        log.warning("source no longer watched: the kernel's cached entries and attributes were dropped")

    def thread(self) -> threading.Thread:
        return threading.Thread(target=self.run, name="sparsefs-notify", daemon=True)
