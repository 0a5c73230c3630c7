"""The shared tier under the parsed store: parses fetched from, and given to, a store other hosts share.

A host names an artifact by its *content name*, BLAKE2b-256 of the bytes it
holds (:func:`content_name`), plus the Reader key and the Reader code version;
it never lists the store. The parts (``sparsefs.store.blob``) are written once
and checked (header, xxh3-128 of the body) on every load.

The store never makes a read fail or hang:

* **Bounded wait.** A fetch runs on its own daemon thread; the read waits at most
  the URL's ``timeout`` (default 2 s), then parses locally (``slow``) and the
  thread is left to finish or time out on its socket. At most
  :data:`MAX_IN_FLIGHT` fetches are outstanding; a read beyond them waits for a
  slot within the same bound.
* **Down means skip.** An unreachable or slow store is not asked again for a
  backoff (5 s, doubling to 60 s); reads meanwhile parse locally (``skipped``).
* **Full or refused** writes stop uploads for a while (the store is read still).
* **Corrupt or version-skewed** parts read as a miss; the parts are discarded
  (so the next upload can replace them) and the read parses locally.

Each of these is counted (:meth:`SharedTier.snapshot`, ``stats.json`` →
``shared_cache``) and logged once per process. Uploads happen on one background
thread from a bounded queue (a full queue drops the offer: ``upload_dropped``),
so a slow store never slows the local store's writer; ``sparsefs index`` uploads
synchronously instead (:meth:`SharedTier.publish`).
"""

from __future__ import annotations

import hashlib
import logging
import queue
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from readers.base import Parsed
from sparsefs.store import blob
from sparsefs.store.engines import CacheURL, Engine, classify, open_engine, parse_url

log = logging.getLogger("sparsefs.store.shared")

MAX_IN_FLIGHT = 4
BACKOFF_S = (5.0, 60.0)  # first and longest pause after the store was unreachable or slow
WRITE_PAUSE_S = {"full": 60.0, "refused": 300.0}
QUEUE_SIZE = 16
_KNOWN = 4096
FAILURES = ("unreachable", "slow", "full", "refused", "corrupt", "skewed", "errors")
COUNTERS = ("hits", "misses", "fetched_bytes", "uploaded_parts", "uploaded_bytes", "upload_dropped", "skipped",
            *FAILURES)


def content_name(data: bytes) -> str:
    """BLAKE2b-256 of the artifact's bytes: the name a host gives the store, which only the bytes produce."""
    return hashlib.blake2b(data, digest_size=32).hexdigest()


def open_shared(url: str) -> SharedTier:
    """The tier for ``--cache URL`` (nothing is contacted yet); EngineUnavailable when it cannot be built."""
    config = parse_url(url)
    return SharedTier(open_engine(config), config)


class Paused(Exception):
    """An upload not tried: the store is down (backoff), full or refusing writes. ``sparsefs_kind`` names it."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"not tried: the shared cache was {kind} (down, full or refusing)")
        self.sparsefs_kind = kind


@dataclass
class _Fetch:
    """One fetch's outcome, filled by its thread."""

    done: threading.Event = field(default_factory=threading.Event)
    ids: list[str] = field(default_factory=list)
    parts: dict[str, bytes] = field(default_factory=dict)
    error: BaseException | None = None


Job = tuple[str, blob.Owner, Any]  # ("offer", owner, parsed) or ("discard", owner, [ids])


