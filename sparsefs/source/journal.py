"""What changed in the source since a token: what git's fsmonitor hook asks a mount (issue 26, item 5).

While a mount's source is watched, every path the watcher reports (outside
changes and the echo of changes made through the mount) and every name
removed through the mount (whose echo the watcher skips) is appended here with
a sequence number. ``git status`` with ``core.fsmonitor`` set to the hook
``sparsefs fsmonitor install`` writes then asks for the paths changed since
its last token and lstat's only those, instead of every tracked file.

A token names this journal (the daemon's pid and start) and a sequence
number. The answer is None (git then scans everything, as without a hook)
when the token is another journal's or older than what is kept
(:data:`LIMIT` paths), or when the source is not (or was not, since the token)
completely watched.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections import deque

LIMIT = 200_000


class ChangeJournal:
    """Paths changed in the source, in order, numbered; thread-safe."""

    def __init__(self) -> None:
        self._name = f"sparsefs:{os.getpid()}.{time.time_ns()}"
        self._lock = threading.Lock()
        self._seq = 0
        self._paths: deque[tuple[int, str]] = deque()
        self._complete_from = 1  # the first sequence number from which every change is here

    def record(self, rel: str) -> None:
        with self._lock:
            self._seq += 1
            self._paths.append((self._seq, rel))
            if len(self._paths) > LIMIT:
                self._paths.popleft()

    def incomplete(self) -> None:
        """Changes were missed (the watcher stopped): no token from before now can be answered."""
        with self._lock:
            self._complete_from = self._seq + 1

    def token(self) -> str:
        with self._lock:
            return f"{self._name}:{self._seq}"

    def since(self, token: str) -> tuple[str, list[str] | None]:
        """(a new token, the paths changed after ``token`` in order, each once; None: unknown, scan all)."""
        name, _, number = token.rpartition(":")
        with self._lock:
            new = f"{self._name}:{self._seq}"
            seq = int(number) if name == self._name and number.isdigit() else -1
            oldest = self._paths[0][0] if self._paths else self._seq + 1
            if seq < 0 or seq + 1 < max(oldest, self._complete_from) or seq > self._seq:
                return new, None
            newer = list(itertools.takewhile(lambda entry: entry[0] > seq, reversed(self._paths)))
        return new, list(dict.fromkeys(rel for _, rel in reversed(newer)))

