"""When the kernel may keep a real file's cached pages across opens (both backends).

Plain files read through the daemon (the kernel backend without passthrough,
small files read while watched, every file on mfusepy) land in the kernel's
page cache, and an open that answers ``FOPEN_KEEP_CACHE`` (libfuse:
``keep_cache``) lets the next reader use those pages without asking. The
watcher drops them when the source changes outside the mount, but inotify is
blind to one kind of change: stores through a shared ``mmap`` of the source
file raise no event at all until the writer closes it (issue 25, item 4).

So every such open also revalidates. The file's stamp (inode, size, mtime,
ctime) is compared with the stamp taken when the kernel's current pages were
started (the last open that did not keep them); pages are kept only if

* the stamp is unchanged, and
* the pages were started more than :func:`writeback_window` seconds after the
  file's last ctime.

The second rule bounds what the first cannot see. A store through a mapping
updates mtime and ctime only when it dirties a clean page (the write fault);
later stores to the same page change the data silently until writeback cleans
it, which the kernel does within ``dirty_expire_centisecs`` plus
``dirty_writeback_centisecs`` (35 s by default) of dirtying. Pages started
after that window past the last ctime hold every store made before they were
read; every store after them dirties a clean page again and moves the ctime.
A file changed within the window is re-read through the daemon at each open
until the window has passed. What remains is documented in docs/SEMANTICS.md
("Cache coherence"): a reader that keeps the file open (its reads come from
pages already cached) sees a writer's stores at its next open.
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


def may_keep(pages: Pages, now: Stamp, window: float = WINDOW_S, clock: Callable[[], float] = time.time) -> bool:
    """Can an open keep the kernel's pages of this file? If not, the pages it starts are recorded as from ``now``."""
    keep = pages.stamp == now and pages.since > now[3] / 1e9 + window
    if not keep:
        pages.stamp, pages.since = now, clock()
    return keep
