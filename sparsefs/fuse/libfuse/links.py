"""Hard links under libfuse's high-level API: every name is its own kernel inode, so keep them coherent.

libfuse's path layer gives each (directory, name) its own node id, so two names
of one source inode are two kernel inodes with separate attribute caches: after
``ln a b``, or a chmod, chown, write, rename or unlink through one name, the
other would keep its old nlink, mode, owner, size or ctime until the attribute
timeout. This registry remembers, per (device, inode), the paths the kernel has
been given for files with more than one link; after a change through one of
them the binding invalidates the others (``fuse_invalidate_path``) before it
replies, so ``stat`` through any name is right at once. The kernel backend needs
none of this: it gives every name of an inode one node id (sparsefs.fuse.kernel.nodes).
"""

from __future__ import annotations

import stat
import threading
from collections import OrderedDict
from collections.abc import Callable

Key = tuple[int, int]  # (st_dev, st_ino)
MAX_PATHS = 65_536  # oldest forgotten first: a forgotten path only loses the instant refresh


class LinkNames:
    """(device, inode) → the paths the kernel knows for it, for files with several links; thread-safe."""

    def __init__(self, invalidate: Callable[[str], None], limit: int = MAX_PATHS) -> None:
        self._invalidate = invalidate
        self._limit = limit
        self._lock = threading.Lock()
        self._keys: OrderedDict[str, Key] = OrderedDict()
        self._paths: dict[Key, set[str]] = {}

    def seen(self, path: str, attrs: dict[str, int]) -> None:
        """The kernel was given ``attrs`` for ``path``: remember it if the inode has other names."""
        if attrs.get("st_nlink", 1) < 2 or stat.S_ISDIR(attrs.get("st_mode", 0)):
            return
        key = (attrs.get("st_dev", 0), attrs["st_ino"])
        with self._lock:
            if self._keys.get(path) == key:
                return
            self._drop(path)
            self._keys[path] = key
            self._paths.setdefault(key, set()).add(path)
            while len(self._keys) > self._limit:
                self._drop(next(iter(self._keys)))

    def key(self, path: str) -> Key | None:
        with self._lock:
            return self._keys.get(path)

    def changed(self, key: Key | None, path: str) -> None:
        """The inode ``key`` changed through ``path``: make the kernel re-read every other name of it."""
        if key is None:
            return
        with self._lock:
            others = [other for other in self._paths.get(key, ()) if other != path]
        for other in others:
            self._invalidate(other)

    def removed(self, path: str) -> None:
        """``path`` no longer names its inode (unlink, or replaced by a rename)."""
        with self._lock:
            self._drop(path)

    def moved(self, old: str, new: str) -> None:
        with self._lock:
            key = self._keys.get(old)
            self._drop(old)
            self._drop(new)
            if key is not None:
                self._keys[new] = key
                self._paths.setdefault(key, set()).add(new)

    def _drop(self, path: str) -> None:
        key = self._keys.pop(path, None)
        if key is None:
            return
        paths = self._paths.get(key)
        if paths is not None:
            paths.discard(path)
            if not paths:
                del self._paths[key]
