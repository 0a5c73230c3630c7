"""Directory listings for the kernel backend: READDIR, READDIRPLUS (and the kernel's cache of them).

OPENDIR is never answered (its ENOSYS reply makes the kernel open directories
itself: no OPENDIR or RELEASEDIR round trips) and the kernel then keeps every
listing in the directory's page cache (``FOPEN_CACHE_DIR | FOPEN_KEEP_CACHE``,
its default without OPENDIR). A cached listing is dropped when the directory
changes through the mount (the kernel bumps its version), when its mtime
differs at the next ``opendir`` (attributes refreshed after an invalidation),
or when the daemon invalidates its pages (``sparsefs.fuse.kernel.notify``: the
watcher, for any name created, removed or renamed in it outside the mount).

A listing is taken from the core when the kernel asks for offset 0 and served
from that snapshot for later offsets. Without directory handles the snapshot
is found again through the offset itself: its high 32 bits are the listing's
generation, its low ones the position, so two readers of one directory (or a
rewinddir) never mix snapshots. READDIRPLUS hands the kernel an entry (and a
lookup) for every name except '.' and '..'.
"""

from __future__ import annotations

import errno
import itertools
import os
import threading
from collections import OrderedDict
from collections.abc import Callable

from sparsefs.fuse.kernel import proto as k
from sparsefs.fuse.kernel.nodes import NodeTable
from sparsefs.vfs.core import Core

Entry = tuple[str, int, int]  # name, file-type bits, inode
_POSITION = 0xFFFFFFFF
MAX_SNAPSHOTS = 256  # listings being read; one is dropped once read to its end


class DirectoryOps:
    """Directory handles and their listings; thread-safe."""

    def __init__(self, core: Core, nodes: NodeTable, entry: Callable[[int, str, dict[str, int]], bytes],
                 real_entry: Callable[[int, str, os.stat_result], bytes]) -> None:
        self.core = core
        self.nodes = nodes
        self._entry = entry
        self._real_entry = real_entry
        self._snapshots: OrderedDict[tuple[int, int], list[Entry]] = OrderedDict()
        self._generations = itertools.count(1)
        self._lock = threading.Lock()

    def _path(self, nodeid: int) -> str:
        path = self.nodes.path(nodeid)
        if path is None:
            raise OSError(errno.ENOENT, "no longer in the tree")
        return path

    def releasedir(self, request: k.Request) -> bytes:
        return b""  # never sent without OPENDIR; answered for a kernel that does

    def fsyncdir(self, request: k.Request) -> bytes:
        return b""

    def _listing(self, request: k.Request) -> tuple[list[Entry], int, int, int]:
        """(snapshot, its generation, first index to send, reply size) for a READDIR(PLUS)."""
        _, offset, size, _ = k.READ_IN.unpack_from(request.body)
        generation, index = offset >> 32, offset & _POSITION
        with self._lock:
            entries = self._snapshots.get((request.nodeid, generation)) if offset else None
        if entries is None:  # offset 0 (a new pass, rewinddir), or a snapshot dropped meanwhile
            entries = self.core.readdir(self._path(request.nodeid))
            generation = generation or next(self._generations)
            with self._lock:
                self._snapshots[(request.nodeid, generation)] = entries
                while len(self._snapshots) > MAX_SNAPSHOTS:
                    self._snapshots.popitem(last=False)
        return entries, generation, index, size

    def _done(self, nodeid: int, generation: int, entries: list[Entry], sent_to: int) -> None:
        """The kernel has the listing up to ``sent_to``: at its end, the snapshot is no longer needed."""
        if sent_to >= len(entries):
            with self._lock:
                self._snapshots.pop((nodeid, generation), None)

    def readdir(self, request: k.Request) -> bytes:
        entries, generation, start, size = self._listing(request)
        out: list[bytes] = []
        used = 0
        index = start
        for index in range(start, len(entries)):
            name, mode, ino = entries[index]
            record = k.pack_dirent(ino, generation << 32 | (index + 1), os.fsencode(name), mode)
            if used + len(record) > size:
                break
            out.append(record)
            used += len(record)
        else:
            index = len(entries)
        self._done(request.nodeid, generation, entries, index)
        return b"".join(out)

    def readdirplus(self, request: k.Request) -> bytes:
        entries, generation, start, size = self._listing(request)
        base = self._path(request.nodeid)
        batch: list[tuple[int, bytes]] = []
        used = 0
        index = start
        for index in range(start, len(entries)):
            name, mode, ino = entries[index]
            dirent = k.pack_dirent(ino, generation << 32 | (index + 1), os.fsencode(name), mode)
            used += k.ENTRY_HEAD.size + k.ATTR.size + len(dirent)
            if used > size:
                break
            batch.append((index, dirent))
        else:
            index = len(entries)
        self._done(request.nodeid, generation, entries, index)
        stats = self._stats(request.nodeid, base, [entries[i][0] for i, _ in batch])
        return b"".join(self._plus_entry(request.nodeid, base, entries[i], stats) + dirent for i, dirent in batch)

    def _stats(self, nodeid: int, base: str, names: list[str]) -> dict[str, os.stat_result]:
        """lstat of the real entries of a source directory, through one directory fd."""
        node = self.nodes.peek(nodeid)
        if node is None or node.generated:
            return {}
        return self.core.root.stat_entries(base[1:], [name for name in names if name not in (".", "..")])

    def _plus_entry(self, parent: int, base: str, entry: tuple[str, int, int],
                    stats: dict[str, os.stat_result]) -> bytes:
        """The entry part of one READDIRPLUS record; node id 0 (no lookup counted) for dots and vanished names."""
        name, mode, ino = entry
        if name in stats:
            return self._real_entry(parent, name, stats[name])
        if name not in (".", ".."):
            try:
                return self._entry(parent, name, self.core.getattr(base + name if base == "/" else f"{base}/{name}"))
            except OSError:
                pass
        return k.ENTRY_HEAD.pack(0, 0, 0, 0, 0, 0) + k.pack_attr({"st_ino": ino, "st_mode": mode})
