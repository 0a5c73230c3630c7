"""What the Core needs from whatever serves it: the binding contract, given to the Core at construction.

A FUSE backend knows three things the Core cannot find out itself: which
process made the request being answered, with its credentials (a pack held
open by a process keeps its size for that process, the guard cards per
process, and every pack is checked against the caller's uid, gid and groups:
``sparsefs.source.access``), how to make the
kernel forget what it cached of a path (an outside change, a pack that grew),
and since when the mount answers requests (``.sparsefs`` reports it, systemd
is told). That is :class:`Binding`, nothing more.

* :data:`NULL` — no kernel, no caller, never serving: ``sparsefs read``, the
  Python API, MCP and the indexer.
* :class:`LateBinding` — a mount's: built before the Core (which keeps it),
  handed to the backend's ``serve``, which attaches its caller and its
  invalidation once it speaks to the kernel, then marks it ready. Until then it
  behaves like :data:`NULL`. The Core never has anything set on it afterwards.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

from sparsefs.source.access import Credentials


class Binding(Protocol):
    """The backend's side of the Core: the caller, kernel invalidation, readiness."""

    def caller_pid(self) -> int | None:
        """The pid (thread id) of the process whose request is being answered; None when unknown."""
        ...

    def caller(self) -> Credentials | None:
        """The credentials of that process (uid, gid from the request; supplementary groups); None without a
        mount: ``sparsefs read``, the API and MCP read as the user who runs them."""
        ...

    def invalidate(self, path: str) -> None:
        """Drop the kernel's cached attributes and pages of ``path`` (absolute in the mount)."""
        ...

    def ready_since(self) -> float | None:
        """When the mount began answering requests (time.time()); None while it does not."""
        ...


class NullBinding:
    """No backend: nothing to invalidate, no caller, never a mount."""

    def caller_pid(self) -> int | None:
        return None

    def caller(self) -> Credentials | None:
        return None

    def invalidate(self, path: str) -> None:
        return None

    def ready_since(self) -> float | None:
        return None


NULL = NullBinding()


class LateBinding:
    """A mount's binding: the backend attaches when it starts serving; thread-safe."""

    def __init__(self) -> None:
        self._caller: Callable[[], int | None] = NULL.caller_pid
        self._credentials: Callable[[], Credentials | None] = NULL.caller
        self._invalidate: Callable[[str], None] = NULL.invalidate
        self._since: float | None = None
        self._ready = threading.Event()

    def attach(self, caller_pid: Callable[[], int | None], invalidate: Callable[[str], None],
               caller: Callable[[], Credentials | None] = NULL.caller) -> None:
        """The backend speaks to the kernel now: how to find the caller (its pid, its credentials) and how to
        invalidate."""
        self._caller, self._invalidate, self._credentials = caller_pid, invalidate, caller

    def mark_ready(self) -> None:
        """The mount answers requests (systemd's READY=1 waits for this)."""
        self._since = time.time()
        self._ready.set()

    def wait_ready(self, timeout: float) -> bool:
        return self._ready.wait(timeout)

    def caller_pid(self) -> int | None:
        return self._caller()

    def caller(self) -> Credentials | None:
        return self._credentials()

    def invalidate(self, path: str) -> None:
        self._invalidate(path)

    def ready_since(self) -> float | None:
        return self._since
