"""Source-tree watcher: changes made outside the mount invalidate caches, or the mount says why not.

A watchdog inotify observer on the source tree calls ``on_change(rel)`` for
every created, modified, deleted or moved path; the core then drops
fingerprints and packs and asks the kernel to forget cached pages and
attributes for that path.

inotify needs one watch per directory, from a per-user budget
(``fs.inotify.max_user_watches``) shared with every other program of that
user. watchdog 7 raises when the root itself cannot be watched, but silently
skips any subdirectory whose watch fails — at start and for directories
created later — which would leave those parts of the mount stale without a
word. So the observer here runs on an inotify instance that reports every
failed watch (ENOSPC: watch limit; EMFILE at creation: instance limit) and
every queue overflow (events lost). Any of these switches the mount to
on-access checking (``sparsefs.source.freshness``) with the reason, and gives the
watches back: a half-watched tree helps nobody, and the budget is shared.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from watchdog.events import (
    EVENT_TYPE_CREATED,
    EVENT_TYPE_DELETED,
    EVENT_TYPE_MOVED,
    DirAttribEvent,
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileAttribEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers.api import DEFAULT_OBSERVER_TIMEOUT, BaseObserver
from watchdog.observers.inotify import InotifyEmitter
from watchdog.observers.inotify_c import CallbackId, InotifyEvent, InotifyFD, Mask, WatchCallback, WatchDescriptor

from sparsefs.source.freshness import INSTANCES_SYSCTL, Freshness, inotify_limit

if TYPE_CHECKING:
    from sparsefs.vfs.core import Core

log = logging.getLogger("sparsefs.watcher")
CHANGE_EVENTS = [
    FileModifiedEvent, FileCreatedEvent, FileDeletedEvent, FileMovedEvent, FileClosedEvent, FileAttribEvent,
    DirCreatedEvent, DirDeletedEvent, DirMovedEvent, DirAttribEvent,
]  # attribute events too: chmod, chown, touch outside must reach the kernel's long-lived attribute cache
_NAMESPACE = {EVENT_TYPE_CREATED, EVENT_TYPE_DELETED, EVENT_TYPE_MOVED}
QUEUE_SYSCTL = "/proc/sys/fs/inotify/max_queued_events"


class _Handler(FileSystemEventHandler):
    def __init__(self, root: str, on_change: Callable[[str], None]) -> None:
        self.root = root
        self.on_change = on_change

    def on_any_event(self, event: FileSystemEvent) -> None:
        paths = [os.fsdecode(path) for path in (event.src_path, getattr(event, "dest_path", "")) if path]
        if event.event_type in _NAMESPACE:  # the directories' listings changed too (the kernel may cache them)
            paths += [os.path.dirname(path) for path in paths]
        for path in dict.fromkeys(paths):
            self._notify(path)

    def _notify(self, path: str) -> None:
        rel = os.path.relpath(path, self.root)
        if rel.startswith(".."):
            return
        try:
            self.on_change("" if rel == "." else rel)
        except Exception:
            log.exception("invalidation failed for %s", rel)


class _ReportingInotify(InotifyFD):
    """watchdog's inotify instance, but a watch it could not add, or lost events, are reported."""

    def __init__(self, root: str, on_trouble: Callable[[str], None]) -> None:
        super().__init__()
        self.root = root
        self.on_trouble = on_trouble
        self.wds: set[WatchDescriptor] = set()

    def add_callback(self, path: bytes, mask: Mask, callback: WatchCallback, id_: CallbackId) -> WatchDescriptor:
        try:
            wd = super().add_callback(path, mask, callback, id_)
        except OSError as err:
            if err.errno == errno.ENOSPC:
                where = os.path.relpath(os.fsdecode(path), self.root)
                self.on_trouble(f"inotify watch limit reached: fs.inotify.max_user_watches={inotify_limit()}, "
                                f"{len(self.wds)} directories watched, could not watch '{where}'")
            raise
        self.wds.add(wd)
        return wd

    def handle_event(self, event: InotifyEvent) -> None:
        if event.is_queue_overflow:
            self.on_trouble(f"inotify event queue overflowed (fs.inotify.max_queued_events="
                            f"{_read_int(QUEUE_SYSCTL)}): changes were lost")
        elif event.is_ignored:
            self.wds.discard(event.wd)
        super().handle_event(event)


