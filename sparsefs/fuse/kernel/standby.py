"""A standby reader for the kernel backend: it serves requests only while the reader is stuck.

One reader thread is fastest under CPython (a second one blocked in read(2)
costs GIL handoffs on every tiny request: measured 1.2-1.4x slower on
open-heavy work). But one reader stuck in a request — a cold stat on a slow
disk, an fsync — would hold every request behind it. The standby thread owns
its own cloned /dev/fuse fd and sleeps until a watcher sees the reader inside
one request for longer than ``STUCK_AFTER_S``; it then reads and answers
requests until the reader is free again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

STUCK_AFTER_S = 0.02
WATCH_EVERY_S = 0.01
DOZE_AFTER_S = 1.0  # no request for this long: the watcher sleeps until the next one (an idle mount costs no CPU)


class Standby:
    """Tracks whether the reader is stuck and runs the standby loop."""

    def __init__(self, stopping: threading.Event) -> None:
        self.stopping = stopping
        self.busy_since: float | None = None  # set by the reader around each request it answers itself
        self.last_busy = time.monotonic()
        self.dozing = False
        self._woken = threading.Event()
        self._needed = threading.Event()
        self.rescued = 0  # requests the standby answered (for tests and stats)

    def started(self) -> None:
        """The reader begins answering a request."""
        self.busy_since = self.last_busy = time.monotonic()
        if self.dozing:
            self._woken.set()

    def finished(self) -> None:
        self.busy_since = None

    def stuck(self) -> bool:
        since = self.busy_since
        return since is not None and time.monotonic() - since > STUCK_AFTER_S

    def watch(self) -> None:
        """Wake the standby when the reader has been in one request for too long."""
        while not self.stopping.wait(WATCH_EVERY_S):
            if self.stuck():
                self._needed.set()
            elif self.busy_since is None and time.monotonic() - self.last_busy > DOZE_AFTER_S:
                self._doze()

    def _doze(self) -> None:
        """Sleep until the reader starts a request (at most a second, should its wake-up be missed)."""
        self._woken.clear()
        self.dozing = True
        if self.busy_since is None:
            self._woken.wait(DOZE_AFTER_S)
        self.dozing = False

    def serve(self, answer_one: Callable[[], bool]) -> None:
        """While needed, answer requests with ``answer_one`` (False: the connection is gone)."""
        while not self.stopping.is_set():
            if not self._needed.wait(0.5):
                continue
            if not answer_one():
                return
            self.rescued += 1
            if not self.stuck():
                self._needed.clear()
