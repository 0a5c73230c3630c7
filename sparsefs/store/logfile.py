"""``log.jsonl`` written in whole lines or not at all, and what could not be written.

The pack log is append-only JSON lines, read by ``tail -f``, ``sparsefs stats`` and people. A write on a full
disk can be short: the old writer left a torn line, and the next entry, once space returned, was glued to it.
Here every line is one ``write``; a short one is cut back (``ftruncate`` to the size before it) and, if even
that fails, the next line starts with a newline. A line that cannot be written waits in memory
(:data:`MAX_WAITING_BYTES`) and is written, in order and with its own time, before the next one once the
disk has room; past that bound it is dropped and counted, and when writing works again one ``not-saved`` line
records how many lines were lost and what they exposed and cost (sparsefs.store.savings), so the log's totals
still match what the mount served. A torn last line left by a crash or an older version is repaired at open.
One writer at a time (the state directory's lock); the caller serializes appends.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import orjson

log = logging.getLogger("sparsefs.log")
NOT_SAVED = "not-saved"
"""The decision of the line that records lines a full disk dropped."""
MAX_WAITING_BYTES = 4 * 1024 * 1024
_TAIL_SCAN = 1 << 20  # the longest torn tail looked at on open


@dataclass
class Lost:
    """Lines dropped past the waiting bound, until a ``not-saved`` line records them."""

    lines: int = 0
    exposed: int = 0
    full_read_chars: int = 0
    since: float = 0.0

    def line(self) -> bytes:
        return orjson.dumps({"time": round(time.time(), 3), "decision": NOT_SAVED, "artifact": "",
                             "lines": self.lines, "exposed": self.exposed, "full_read_chars": self.full_read_chars,
                             "since": self.since}) + b"\n"


class PackLog:
    """Appends whole lines to ``path``; never raises on a full disk."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = -1
        self._torn = False  # a short write could not be cut back: the next line starts with a newline
        self._waiting: deque[bytes] = deque()
        self._waiting_bytes = 0
        self.lost = Lost()
        self.lost_total = 0
        self.failed_since: float | None = None  # set while lines wait or were lost
        self.last_error = ""
        self._open()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def append(self, line: bytes, exposed: int = 0, cost: int = 0) -> bool:
        """Write ``line`` (one JSON line) after any that wait; False if it waits (or was dropped) instead."""
        if self._drain() and self._write(line):
            return True
        self._wait(line, exposed, cost)
        return False

    def flush(self) -> bool:
        """Write what waits, if the disk has room now; True when nothing waits."""
        return not (self._waiting or self.lost.lines) or self._drain()

    def size(self) -> int:
        return os.fstat(self._fd).st_size if self._fd >= 0 else 0

    def close(self) -> None:
        self._drain()
        if self._waiting or self.lost.lines:
            log.warning("log %s: %d lines could not be written before unmount (%s)", self.path,
                        len(self._waiting) + self.lost.lines, self.last_error)
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    # ---- plumbing ----
    def _open(self) -> bool:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        except OSError as err:
            self._failed(err)
            return False
        self._repair()
        return True

    def _repair(self) -> None:
        """A last line without its newline (a crash mid-write, an older version on a full disk): a whole JSON
        value gets its newline; a fragment is cut off, so the next line starts a line of its own."""
        end = self.size()
        if end == 0 or os.pread(self._fd, 1, end - 1) == b"\n":
            return
        start = max(0, end - _TAIL_SCAN)
        tail = os.pread(self._fd, end - start, start)
        cut = start + tail.rfind(b"\n") + 1 if b"\n" in tail else start
        fragment = tail[cut - start :]
        try:
            orjson.loads(fragment)
            self._torn = True  # complete: keep it, the next write ends its line
            return
        except orjson.JSONDecodeError:
            pass
        log.warning("log %s: cut a torn last line of %d bytes (a write interrupted earlier)", self.path, len(fragment))
        try:
            os.ftruncate(self._fd, cut)
        except OSError:
            self._torn = True

    def _drain(self) -> bool:
        """Write what waits, oldest first; True when nothing waits any more."""
        if self._fd < 0 and not self._open():
            return False
        while self._waiting:
            if not self._write(self._waiting[0]):
                return False
            self._waiting_bytes -= len(self._waiting.popleft())
        if self.lost.lines and not self._write(self.lost.line()):
            return False
        self.lost = Lost()
        self.failed_since = None
        return True

    def _write(self, line: bytes) -> bool:
        data = b"\n" + line if self._torn else line
        try:
            before = os.fstat(self._fd).st_size
            written = os.write(self._fd, data)
        except OSError as err:
            self._failed(err)
            return False
        if written == len(data):
            self._torn = False
            return True
        self._failed(OSError(errno.ENOSPC, f"short write ({written} of {len(data)} bytes)"))
        try:
            os.ftruncate(self._fd, before)  # whole lines or nothing
        except OSError:
            self._torn = True
        return False

    def _wait(self, line: bytes, exposed: int, cost: int) -> None:
        if self._waiting_bytes + len(line) <= MAX_WAITING_BYTES:
            self._waiting.append(line)
            self._waiting_bytes += len(line)
            return
        self.lost.lines += 1
        self.lost_total += 1
        self.lost.exposed += exposed
        self.lost.full_read_chars += cost
        self.lost.since = self.lost.since or time.time()

    def _failed(self, err: OSError) -> None:
        if self.failed_since is None:
            self.failed_since = time.time()
            log.warning("log %s cannot be written (%s); the mount serves on and keeps lines in memory",
                        self.path, err.strerror or err)
        self.last_error = err.strerror or str(err)