class _Observer(BaseObserver):
    """watchdog's InotifyObserver on a given inotify instance."""

    def __init__(self, inotify: _ReportingInotify) -> None:
        self._inotify = inotify
        inotify.start()
        super().__init__(InotifyEmitter, timeout=DEFAULT_OBSERVER_TIMEOUT, inotify_fd=inotify)

    def on_thread_stop(self) -> None:
        super().on_thread_stop()
        self._inotify.stop()
        self._inotify.join(timeout=5)


class SourceWatcher:
    """Watches ``root`` recursively until stopped; ``on_trouble(reason)`` when it cannot watch all of it."""

    def __init__(self, root: str, on_change: Callable[[str], None],
                 on_trouble: Callable[[str], None] = lambda reason: None) -> None:
        self.root = root
        self.trouble: str | None = None
        self._started = False
        self._on_trouble = on_trouble
        self._inotify = _ReportingInotify(root, self._report)  # EMFILE here: instance limit
        self.observer = _Observer(self._inotify)
        self.observer.daemon = True
        # Only changes: opens and read-only closes (every plain read through the mount makes
        # them) would otherwise wake the watcher thread and contend for the GIL on each read.
        self.observer.schedule(_Handler(root, on_change), root, recursive=True, event_filter=CHANGE_EVENTS)

    def start(self) -> None:
        """Watch every directory; OSError (ENOSPC, with the reason) if not all of them could be."""
        try:
            self.observer.start()
        except OSError:
            self.stop()
            raise
        self._started = True
        if self.trouble is not None:
            self.stop()
            raise OSError(errno.ENOSPC, self.trouble)

    def watches(self) -> int:
        return len(self._inotify.wds)

    def _report(self, reason: str) -> None:
        if self.trouble is None:
            self.trouble = reason
            if self._started:
                self._on_trouble(reason)

    def stop(self) -> None:
        # watchdog logs an ERROR when an event arrives while its emitter thread winds down; harmless here.
        logging.getLogger("watchdog.observers.inotify").setLevel(logging.CRITICAL)
        self.observer.stop()  # also ends the inotify thread, started or not
        if self.observer.is_alive() and self.observer is not threading.current_thread():
            self.observer.join(timeout=5)


def watch_source(core: Core, path: str, enabled: bool) -> Freshness:
    """Watch ``path`` (the source tree, or the fd path of an in-place mount) for ``core``; never raises.

    Sets the mode of the core's own :class:`Freshness`, reported in stats.json;
    on-access checking takes over whenever inotify cannot cover the whole tree.
    """
    freshness = core.freshness
    core.stats.watcher = freshness.state
    if not enabled:
        freshness.check_on_access("--no-watch: source changes are checked on each open")
        return freshness
    try:
        watcher = SourceWatcher(path, core.on_source_change, lambda reason: _give_up(freshness, reason, path))
        watcher.start()
    except OSError as err:
        _count_directories_later(freshness, path)
        freshness.check_on_access(_reason(err))
        return freshness
    freshness.watching(watcher.watches, watcher.stop)
    return freshness


def _give_up(freshness: Freshness, reason: str, path: str) -> None:
    """Runtime trouble (inside watchdog's thread): check on access from now on, and stop watching."""
    if freshness.check_on_access(reason, caches_may_be_stale=True):
        threading.Thread(target=freshness.stop_watchers, name="sparsefs-unwatch", daemon=True).start()
        _count_directories_later(freshness, path)


def _reason(err: OSError) -> str:
    if err.errno == errno.EMFILE:
        return f"inotify instance limit reached: fs.inotify.max_user_instances={inotify_limit(INSTANCES_SYSCTL)}"
    if err.errno == errno.ENOSPC:
        if "fs.inotify" in (err.strerror or ""):
            return str(err.strerror)
        return f"inotify watch limit reached: fs.inotify.max_user_watches={inotify_limit()}"
    return f"source watcher unavailable: {err.strerror or err}"


def _count_directories_later(freshness: Freshness, path: str) -> None:
    """How many watches the tree would need (for doctor's fix), counted off the request path."""

    def count() -> None:
        freshness.directories = count_directories(path)

    threading.Thread(target=count, name="sparsefs-count-dirs", daemon=True).start()


def count_directories(path: str) -> int:
    """Directories under ``path`` including itself: the inotify watches a recursive watch needs."""
    return sum(1 for _ in os.walk(path))


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None
