"""When the kernel may keep a real file's cached pages across opens (both backends).

Plain files read through the daemon (the kernel backend without passthrough,
small files read while watched, every file on mfusepy) land in the kernel's
page cache, and an open that answers ``FOPEN_KEEP_CACHE`` (libfuse:
``keep_cache``) lets the next reader use those pages without asking. The
watcher drops them when the source changes outside the mount, but inotify is
blind to one kind of change: stores through a shared ``mmap`` of the source
file raise no event at all until the writer closes it (issue 25, item 4).

So pages are revalidated at every open and their staleness is bounded:

* **at open**, the file's stamp (inode, size, mtime, ctime) is compared with
  the stamp taken when the kernel's current pages were started; a different
  stamp drops them (the open answers without ``FOPEN_KEEP_CACHE``). A store
  through a mapping moves mtime and ctime when it dirties a clean page (the
  write fault), so the first store after pages were read is seen by the next
  open.
* **once, when the writeback window closes**: later stores to a page still
  dirty change the data without moving the ctime, until writeback cleans it,
  which the kernel does within ``dirty_expire_centisecs`` plus
  ``dirty_writeback_centisecs`` (35 s by default) of dirtying; every store
  after that faults again and moves the ctime. So pages started less than
  :func:`writeback_window` seconds after the file's last ctime are dropped
  once more when that window has passed (the kernel backend's notifier does
  it; mfusepy, which has no notifier, keeps no such pages across opens).

A store made through an outside mapping is therefore seen by opens after at
most the window (about 40 s), and at once if it is the first since the pages
were read. docs/SEMANTICS.md ("Cache coherence") says it for users.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

Stamp = tuple[int, int, int, int]  # inode, size, mtime_ns, ctime_ns
WINDOW_ENV = "SPARSEFS_WRITEBACK_WINDOW_S"
_VM = Path("/proc/sys/vm")
_MARGIN_S = 5.0  # the flusher runs late under load


def stamp(st: os.stat_result) -> Stamp:
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def writeback_window() -> float:
    """Seconds after a file's last ctime during which a mapped store may change it without moving the ctime.

    ``SPARSEFS_WRITEBACK_WINDOW_S`` overrides it (0: trust the stamp alone; tests of page reuse on files
    they have just written use it)."""
    override = os.environ.get(WINDOW_ENV)
    if override:
        return float(override)
    total = 0.0
    for name, default in (("dirty_expire_centisecs", 3000), ("dirty_writeback_centisecs", 500)):
        try:
            total += int((_VM / name).read_text()) / 100
        except (OSError, ValueError):
            total += default / 100
    return total + _MARGIN_S


WINDOW_S = writeback_window()


@dataclass(slots=True)
class Pages:
    """What the kernel's pages of one file were started from: the stamp and when (``time.time()``)."""

    stamp: Stamp | None = None
    since: float = 0.0


def may_keep(pages: Pages, now: Stamp, window: float = WINDOW_S, clock: Callable[[], float] = time.time,
             settles: bool = False) -> bool:
    """Can an open keep the kernel's pages of this file? If not, the pages it starts are recorded as from ``now``.

    ``settles``: the caller drops pages started within the window once it has passed (:func:`settle_at`),
    so only the stamp must match; without that, such pages are never kept across opens."""
    keep = pages.stamp == now and (settles or settled(pages, window))
    if not keep:
        pages.stamp, pages.since = now, clock()
    return keep


def settled(pages: Pages, window: float = WINDOW_S) -> bool:
    """Were these pages started past the writeback window after the file's last ctime (nothing unseen since)?"""
    return pages.stamp is not None and pages.since > pages.stamp[3] / 1e9 + window


def settle_at(pages: Pages, window: float = WINDOW_S) -> float:
    """When (``time.time()``) pages started within the window must be dropped once: the window's end."""
    assert pages.stamp is not None
    return pages.stamp[3] / 1e9 + window
