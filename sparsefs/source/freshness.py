"""How a mount learns that the source changed: watched, checked on access, or not at all.

Three modes, reported in ``stats.json`` under ``"watcher"`` and by ``sparsefs doctor``:

* ``inotify`` — a watcher on the source tree calls ``on_change(rel)`` within
  milliseconds of an outside change (``sparsefs.vfs.watcher``);
* ``on-access`` — no (complete) watch: every open of a real file through the
  daemon compares the file's (inode, size, mtime_ns, ctime_ns) with what the
  last open saw and, when it differs, calls the same ``on_change(rel)`` the
  watcher would. Chosen with ``--no-watch`` and whenever inotify runs out
  (watch or instance limit, a lost-event queue overflow); never silently;
* ``off`` — nothing watches or checks (a bare ``Core``: library use, tests).

A source on a filesystem inotify is blind to (NFS, CephFS, SMB, 9p, FUSE:
``sparsefs.source.remote``) is checked on access from the start; a watched
source with such mounts under it also checks the paths under them on each open
(:attr:`Freshness.blind`), and only :meth:`Freshness.watched` paths may be
cached for long.

Why opens: every plain read starts with one, and the kernel forwards every open
to the daemon even while it caches the file's pages and attributes, so a read
after an outside change always gets fresh bytes. ctime is compared too: ``cp
-p`` or ``touch -d`` can restore size and mtime on new content, never ctime.
What this mode cannot see: a change to a file some process already holds open
(``tail -f`` keeps reading through its handle — the bytes are fresh under
kernel passthrough, may be stale pages under mfusepy) and ``stat`` alone,
which keeps the kernel's attributes up to their timeout (5 s). Packs are not
affected: every evidence read re-checks the fingerprint by stat key.

A path this table has not seen was never cached by the kernel when the mode
was chosen at start. When the mode is entered later (the watcher gave up while
pages were cached) or the table forgot paths (it is bounded), an unseen path
counts as changed once: one spurious invalidation rather than a stale read.

Each Core owns its :class:`Freshness` (mode ``off`` until a watcher or
``--no-watch`` sets one: ``sparsefs.vfs.watcher.watch_source``). The hooks
:meth:`Freshness.check_open` and :func:`check_kernel_open` are one line each in
``Core.open`` and the kernel backend's open; they cost one attribute read
unless the mode is on-access.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from sparsefs.source.journal import ChangeJournal
from sparsefs.source.remote import BlindMount, SourceKind
from sparsefs.source.rootfs import relative

log = logging.getLogger("sparsefs.freshness")

INOTIFY, ON_ACCESS, OFF = "inotify", "on-access", "off"
MAX_REMEMBERED = 100_000  # ~20 MB of (path, stat) pairs at most
WATCHES_SYSCTL = Path("/proc/sys/fs/inotify/max_user_watches")
INSTANCES_SYSCTL = Path("/proc/sys/fs/inotify/max_user_instances")
Seen = tuple[int, int, int, int]


def inotify_limit(path: Path = WATCHES_SYSCTL) -> int | None:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return None


def suggested_watch_limit(needed: int, current: int | None) -> int:
    """A limit with room for ``needed`` watches beside everything else: a power of two, at least 524288."""
    target = max(524_288, 2 * (current or 0), 4 * needed)
    return 1 << (target - 1).bit_length()


class Echoes:
    """Names the mount itself created, removed or renamed, so the watcher can skip their echo; thread-safe.

    The kernel already knows what it did through the mount: it dropped or added
    the entry itself, and it drops a directory's cached listing and attributes
    whenever it changes that directory. The watcher's echo would only make it
    re-read them (and take the directory's lock from the notifier while the
    next unlink of an ``rm -rf`` waits for it: it doubled the command's time;
    after a checkout, every directory was listed again). The core already
    dropped its packs. So the echo of a name change made through the mount is
    skipped for the directory (a removal entirely); a created or renamed file
    is still reported, and the kernel backend then compares it with what the
    kernel holds (sparsefs.fuse.kernel.notify). Each change is expected once,
    for ``ECHO_S`` seconds: an outside change of that name still comes through.
    """

    ECHO_S = 5.0
    LIMIT = 65_536

    def __init__(self) -> None:
        self._expected: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    def expect(self, rel: str) -> None:
        """``rel`` was just removed through the mount."""
        with self._lock:
            self._expected[rel] = time.monotonic() + self.ECHO_S
            self._expected.move_to_end(rel)
            while len(self._expected) > self.LIMIT:
                self._expected.popitem(last=False)

    def take(self, rel: str) -> bool:
        """Is this removal of ``rel`` the echo of one made through the mount? (Each is taken once.)"""
        with self._lock:
            deadline = self._expected.pop(rel, None)
        return deadline is not None and deadline >= time.monotonic()


class Freshness:
    """The mode of one mount, and the on-access check; thread-safe."""

    def __init__(self, on_change: Callable[[str], None], lstat: Callable[[str], os.stat_result]) -> None:
        self._on_change = on_change
        self._lstat = lstat
        self.mode = OFF
        self.reason = "nothing watches or checks the source"
        self.directories: int | None = None  # how many directories the tree has, when counted
        self.watches: Callable[[], int] = lambda: 0
        self.since = time.time()
        self.checks = 0
        self.changes_found = 0
        self._seen: OrderedDict[str, Seen] = OrderedDict()
        self._trust_unseen = True
        self._lock = threading.Lock()
        self._stoppers: list[Callable[[], None]] = []
        self._listeners: list[Callable[[], None]] = []
        self.echoes = Echoes()  # name changes made through the mount (the watcher skips their echo)
        self.journal = ChangeJournal()  # every change seen while watched, for git's fsmonitor hook
        self.kind: SourceKind | None = None  # the root's filesystem and the blind mounts under it, once classified
        self.blind: tuple[BlindMount, ...] = ()  # mounts under a watched root that are checked on access

    def set_blind(self, mounts: tuple[BlindMount, ...], while_serving: bool = False) -> None:
        """Mounts under the (watched) root whose files inotify cannot see change: checked on each open. One
        that appears ``while_serving`` may have had pages cached meanwhile: an unseen path counts as changed."""
        with self._lock:
            if while_serving and any(m not in self.blind for m in mounts):
                self._trust_unseen = False
            self.blind = mounts

    def _blind_for(self, rel: str) -> BlindMount | None:
        rel = rel.lstrip("/")
        return next((m for m in self.blind if m.covers(rel)), None)

    def checks_on_open(self, rel: str) -> bool:
        """Does an open of ``rel`` check the file (on-access mode, or a path under a blind mount)?"""
        return self.mode == ON_ACCESS or (bool(self.blind) and self._blind_for(rel) is not None)

    def watched(self, rel: str | None) -> bool:
        """Would the watcher see ``rel`` change (None: some path whose name is not known)? Only then may the
        kernel keep what it caches of it for long (negative entries, pages of small files)."""
        if self.mode != INOTIFY:
            return False
        return not self.blind or (rel is not None and self._blind_for(rel) is None)

    def removed_here(self, rel: str) -> None:
        """``rel`` was removed through the mount: while watched, the watcher skips that removal's echo
        (the journal still records it)."""
        if self.mode == INOTIFY:
            self.echoes.expect(rel)
            self.journal.record(rel)

    def named_here(self, *rels: str) -> None:
        """``rels`` were created, linked or renamed (both names) through the mount: while watched, the watcher
        reports them without their directories (the kernel already dropped its listings of those)."""
        if self.mode == INOTIFY:
            for rel in rels:
                self.echoes.expect(rel)
                self.journal.record(rel)

    def listen(self, on_unwatched: Callable[[], None]) -> None:
        """Call ``on_unwatched()`` when a watched mount switches to on-access checking (the kernel backend
        then drops the long-lived caches nothing would invalidate any more)."""
        self._listeners.append(on_unwatched)

    @property
    def on_access(self) -> bool:
        return self.mode == ON_ACCESS

    def watching(self, watches: Callable[[], int], stop: Callable[[], None]) -> None:
        """A watcher covers the whole tree (unless it already gave up while starting: then stop it)."""
        with self._lock:
            gave_up = self.mode == ON_ACCESS
            if not gave_up:
                self.mode, self.reason, self.watches, self.since = INOTIFY, "", watches, time.time()
                self._stoppers.append(stop)
        if gave_up:
            stop()

    def check_on_access(self, reason: str, caches_may_be_stale: bool = False) -> bool:
        """Switch to on-access checking (once; the first reason stays). True if this call switched."""
        with self._lock:
            if self.mode == ON_ACCESS:
                return False
            was_watching = self.mode == INOTIFY
            self.mode, self.reason, self.since = ON_ACCESS, reason, time.time()
            self.journal.incomplete()
            self.watches = lambda: 0
            self._trust_unseen = not (caches_may_be_stale or was_watching)
        if reason.startswith("--no-watch"):
            log.info("source changes are checked on access: %s", reason)
        else:
            log.warning("source changes are now checked on each open, not watched: %s", reason)
        if was_watching:
            for listener in self._listeners:
                listener()
        return True

    def check_open(self, rel: str, flags: int = os.O_RDONLY) -> None:
        """Hook in ``Core.open`` (real files): the on-access check, in that mode or under a blind mount; an open
        for writing goes in the journal at once (git's fsmonitor hook must hear of it before the writer closes)."""
        if flags & (os.O_WRONLY | os.O_RDWR):
            self.journal.record(rel)
        if self.checks_on_open(rel):
            self.check(rel)

    def check(self, rel: str) -> os.stat_result | None:
        """On-access check of real file ``rel``: invalidate it if it changed since last seen; its stat."""
        try:
            st = self._lstat(rel)
        except OSError:
            return None  # not a real file (a virtual name) or gone: the open itself will say
        if self._changed(rel, (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)):
            self._on_change(rel)
        return st

    def _changed(self, rel: str, seen: Seen) -> bool:
        with self._lock:
            self.checks += 1
            before = self._seen.pop(rel, None)
            changed = before != seen if before is not None else not self._trust_unseen
            self._seen[rel] = seen
            if len(self._seen) > MAX_REMEMBERED:
                self._seen.popitem(last=False)
                self._trust_unseen = False  # the forgotten path may have cached pages
            self.changes_found += changed
        return changed

    def state(self) -> dict[str, Any]:
        """The ``"watcher"`` entry of stats.json."""
        with self._lock:
            state: dict[str, Any] = {
                "mode": self.mode, "watches": self.watches(), "reason": self.reason,
                "since": round(self.since, 3), "directories": self.directories,
                "max_user_watches": inotify_limit(),
            }
            if self.mode == ON_ACCESS or self.blind:
                state |= {"checks": self.checks, "changes_found": self.changes_found}
            if self.kind is not None:
                state["filesystem"] = self.kind.root_type
                state["checked_on_access"] = [{"path": m.rel, "fs": m.fstype} for m in self.blind]
                if self.mode == INOTIFY and self.blind:
                    state["reason"] = SourceKind(self.kind.root_type, self.kind.magic, self.blind).describe()
        return state

    def stop_watchers(self) -> None:
        with self._lock:
            stoppers, self._stoppers = self._stoppers, []
        for stop in stoppers:
            stop()

    def stop(self) -> None:
        """Stop any watcher (the mount is going away)."""
        self.stop_watchers()


# ---- the kernel backend's hook -------------------------------------------------------------
class _KernelNode(Protocol):
    nodeid: int
    ino: int


class _NodePaths(Protocol):
    def path(self, nodeid: int) -> str | None: ...


class _KernelFiles(Protocol):
    @property
    def nodes(self) -> _NodePaths: ...

    def gone_from_tree(self, node: Any) -> None: ...


def check_kernel_open(freshness: Freshness, files: _KernelFiles, node: _KernelNode) -> None:
    """Hook at the top of the kernel backend's OPEN (a kept file's reopen never reaches ``Core.open``).

    If the name now leads to another inode (replaced by rename, as editors
    save), the kept backing file is the old one: let it go now, so this very
    open reopens the path instead of serving the old content by passthrough.
    """
    if freshness.mode != ON_ACCESS and not freshness.blind:
        return
    path = files.nodes.path(node.nodeid)
    if path is None or not freshness.checks_on_open(relative(path)):
        return
    st = freshness.check(relative(path))
    if st is not None and st.st_ino != node.ino:
        files.gone_from_tree(node)
