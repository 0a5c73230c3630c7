"""Virtual files: generated content frozen per (virtual path, artifact version).

A virtual file is computed once at lookup; ``stat`` reports its exact size and
every later read of the same path re-delivers the same bytes without a new
admission, until the artifact changes.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import xxhash

from sparsefs.artifacts.memory import process_cap

_VIRTUAL_INO_BIT = 1 << 62


def virtual_ino(rel: str) -> int:
    """A stable inode number outside the range real files use."""
    return _VIRTUAL_INO_BIT | (xxhash.xxh64_intdigest(rel.encode("utf-8", "surrogateescape")) >> 2)


def is_virtual_ino(ino: int) -> bool:
    """True for the inode numbers of generated files (packs, the control tree)."""
    return bool(ino & _VIRTUAL_INO_BIT)


def _attrs(rel: str, st: os.stat_result, size: int) -> dict[str, int]:
    return {
        "st_mode": stat.S_IFREG | (st.st_mode & 0o444), "st_ino": virtual_ino(rel), "st_nlink": 1, "st_size": size,
        "st_uid": st.st_uid, "st_gid": st.st_gid, "st_atime": st.st_atime_ns, "st_mtime": st.st_mtime_ns,
        "st_ctime": st.st_ctime_ns, "st_blksize": 4096, "st_blocks": (size + 511) // 512,
    }


@dataclass(frozen=True)
class VirtualFile:
    """One virtual path's frozen content (or, for @raw, the base file to proxy)."""

    rel: str
    base_rel: str
    version: str
    attrs: dict[str, int] = field(hash=False)
    content: bytes = b""
    raw_rel: str | None = None
    log_entry: dict[str, Any] | None = field(default=None, hash=False, compare=False)
    # charges the pack when it is first read (sparsefs.protocol.access.Protocol.deliver); False: build it again
    deliver: Callable[[], bool] | None = field(default=None, hash=False, compare=False)
    saved: bool = False  # kept for remounts once delivered (state.sqlite's packs)

    @classmethod
    def generated(
        cls, rel: str, base_rel: str, version: str, st: os.stat_result, content: bytes,
        log_entry: dict[str, Any] | None = None, deliver: Callable[[], bool] | None = None, saved: bool = False,
    ) -> VirtualFile:
        return cls(rel, base_rel, version, _attrs(rel, st, len(content)), content, log_entry=log_entry,
                   deliver=deliver, saved=saved)

    @classmethod
    def raw(cls, rel: str, base_rel: str, st: os.stat_result) -> VirtualFile:
        if not stat.S_ISREG(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "@raw needs a regular file")
        return cls(rel, base_rel, "", _attrs(rel, st, st.st_size), raw_rel=base_rel)


class VirtualMemo:
    """Bounded LRU of virtual files, indexed by path and by base artifact."""

    def __init__(self, max_bytes: int | None = None) -> None:
        self._files: OrderedDict[str, VirtualFile] = OrderedDict()
        self._by_base: dict[str, set[str]] = {}
        self._bytes = 0
        self._max = max_bytes or process_cap().packs_bytes  # the memory cap's share for packs
        self._lock = threading.Lock()

    def get(self, rel: str, version: str) -> VirtualFile | None:
        """The frozen file at ``rel`` if it was built from this artifact version."""
        with self._lock:
            found = self._files.get(rel)
            if found is None or found.version != version:
                return None
            self._files.move_to_end(rel)
            return found

    def put(self, virtual: VirtualFile) -> None:
        with self._lock:
            self._drop(virtual.rel)
            self._files[virtual.rel] = virtual
            self._by_base.setdefault(virtual.base_rel, set()).add(virtual.rel)
            self._bytes += len(virtual.content)
            while self._bytes > self._max and len(self._files) > 1:
                self._drop(next(iter(self._files)))

    def discard(self, rel: str) -> None:
        with self._lock:
            self._drop(rel)

    def held(self) -> tuple[int, int]:
        """(bytes of frozen packs held, the bound), for stats.json."""
        with self._lock:
            return self._bytes, self._max

    def paths(self) -> list[str]:
        with self._lock:
            return list(self._files)

    def paths_for(self, base_rel: str) -> list[str]:
        with self._lock:
            return sorted(self._by_base.get(base_rel, ()))

    def _drop(self, rel: str) -> None:
        old = self._files.pop(rel, None)
        if old is not None:
            self._bytes -= len(old.content)
            siblings = self._by_base.get(old.base_rel)
            if siblings is not None:
                siblings.discard(rel)
                if not siblings:
                    del self._by_base[old.base_rel]
