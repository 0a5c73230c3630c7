"""Directory listings for the kernel backend: OPENDIR, READDIR, READDIRPLUS, RELEASEDIR.

A listing is taken from the core when the kernel asks for offset 0 (a new
pass, rewinddir included) and served from that snapshot for later offsets, so
offsets stay stable while a directory changes. READDIRPLUS hands the kernel
an entry (and a lookup) for every name except '.' and '..'.
"""

from __future__ import annotations

import errno
import itertools
import os
import threading
from collections.abc import Callable

from sparsefs.fuse.kernel import proto as k
from sparsefs.fuse.kernel.nodes import NodeTable
from sparsefs.vfs.core import Core

_DIR_FH_BASE = 1 << 51


class DirectoryOps:
    """Directory handles and their listings; thread-safe."""

    def __init__(self, core: Core, nodes: NodeTable, entry: Callable[[int, str, dict[str, int]], bytes],
                 real_entry: Callable[[int, str, os.stat_result], bytes]) -> None:
        self.core = core
        self.nodes = nodes
        self._entry = entry
        self._real_entry = real_entry
        self._dirs: dict[int, list[tuple[str, int, int]]] = {}
        self._ids = itertools.count(_DIR_FH_BASE)
        self._lock = threading.Lock()

    def _path(self, nodeid: int) -> str:
        path = self.nodes.path(nodeid)
        if path is None:
            raise OSError(errno.ENOENT, "no longer in the tree")
        return path

    def opendir(self, request: k.Request) -> bytes:
        self._path(request.nodeid)
        fh = next(self._ids)
        with self._lock:
            self._dirs[fh] = []
        return k.OPEN_OUT.pack(fh, 0, 0)

    def releasedir(self, request: k.Request) -> bytes:
        fh, _, _ = k.RELEASE_IN.unpack_from(request.body)
        with self._lock:
            self._dirs.pop(fh, None)
        return b""

    def fsyncdir(self, request: k.Request) -> bytes:
        return b""

    def _listing(self, request: k.Request) -> tuple[list[tuple[str, int, int]], int, int]:
        fh, offset, size, _ = k.READ_IN.unpack_from(request.body)
        if fh not in self._dirs:
            raise OSError(errno.EBADF, "unknown directory handle")
        if offset == 0:  # a fresh listing for every pass (rewinddir included)
            self._dirs[fh] = self.core.readdir(self._path(request.nodeid))
        return self._dirs[fh], offset, size

    def readdir(self, request: k.Request) -> bytes:
        entries, offset, size = self._listing(request)
        out: list[bytes] = []
        used = 0
        for index in range(offset, len(entries)):
            name, mode, ino = entries[index]
            record = k.pack_dirent(ino, index + 1, os.fsencode(name), mode)
            if used + len(record) > size:
                break
            out.append(record)
            used += len(record)
        return b"".join(out)

    def readdirplus(self, request: k.Request) -> bytes:
        entries, offset, size = self._listing(request)
        base = self._path(request.nodeid)
        batch: list[tuple[int, bytes]] = []
        used = 0
        for index in range(offset, len(entries)):
            name, mode, ino = entries[index]
            dirent = k.pack_dirent(ino, index + 1, os.fsencode(name), mode)
            used += k.ENTRY_HEAD.size + k.ATTR.size + len(dirent)
            if used > size:
                break
            batch.append((index, dirent))
        stats = self._stats(request.nodeid, base, [entries[index][0] for index, _ in batch])
        return b"".join(self._plus_entry(request.nodeid, base, entries[index], stats) + dirent
                        for index, dirent in batch)

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