class SharedTier:
    """Fetch with a bounded wait, upload in the background, count and log every way the store can fail."""

    def __init__(self, engine: Engine, config: CacheURL) -> None:
        self.engine = engine
        self.config = config
        self.counts: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self._lock = threading.Lock()
        self._logged: set[str] = set()
        self._known: OrderedDict[blob.Owner, set[str]] = OrderedDict()  # part ids the store is known to hold
        self._down_until = 0.0
        self._backoff = BACKOFF_S[0]
        self._no_writes_until = 0.0
        self._in_flight = threading.BoundedSemaphore(MAX_IN_FLIGHT)
        self._upload_locks = [threading.Lock() for _ in range(16)]  # one upload of an artifact at a time
        self._queue: queue.Queue[Job | None] = queue.Queue(QUEUE_SIZE)
        self._uploader = threading.Thread(target=self._run, name="sparsefs-shared", daemon=True)
        self._uploader.start()

    # reading ------------------------------------------------------------

    def fetch(self, owner: blob.Owner) -> Parsed | None:
        """The artifact from the store, or None (a miss, or any failure: counted, logged once)."""
        if time.monotonic() < self._down_until:
            self._count("skipped")
            return None
        deadline = time.monotonic() + self.config.timeout  # for a fetch slot and the answer together
        if not self._in_flight.acquire(timeout=self.config.timeout):
            self._fail("slow", f"{MAX_IN_FLIGHT} fetches outstanding for {self.config.timeout:g} s")
            return None
        job = _Fetch()
        threading.Thread(target=self._fetch_bytes, args=(owner, job), name="sparsefs-shared-fetch",
                         daemon=True).start()
        if not job.done.wait(max(0.0, deadline - time.monotonic())):
            self._fail("slow", f"no answer within {self.config.timeout:g} s")
            return None
        if job.error is not None:
            self._fail(classify(job.error), f"{type(job.error).__name__}: {job.error}")
            return None
        self._reachable(owner, job.ids)
        if not job.parts:
            self._count("misses")
            return None
        return self._assemble(owner, job.parts)

    def _fetch_bytes(self, owner: blob.Owner, job: _Fetch) -> None:
        """On the fetch thread: list, choose, get; the read that waits decodes (its CPU, not the bound's)."""
        try:
            job.ids = self.engine.part_ids(owner)
            wanted = blob.choose(job.ids)
            job.parts = self.engine.get(owner, wanted) if wanted else {}
        except Exception as err:  # noqa: BLE001 - any engine failure is a local parse, never the read's error
            job.error = err
        finally:
            self._in_flight.release()
            job.done.set()

    def _assemble(self, owner: blob.Owner, parts: dict[str, bytes]) -> Parsed | None:
        """The parse, or None for a bad part: counted, logged once, and discarded so an upload replaces it."""
        try:
            parsed = blob.assemble(parts, owner)
        except blob.PartError as err:
            self._fail("skewed" if err.skewed else "corrupt", str(err))
            with self._lock:
                self._known.get(owner, set()).discard(err.pid)
            if self.config.write:  # the next upload of this artifact replaces it
                self._submit(("discard", owner, [err.pid]))
            return None
        self._count("hits")
        self._count("fetched_bytes", sum(map(len, parts.values())))
        return parsed

    # writing ------------------------------------------------------------

    def offer(self, owner: blob.Owner, parsed: Parsed, spare: bool = False) -> None:
        """Upload what the store lacks of this parse, in the background (``parsed`` must not change after).
        ``spare``: only if the queue has room, and not counted as dropped when it has not (a parse loaded from
        the local store, which another host has most likely uploaded already)."""
        if not self.config.write:
            return
        with self._lock:
            known = self._known.get(owner)
        if known is not None and set(blob.wanted_ids(parsed)) <= known:
            return
        self._submit(("offer", owner, parsed), count_drop=not spare)

    def publish(self, owner: blob.Owner, parsed: Parsed) -> int:
        """Upload now (``sparsefs index``): how many parts were new; raises what the engine raised, counted, or
        Paused while the store is down, full or refusing (no upload is tried then)."""
        if not self.config.write:
            return 0
        now = time.monotonic()
        if now < self._down_until or now < self._no_writes_until:
            self._count("skipped")
            raise Paused("skipped")
        try:
            return self._upload(owner, parsed)
        except Exception as err:
            self._fail(classify(err), f"{type(err).__name__}: {err}")
            raise

    def _submit(self, job: Job, count_drop: bool = True) -> None:
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            if count_drop:
                self._count("upload_dropped")

    def _run(self) -> None:
        """The uploader thread: offers and discards in order, none while the store is down, full or refusing."""
        while (job := self._queue.get()) is not None:
            action, owner, payload = job
            if time.monotonic() < max(self._down_until, self._no_writes_until):
                continue  # down, full or refused: offers meanwhile are dropped, a later one retries
            try:
                if action == "offer":
                    self._upload(owner, payload)
                else:
                    self.engine.discard(owner, payload)
            except Exception as err:  # noqa: BLE001 - the uploader outlives any failure
                self._fail(classify(err), f"{type(err).__name__}: {err}")

    def _upload(self, owner: blob.Owner, parsed: Parsed) -> int:
        """Put the parts the store lacks, data first and the view last (a visible view has its parts); one upload
        of an artifact at a time, so a background offer and an index's publish never send a part twice."""
        with self._upload_locks[hash(owner) % len(self._upload_locks)]:
            return self._upload_locked(owner, parsed)

    def _upload_locked(self, owner: blob.Owner, parsed: Parsed) -> int:
        """Under the artifact's upload lock: list once if unknown, then put only the missing parts."""
        with self._lock:
            known = self._known.get(owner)
        if known is None:
            known = set(self.engine.part_ids(owner))
            self._reachable(owner, known)
        wanted = blob.wanted_ids(parsed)
        missing = [pid for pid in wanted if pid not in known]
        if not missing:
            return 0
        required = [key for key in wanted.values() if key is not None]
        order = sorted(missing, key=lambda pid: pid == blob.VIEW)
        blobs = [(pid, blob.encode_part(owner, parsed, wanted[pid], required)) for pid in order]
        new = self.engine.put(owner, blobs)
        self._reachable(owner, known | set(missing))
        self._count("uploaded_parts", new)
        self._count("uploaded_bytes", sum(len(data) for _, data in blobs))
        return new

    # health -------------------------------------------------------------

    def _reachable(self, owner: blob.Owner, ids: set[str] | list[str]) -> None:
        """The store answered: remember what it holds for ``owner``, and end any backoff."""
        with self._lock:
            self._known[owner] = set(ids)
            self._known.move_to_end(owner)
            while len(self._known) > _KNOWN:
                self._known.popitem(last=False)
            self._down_until, self._backoff = 0.0, BACKOFF_S[0]

    def _fail(self, kind: str, detail: str) -> None:
        """Count a failure and log its kind once; unreachable or slow starts (or lengthens) the backoff, full or
        refused pauses uploads."""
        kind = kind if kind in FAILURES else "errors"
        now = time.monotonic()
        with self._lock:
            if kind in ("unreachable", "slow"):
                self._down_until = now + self._backoff
                self._backoff = min(self._backoff * 2, BACKOFF_S[1])
            elif kind in WRITE_PAUSE_S:
                self._no_writes_until = now + WRITE_PAUSE_S[kind]
            first = kind not in self._logged
            self._logged.add(kind)
            self.counts[kind] += 1
        if first:
            log.warning("shared cache %s: %s (%s); reads parse locally meanwhile (counted in stats.json "
                        "shared_cache.%s, logged once)", self.config.shown, _MEANING[kind], detail[:300], kind)

    def _count(self, name: str, amount: int = 1) -> None:
        with self._lock:
            self.counts[name] += amount

    def snapshot(self) -> dict[str, Any]:
        """What stats.json shows: the store, whether it is being asked now, and every counter."""
        with self._lock:
            counts = dict(self.counts)
            down = max(0.0, self._down_until - time.monotonic())
        state = f"down, asked again in {down:.0f} s" if down else "up"
        return {"url": self.config.shown, "engine": self.config.engine, "state": state,
                "write": self.config.write, "timeout_s": self.config.timeout, **counts}

    def close(self, timeout: float = 10.0) -> None:
        """Finish queued uploads within ``timeout`` (what is left is lost: the store is a cache), then close."""
        deadline = time.monotonic() + timeout
        try:
            self._queue.put(None, timeout=max(0.01, timeout))
        except queue.Full:
            log.warning("shared cache %s: uploads still queued at close are dropped", self.config.shown)
        self._uploader.join(max(0.01, deadline - time.monotonic()))
        if not self._uploader.is_alive():
            self.engine.close()


_MEANING = {
    "unreachable": "store unreachable",
    "slow": "store too slow",
    "full": "store full, uploads paused",
    "refused": "store refused a request (permissions, read-only, authentication), uploads paused",
    "corrupt": "a corrupt part was fetched and discarded",
    "skewed": "a part of another format or code version was fetched and discarded",
    "errors": "unexpected store error",
}
