"""Dense warm-up: after a hybrid read, embed the rest of the artifact in the background.

A hybrid read embeds at most its BM25 shortlist on the request path (up to 64
sentences, 50-350 ms on this machine), so every *new* question on a long
document would pay that again. The warmer embeds all of the artifact's units
(``readers.locate_methods.warm_dense``, bounded per artifact) on one
low-priority thread: once it is done, a new question costs one query embedding.

* One daemon thread, started on first use, works through a small queue of
  artifacts (newest kept when full, each parsed version once).
* The thread runs at nice 19 and embeds on a one-thread onnxruntime session,
  eight sentences at a time, so a request waits for at most one merge and the
  work only ever uses idle CPU on a busy machine.
* A job starts :data:`START_DELAY_S` after it was queued, so the read that
  queued it is answered first.
* ``SPARSEFS_DENSE_WARMUP=0`` turns it off; :meth:`DenseWarmer.close` stops it
  between batches. Vectors land in the parsed artifact, so the parsed store
  keeps them across remounts like the request path's.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable

from readers.base import Parsed
from readers.locate_methods import warm_dense

_LOG = logging.getLogger(__name__)
START_DELAY_S = 0.5
MAX_QUEUED = 8
NICE = 19
ENV = "SPARSEFS_DENSE_WARMUP"


def enabled() -> bool:
    return os.environ.get(ENV, "1").strip().lower() not in {"0", "no", "off", "false"}


class DenseWarmer:
    """Embeds queued artifacts' units on one background thread."""

    def __init__(self, warm: Callable[[Parsed, Callable[[], bool]], int] = warm_dense) -> None:
        self._warm = warm
        self._jobs: queue.Queue[tuple[float, weakref.ref[Parsed]]] = queue.Queue(MAX_QUEUED)
        self._seen: dict[int, weakref.ref[Parsed]] = {}  # by id: Parsed is a dataclass, not hashable
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.done = 0  # artifacts warmed

    def submit(self, parsed: Parsed) -> None:
        """Warm ``parsed`` soon (once per parsed version; dropped when the queue is full)."""
        with self._lock:
            seen = self._seen.get(id(parsed))
            if self._stop.is_set() or (seen is not None and seen() is parsed):
                return
            try:
                self._jobs.put_nowait((time.monotonic() + START_DELAY_S, weakref.ref(parsed)))
            except queue.Full:
                return
            self._seen = {key: ref for key, ref in self._seen.items() if ref() is not None}
            self._seen[id(parsed)] = weakref.ref(parsed)
            self._start()

    def close(self, timeout: float = 2.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="sparsefs-dense-warmup", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        _lower_priority()
        while not self._stop.is_set():
            try:
                due, ref = self._jobs.get(timeout=0.5)
            except queue.Empty:
                continue
            self._stop.wait(max(0.0, due - time.monotonic()))
            parsed = ref()
            if parsed is not None and not self._stop.is_set():
                self._warm_one(parsed)

    def _warm_one(self, parsed: Parsed) -> None:
        started = time.monotonic()
        try:
            added = self._warm(parsed, self._stop.is_set)
        except Exception:  # noqa: BLE001 - a warm-up failure only leaves reads as they were
            _LOG.exception("dense warm-up failed")
            return
        self.done += 1
        _LOG.info("dense warm-up: %d units in %.1f s", added, time.monotonic() - started)


def _lower_priority() -> None:
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)  # Linux: per thread
