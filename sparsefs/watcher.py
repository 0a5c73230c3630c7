"""Source-tree watcher: changes made outside the mount invalidate caches.

In mirror mode a watchdog (inotify) observer on the source tree calls
``on_change(rel)`` for every created, modified, deleted or moved path; the
core then drops fingerprints and packs and asks the kernel to forget cached
pages and attributes for that path.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer

log = logging.getLogger("sparsefs.watcher")
CHANGE_EVENTS = [
    FileModifiedEvent, FileCreatedEvent, FileDeletedEvent, FileMovedEvent, FileClosedEvent,
    DirCreatedEvent, DirDeletedEvent, DirMovedEvent,
]


class _Handler(FileSystemEventHandler):
    def __init__(self, root: str, on_change: Callable[[str], None]) -> None:
        self.root = root
        self.on_change = on_change

    def on_any_event(self, event: FileSystemEvent) -> None:
        for path in (event.src_path, getattr(event, "dest_path", "")):
            if path:
                self._notify(os.fsdecode(path))

    def _notify(self, path: str) -> None:
        rel = os.path.relpath(path, self.root)
        if rel.startswith(".."):
            return
        try:
            self.on_change("" if rel == "." else rel)
        except Exception:
            log.exception("invalidation failed for %s", rel)


class SourceWatcher:
    """Watches ``root`` recursively until stopped."""

    def __init__(self, root: str, on_change: Callable[[str], None]) -> None:
        self.observer = Observer()
        self.observer.daemon = True
        # Only changes: opens and read-only closes (every plain read through the mount makes
        # them) would otherwise wake the watcher thread and contend for the GIL on each read.
        self.observer.schedule(_Handler(root, on_change), root, recursive=True, event_filter=CHANGE_EVENTS)

    def start(self) -> None:
        self.observer.start()

    def stop(self) -> None:
        # watchdog logs an ERROR when an event arrives while its emitter thread winds down; harmless here.
        logging.getLogger("watchdog.observers.inotify").setLevel(logging.CRITICAL)
        self.observer.stop()
        self.observer.join(timeout=5)
