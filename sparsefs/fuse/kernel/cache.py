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
  several links (see :meth:`CachePolicy.real`), keep ``SHORT_S``.
* **checked on access / not watched**: ``SHORT_S`` (5 s), no negative entries:
  nothing would invalidate them.

Generated directories (the control tree) and the files in them are live: no
caching at all. Packs (virtual files) keep ``SHORT_S``: their sizes are
invalidated when their artifact changes, but they depend on more than the file.
"""

from __future__ import annotations

import stat

from sparsefs.source.freshness import INOTIFY, Freshness

LONG_S = 86_400.0
SHORT_S = 5.0
LIVE_S = 0.0


class CachePolicy:
    """Timeouts for the kernel's caches, read on every reply (the mode may change while mounted)."""

    def __init__(self, freshness: Freshness, root_dev: int) -> None:
        self.freshness = freshness
        self.root_dev = root_dev
        self.epoch = False  # the kernel accepts FUSE_NOTIFY_INC_EPOCH (set once at mount)

    def real(self, st_dev: int, nlink: int = 1, mode: int = 0) -> float:
        """Entry and attribute timeout of a real file or directory on device ``st_dev``.

        A non-directory with several links keeps the short one: inotify reports a link removed outside
        the mount by that name only, so nothing would refresh the nlink its other names show."""
        if self.freshness.mode != INOTIFY or st_dev != self.root_dev or (nlink > 1 and not stat.S_ISDIR(mode)):
            return SHORT_S
        return LONG_S

    def negative(self) -> float:
        """How long a name the source lacks may be remembered as absent (0: not at all)."""
        return LONG_S if self.epoch and self.freshness.mode == INOTIFY else 0.0
