"""Dense warm-up: after a hybrid read, embed the rest of the artifact in the background.

A hybrid read embeds at most its BM25 shortlist on the request path (up to 64
sentences, 50-350 ms on this machine), so every *new* question on a long
document would pay that again. The warmer embeds all of the artifact's units
(``readers.retrieval.methods.warm_dense``, bounded per artifact) on one
low-priority thread: once it is done, a new question costs one query embedding.

* One daemon thread, started on first use, works through a small queue of
  artifacts (a new one is dropped when it is full; each parsed version once).
  It holds an artifact only weakly and only for one slice of SLICE_UNITS units
  at a time: an artifact the cache evicted, or a version a new one replaced,
  is dropped at the next slice instead of being kept alive and warmed.
* The thread runs at nice 19 and embeds on its own onnxruntime session, whose
  pool threads it starts and which inherit its nice 19 (two threads: the 3M
  10-K warms in 61 s instead of 102 s idle), eight sentences at a time; before
  each batch it waits while a request embeds. So a request waits for at most
  one merge and the work only ever uses idle CPU on a busy machine.
* A job starts :data:`START_DELAY_S` after it was queued, so the read that
  queued it is answered first.
* ``SPARSEFS_DENSE_WARMUP=0`` turns it off; :meth:`DenseWarmer.close` stops it
  between batches (and at interpreter exit, before readers.retrieval.dense releases its
  sessions). Vectors land in the parsed artifact; when an artifact is done,
  ``on_warmed`` (the parsed store's save of what grew) keeps them across
  remounts instead of waiting for the unmount.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable

import readers.retrieval.dense  # noqa: F401 - registers its atexit release first, so _close_all runs before it
from readers.base import Parsed
from readers.retrieval.methods import warm_dense

_LOG = logging.getLogger(__name__)
START_DELAY_S = 0.5
SLICE_UNITS = 256
MAX_QUEUED = 8
NICE = 19
ENV = "SPARSEFS_DENSE_WARMUP"


WarmFunction = Callable[[Parsed, Callable[[], bool], int], int]
"""(parsed, stop, at most this many new units) -> units added: readers.retrieval.methods.warm_dense."""

_LIVE: weakref.WeakSet[DenseWarmer] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    """Stop every warm-up between batches before readers.retrieval.dense releases its sessions at exit
    (atexit runs this first: this module registers after readers.retrieval.dense, and atexit is LIFO)."""
    for warmer in list(_LIVE):
        warmer.close(timeout=10.0)


def enabled() -> bool:
    return os.environ.get(ENV, "1").strip().lower() not in {"0", "no", "off", "false"}


class DenseWarmer:
    """Embeds queued artifacts' units on one background thread."""

    def __init__(
        self, warm: WarmFunction = warm_dense, on_warmed: Callable[[Parsed], None] | None = None
    ) -> None:
        self._warm = warm
        self._on_warmed = on_warmed
        self._jobs: queue.Queue[tuple[float, weakref.ref[Parsed]]] = queue.Queue(MAX_QUEUED)
        self._seen: dict[int, weakref.ref[Parsed]] = {}  # by id: Parsed is a dataclass, not hashable
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.done = 0  # artifacts warmed
        _LIVE.add(self)

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

    def close(self, timeout: float = 10.0) -> None:
        """Stop between batches and wait for the batch in flight (bounded: BATCH sentences)."""
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
            self._warm_one(ref)

    def _warm_one(self, ref: weakref.ref[Parsed]) -> None:
        started, added = time.monotonic(), 0
        while not self._stop.is_set():
            parsed = ref()  # a strong reference for one slice only
            if parsed is None:
                return
            try:
                more = self._warm(parsed, self._stop.is_set, SLICE_UNITS)
            except Exception:  # noqa: BLE001 - a warm-up failure only leaves reads as they were
                _LOG.exception("dense warm-up failed")
                return
            added += more
            if not more:
                self._finished(parsed, added, started)
                return
            del parsed

    def _finished(self, parsed: Parsed, added: int, started: float) -> None:
        self.done += 1
        _LOG.info("dense warm-up: %d units in %.1f s", added, time.monotonic() - started)
        if added and self._on_warmed is not None:
            try:
                self._on_warmed(parsed)
            except Exception:  # noqa: BLE001 - saving is a cache's concern; the vectors stay in memory
                _LOG.exception("saving a warmed artifact failed")


def _lower_priority() -> None:
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)  # Linux: per thread
