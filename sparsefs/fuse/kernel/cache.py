"""How long the kernel may keep what the daemon tells it: entries, attributes, negative entries.

Long-lived caches are safe only while something invalidates them, so the
policy follows the mount's freshness mode (``sparsefs.source.freshness``):

* **watched** (inotify): every change made outside the mount reaches the kernel
  as an invalidation within the watcher's latency, and changes through the
  mount update the kernel's caches themselves; entries and attributes of real
  files are kept for a day (``LONG_S``), and so are negative entries when the
  kernel can drop them all at once should watching stop (``FUSE_NOTIFY_INC_EPOCH``,
  Linux 6.16+). A file on another filesystem than the source root (a mount
  inside the source: NFS or FUSE changes never reach inotify), and a file with
  several links (see :meth:`CachePolicy.real`), keep ``SHORT_S``; a name under a
  mount inotify is blind to is never cached as absent (``Freshness.watched``).
* **checked on access / not watched**: ``SHORT_S`` (5 s), no negative entries:
  nothing would invalidate them.

Generated directories (the control tree) and the files in them are live: no
caching at all (with ``--no-open``, control files are kept a second: no open
handle pins a snapshot, so a read spanning several requests must see one).
Packs (virtual files) keep ``SHORT_S``: their sizes are invalidated when their
artifact changes, but they depend on more than the file.
"""

from __future__ import annotations

import stat
import threading

from sparsefs.source.freshness import INOTIFY, Freshness

LONG_S = 86_400.0
SHORT_S = 5.0
LIVE_S = 0.0
NO_OPEN_LIVE_S = 1.0  # --no-open: a live control file's snapshot (no open handle pins it, see KernelOps._settled)
ABSENT_LIMIT = 65_536  # names remembered as absent; past it, absent names are not cached at all


class CachePolicy:
    """Timeouts for the kernel's caches, read on every reply (the mode may change while mounted)."""

    def __init__(self, freshness: Freshness, root_dev: int) -> None:
        self.freshness = freshness
        self.root_dev = root_dev
        self.epoch = False  # the kernel accepts FUSE_NOTIFY_INC_EPOCH (set once at mount)
        self._absent: set[tuple[int, str]] = set()  # (parent, name) handed out as negative entries
        self._absent_lock = threading.Lock()

    def real(self, st_dev: int, nlink: int = 1, mode: int = 0) -> float:
        """Entry and attribute timeout of a real file or directory on device ``st_dev``.

        A non-directory with several links keeps the short one: inotify reports a link removed outside
        the mount by that name only, so nothing would refresh the nlink its other names show."""
        if self.freshness.mode != INOTIFY or st_dev != self.root_dev or (nlink > 1 and not stat.S_ISDIR(mode)):
            return SHORT_S
        return LONG_S

    def negative(self, parent: int, name: str, path: str | None = None) -> float:
        """How long the kernel may remember ``name`` in ``parent`` as absent (0: not at all).

        Each name handed out as a negative entry is remembered, so a name created outside later is
        invalidated only if the kernel may hold it as absent (``forget_absent``). That invalidation
        takes the directory's lock, and while a LOOKUP building a pack holds it (seconds), the
        waiting invalidation would hold every new lookup in that directory behind it."""
        if not (self.epoch and self.freshness.watched(path)):  # path under a blind mount (NFS...): never
            return 0.0
        with self._absent_lock:
            if len(self._absent) >= ABSENT_LIMIT:
                return 0.0
            self._absent.add((parent, name))
        return LONG_S

    def forget_absent(self, parent: int, name: str) -> bool:
        """``name`` now exists: True if the kernel may still hold it as absent (it must be told)."""
        with self._absent_lock:
            if (parent, name) in self._absent:
                self._absent.discard((parent, name))
                return True
        return False

    def forget_all_absent(self) -> None:
        """The kernel dropped every entry (``INC_EPOCH``): it holds no name as absent any more."""
        with self._absent_lock:
            self._absent.clear()
