"""What the mfusepy backend last told the kernel about a path: its file type, and what its cached pages came from.

libfuse's high-level API gives the daemon paths, never the kernel's inodes, so
two things the kernel backend keeps per node are kept here per path:

* **the file type handed out**: a file replaced by a directory outside the
  mount (or the other way round) would otherwise be answered for with the new
  object's attributes on the kernel's old inode, which the kernel then marks
  bad (EIO for every caller until it is forgotten: issue 25, item 3). A path
  whose type changed answers ESTALE once instead; the kernel walks it again
  (LOOKUP_REVAL) and gets the new object fresh. Paths the mount itself
  creates, removes or renames are forgotten first: the kernel already knows.
* **the page stamp** (``sparsefs.fuse.pagecache``): whether an open may keep
  the kernel's pages of the file.

Both are bounded (least recently used first); a forgotten path costs at most
one page re-read.
"""

from __future__ import annotations

import os
import stat
import threading
from collections import OrderedDict
from typing import TypeVar

from sparsefs.fuse import pagecache

LIMIT = 65_536
V = TypeVar("V")


class PathMemory:
    """Per-path file types and page stamps; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kinds: OrderedDict[str, int] = OrderedDict()
        self._pages: OrderedDict[str, pagecache.Pages] = OrderedDict()

    def kind_changed(self, path: str, mode: int) -> bool:
        """Record the file type handed out for ``path``; True if another type was handed out before."""
        kind = stat.S_IFMT(mode)
        with self._lock:
            before = self._kinds.pop(path, kind)
            self._kinds[path] = kind
            _trim(self._kinds)
        return before != kind

    def keep_pages(self, path: str, st: os.stat_result) -> tuple[bool, bool]:
        """(may this open keep the kernel's pages of ``path``, did the file change unseen since they started)."""
        now = pagecache.stamp(st)
        with self._lock:
            pages = self._pages.pop(path, None) or pagecache.Pages()
            self._pages[path] = pages
            _trim(self._pages)
            changed = pages.stamp is not None and pages.stamp != now
            return pagecache.may_keep(pages, now), changed

    def forget_pages(self, path: str) -> None:
        with self._lock:
            self._pages.pop(path, None)

    def forget(self, path: str, tree: bool = False) -> None:
        """The kernel already knows what ``path`` (and with ``tree``, everything below it) is now."""
        prefix = path.rstrip("/") + "/"
        with self._lock:
            _drop(self._kinds, path, prefix if tree else None)
            _drop(self._pages, path, prefix if tree else None)


def _drop(table: OrderedDict[str, V], path: str, prefix: str | None) -> None:
    table.pop(path, None)
    for key in [key for key in table if key.startswith(prefix)] if prefix else []:
        del table[key]


def _trim(table: OrderedDict[str, V]) -> None:
    while len(table) > LIMIT:
        table.popitem(last=False)
