"""On-disk fingerprints and parsed artifacts, so a remount starts warm.

Layout under ``state_dir/index/``::

    index.sqlite                  fingerprints + the parsed-store ledger (WAL)
    parsed/<code>/<fp[:2]>/<fp>.<reader>-<ext>/  one parse (other code versions are removed at open):
        meta.json, data.json      format + code version, sizes and xxh3 of every file; the encoded data tree
        full_view.txt, a<i>.npy, b<i>.bin   the full view, numpy arrays, byte blobs (no pickle)
    parsed/tmp/                   entries being written (removed at open after an hour)

Fingerprints are keyed by (dev, ino, size, mtime_ns, ctime_ns): ctime cannot be
set by a user, so a file rewritten while unmounted and given its old mtime
back (``touch -d``, ``rsync -t``) still misses. Racy-clean rule (as git's
index): a fingerprint computed while the file's mtime is less than
:data:`RACY_NS` older than the hash is never persisted, because a same-size
write in the same mtime tick would leave the key unchanged; it stays in
memory only, where writes through the mount and watcher events mark it dirty.

Parsed artifacts are written by one background thread from a bounded queue
(a full queue drops the write; so does a lost race), atomically: into a temp
dir, then renamed (no fsync: a torn entry after a crash fails the checks
below and is a miss). On load every file is checked by size and xxh3; anything
off (a missing file, garbled JSON, another format, any error while decoding)
reads as a miss and the entry is removed. The code version hashes the sources
of ``readers/`` (and of registered Readers outside it), the codec and the
versions of the distributions the registered Readers declare, so a Reader
change or an upgrade starts cold instead of trusting an old layout.

The store is bounded (bytes, LRU by last use; entries unused for the retention
age, sparsefs.store.retention, are dropped at open and daily), keeps parses that took at least
``min_parse_seconds`` and re-saves one whose Reader built indexes lazily since
(a table's BM25 index): when next used, or at close (dense vectors: at close, or when a
background warm-up finished, :meth:`ParsedStore.save_grown`).

With a shared tier (``sparsefs.store.shared``, ``--cache URL``) the store is its
first tier: a local miss asks the shared store by the content name of the bytes
the caller holds (bounded wait; any failure is a local parse), a hit is written
here too, and every entry written here is offered to the shared store.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import queue
import re
import shutil
import sqlite3
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from readers.base import Parsed
from sparsefs.store import serial
from sparsefs.store.blob import Owner, value_size
from sparsefs.store.entry import read_entry, write_entry
from sparsefs.store.ledger import connect
from sparsefs.store.retention import DAY_S, retain_days
from sparsefs.store.shared import SharedTier, content_name
from sparsefs.store.version import code_version

log = logging.getLogger("sparsefs.store")

RACY_NS = 2_000_000_000
SHARE_GROWTH_S = 2.0  # how often the writer looks for dense vectors grown since they were last shared
SHARE_GROWTH_FACTOR = 4  # ... and shares them again once they have grown this many times over (or at a save)
SHARED_MIN_BYTES = 64 * 1024  # smaller artifacts parse in a few ms: a network round trip would cost more
TRANSIENT_KEYS = frozenset({"columns", "floats"})  # table_ops caches, cheap to rebuild
_DAY_NS = 86_400 * 1_000_000_000
CLOSE_TIMEOUT_S = 10.0  # an unmount must finish well inside a service's stop timeout
_FINGERPRINT = re.compile(r"[0-9a-f]{32}")
_READER_KEY = re.compile(r"[a-z0-9_]{1,32}(?:-[a-z0-9-]{1,12})?")
Key = tuple[str, str]
FullKey = tuple[int, int, int, int, int]


@dataclass(frozen=True)
class StoreConfig:
    """Bounds of the store (defaults: 2 GiB, 200k fingerprints, 30 days; entries unused for ``entry_days``,
    default $SPARSEFS_RETAIN_DAYS or 30 (0: kept), are dropped at open and daily: sparsefs.store.retention)."""

    max_bytes: int = 2 << 30
    entry_days: float = field(default_factory=retain_days)
    min_parse_seconds: float = 0.01  # a small entry loads in 1-3 ms
    max_fingerprints: int = 200_000
    fingerprint_days: int = 30
    queue_size: int = 32


def full_key(st: os.stat_result) -> FullKey:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def is_racy(st: os.stat_result, hashed_ns: int) -> bool:
    """Could a same-size write land in the same mtime tick after this hash?"""
    return st.st_mtime_ns >= hashed_ns - RACY_NS or st.st_ctime_ns >= hashed_ns - RACY_NS


def open_store(state_dir: Path, config: StoreConfig | None = None, shared: SharedTier | None = None) -> ParsedStore:
    """The store under ``state_dir/index`` (created if missing), writer thread started; over ``shared`` if given."""
    return ParsedStore(Path(state_dir) / "index", config or StoreConfig(), shared)


class ParsedStore:
    """Fingerprint table and parsed-artifact store; thread-safe."""

    def __init__(self, root: Path, config: StoreConfig, shared: SharedTier | None = None) -> None:
        self.root = root
        self.config = config
        self.shared = shared
        self._names: OrderedDict[Key, str] = OrderedDict()  # parse key -> content name in the shared tier
        self._shared_rows: dict[Key, int] = {}  # parse key -> dense rows last offered to the shared tier
        self._growth_checked = 0.0
        self.parsed_dir = root / "parsed"
        (self.parsed_dir / "tmp").mkdir(parents=True, exist_ok=True)
        self.code = code_version()
        self.entries = self.parsed_dir / self.code  # another code version's entries are never even looked at
        self._db = connect(root / "index.sqlite")
        self._db_lock = threading.Lock()
        self._pending_fps: dict[FullKey, str] = {}
        self._pending_uses: set[Key] = set()
        self._saved: dict[Key, tuple[weakref.ref[Parsed], tuple[Any, ...]]] = {}
        self._lock = threading.Lock()
        self._queue: queue.Queue[tuple[Key, Parsed] | None] = queue.Queue(config.queue_size)
        self.loads = self.saves = self.dropped = self.corrupt = self.failures = 0
        self._failing: set[str] = set()  # steps failing now (said once)
        self._writer = threading.Thread(target=self._run, name="sparsefs-store", daemon=True)
        self._writer.start()

    # fingerprints -------------------------------------------------------

    def fingerprint_get(self, st: os.stat_result) -> str | None:
        """The persisted fingerprint of this exact file version, if any."""
        return self.fingerprint_of(full_key(st))

    def fingerprint_of(self, key: FullKey) -> str | None:
        """The same, by (dev, ino, size, mtime_ns, ctime_ns)."""
        with self._lock:
            pending = self._pending_fps.get(key)
        if pending is not None:
            return pending
        try:
            with self._db_lock:
                row = self._db.execute(
                    "SELECT fingerprint FROM fingerprints WHERE dev=? AND ino=? AND size=? AND mtime_ns=? "
                    "AND ctime_ns=?", key).fetchone()
        except sqlite3.Error as err:
            log.warning("store: fingerprint lookup failed (%s); hashing instead", err)
            return None
        return str(row[0]) if row and _FINGERPRINT.fullmatch(str(row[0])) else None

    def fingerprint_put(self, st: os.stat_result, fingerprint: str, hashed_ns: int) -> bool:
        """Remember a fingerprint (batched); refused (False) when the stat key is racy."""
        if is_racy(st, hashed_ns):
            return False
        with self._lock:
            if len(self._pending_fps) < 10_000:
                self._pending_fps[full_key(st)] = fingerprint
        return True

    # parsed artifacts ---------------------------------------------------

    def load(self, fingerprint: str, reader: str, content: bytes | None = None) -> Parsed | None:
        """The stored parse, or None (a damaged entry is removed and reads as a miss). With ``content`` (the
        artifact's bytes) and a shared tier, a local miss asks the shared store and a local hit is offered to it."""
        local = self._load_local(fingerprint, reader)
        if self.shared is None or content is None or len(content) < SHARED_MIN_BYTES:
            return local
        key = (fingerprint, reader)
        owner = Owner(self.code, self._name(key, content), reader)
        if local is not None:
            self.shared.offer(owner, Parsed(local.full_view, local.kind, _snapshot(local.data)), spare=True)
            return local
        fetched = self.shared.fetch(owner)
        if fetched is not None:
            self.loads += 1
            self._enqueue(key, fetched)  # the local tier keeps it; its offer finds the store holding it
            with self._lock:
                self._pending_uses.add(key)
        return fetched

    def _name(self, key: Key, content: bytes) -> str:
        """The content name of ``key``'s bytes, remembered so later writes of it can be offered."""
        with self._lock:
            name = self._names.get(key)
        if name is None:
            name = content_name(content)
            with self._lock:
                self._names[key] = name
                while len(self._names) > 4096:
                    self._names.popitem(last=False)
        return name

    def _load_local(self, fingerprint: str, reader: str) -> Parsed | None:
        """The local tier: the entry on disk, every file checked; a damaged one is removed and reads as a miss."""
        path = self._path(fingerprint, reader)
        if not path.is_dir():
            return None
        try:
            parsed = read_entry(path, self.code, fingerprint, reader)
        except Exception as err:  # noqa: BLE001 - whatever is on disk, a damaged entry is a miss
            log.debug("store: dropping %s: %r", path.name, err)
            self.corrupt += 1
            self._remove((fingerprint, reader))
            return None
        self.loads += 1
        self._track((fingerprint, reader), parsed)
        with self._lock:
            self._pending_uses.add((fingerprint, reader))
        return parsed

    def contains(self, fingerprint: str) -> bool:
        """Is some parse of this fingerprint stored for this code version? (one directory listing)"""
        try:
            return any(p.name.startswith(fingerprint + ".") for p in (self.entries / fingerprint[:2]).iterdir())
        except OSError:
            return False

    def save(self, fingerprint: str, reader: str, parsed: Parsed, parse_seconds: float,
             content: bytes | None = None) -> None:
        """Queue a write when the parse was costly enough; always track later growth. With ``content`` (the
        artifact's bytes) and a shared tier, each write of this parse is offered to the shared store too."""
        key = (fingerprint, reader)
        shared = self.shared is not None and content is not None and len(content) >= SHARED_MIN_BYTES
        if shared and content is not None and parse_seconds >= self.config.min_parse_seconds:
            self._name(key, content)  # named: stored, so offered (and published) like the local entry
        if parse_seconds >= self.config.min_parse_seconds:
            self._enqueue(key, parsed)
        else:
            self._track(key, parsed)

    def note_use(self, fingerprint: str, reader: str, parsed: Parsed) -> None:
        """A warm hit: re-save if the Reader built lazy indexes since the last save."""
        key = (fingerprint, reader)
        with self._lock:
            known = self._saved.get(key)
        if known is not None and _indexes_only(known[1]) != _indexes_only(_signature(parsed)):
            self._enqueue(key, parsed)

    def save_grown(self, parsed: Parsed) -> None:
        """Re-save a tracked parse whose caches grew (dense vectors after a warm-up) before close."""
        with self._lock:
            found = [(key, sig) for key, (ref, sig) in self._saved.items() if ref() is parsed]
        for key, signature in found:
            if signature != _signature(parsed):
                self._enqueue(key, parsed)

    def publish(self, fingerprint: str, reader: str, parsed: Parsed) -> int | None:
        """Upload this parse's missing parts to the shared tier now (``sparsefs index``): how many were new; None
        when it is not a parse the stores keep (small, or cheap to redo) or there is no shared tier."""
        name = self._names.get((fingerprint, reader))
        if self.shared is None or name is None:
            return None
        return self.shared.publish(Owner(self.code, name, reader), Parsed(parsed.full_view, parsed.kind,
                                                                          _snapshot(parsed.data)))

    def close(self) -> None:
        """Save what grew since, flush pending writes, stop the writer, close the database (then the shared
        tier's uploads, within the same bound)."""
        if not self._writer.is_alive():
            return
        deadline = time.monotonic() + CLOSE_TIMEOUT_S  # all of close stays within this
        for key, (ref, signature) in list(self._saved.items()):
            parsed = ref()
            if parsed is not None and signature != _signature(parsed):
                self._enqueue(key, parsed, wait=max(0.0, deadline - time.monotonic()))
        try:
            self._queue.put(None, timeout=max(0.01, deadline - time.monotonic()))
        except queue.Full:
            log.warning("store: writer did not drain its queue; pending writes are lost")
        self._writer.join(timeout=max(0.01, deadline - time.monotonic()))
        if self.shared is not None:
            self.shared.close(max(0.01, deadline - time.monotonic()))
        if self._writer.is_alive():
            log.warning("store: writer still busy at unmount; its last entries are lost (a cache only)")
            return
        with self._db_lock:
            self._db.close()

    # internals ----------------------------------------------------------

    def _path(self, fingerprint: str, reader: str) -> Path:
        """The entry directory; a key that is not a fingerprint and a reader key never names a path."""
        if not (_FINGERPRINT.fullmatch(fingerprint) and _READER_KEY.fullmatch(reader)):
            raise ValueError(f"not a store key: {fingerprint!r}, {reader!r}")
        return self.entries / fingerprint[:2] / f"{fingerprint}.{reader}"

    def _track(self, key: Key, parsed: Parsed) -> None:
        with self._lock:
            self._saved.pop(key, None)
            self._saved[key] = (weakref.ref(parsed), _signature(parsed))
            while len(self._saved) > 4096:
                self._saved.pop(next(iter(self._saved)))

    def _enqueue(self, key: Key, parsed: Parsed, wait: float | None = None) -> None:
        self._track(key, parsed)
        snapshot = Parsed(parsed.full_view, parsed.kind, _snapshot(parsed.data))
        try:
            self._queue.put((key, snapshot), block=wait is not None, timeout=wait)
        except queue.Full:
            self.dropped += 1

    def _run(self) -> None:
        self._guarded(self._maintain)
        expired_at = time.monotonic()
        while True:
            if time.monotonic() - expired_at > DAY_S:  # a mount that runs for months keeps the bound too
                expired_at = time.monotonic()
                self._guarded(self._expire)
            try:
                job = self._queue.get(timeout=1.0)
            except queue.Empty:
                job = ()  # type: ignore[assignment]
            self._guarded(self._flush)  # last-use times first: eviction after a write must see them
            if self.shared is not None and time.monotonic() - self._growth_checked >= SHARE_GROWTH_S:
                self._growth_checked = time.monotonic()
                self._guarded(self._share_growth)
            if job:
                self._guarded(functools.partial(self._write, *job))
            if job is None:
                return

    def _share_growth(self) -> None:
        """Dense vectors a read embedded reach the shared tier while the mount runs (the local entry waits for the
        unmount or the end of the warm-up: re-writing it whole each time would cost more than it saves), each time
        they have grown SHARE_GROWTH_FACTOR-fold, so a second host asking the same question embeds nothing and the
        store holds at most ~1.3x the final vectors."""
        assert self.shared is not None
        with self._lock:
            live = [(key, ref(), self._names[key]) for key, (ref, _) in self._saved.items() if key in self._names]
            if len(self._shared_rows) > 2 * len(self._names) + 64:
                self._shared_rows = {k: v for k, v in self._shared_rows.items() if k in self._names}
        for key, parsed, name in live:
            if parsed is None:
                continue
            data = dict(parsed.data)  # a read may add a key meanwhile
            rows = sum(max(0, value_size(v)) for k, v in data.items() if k.startswith("dense:"))
            if rows > 0 and rows >= SHARE_GROWTH_FACTOR * self._shared_rows.get(key, 0):
                self._shared_rows[key] = rows
                self.shared.offer(Owner(self.code, name, key[1]), Parsed(parsed.full_view, parsed.kind,
                                                                       _snapshot(data)))

    def _guarded(self, step: Callable[[], None]) -> None:
        """The writer thread outlives any failure (disk full, a locked or damaged database)."""
        name = str(getattr(step, "__name__", None) or getattr(getattr(step, "func", None), "__name__", "a step"))
        try:
            step()
        except (sqlite3.Error, OSError) as err:
            self.failures += 1  # stats.json's not_saved (a full state disk: the mount serves from memory)
            if name not in self._failing:  # said once per failing step, again after it worked
                self._failing.add(name)
                log.warning("store: %s failed (%s); continuing without it", name, err)
            return
        self._failing.discard(name)

    def _write(self, key: Key, parsed: Parsed) -> None:
        try:
            size = write_entry(self._path(*key), self.parsed_dir / "tmp", parsed, self.code, key)
        except (serial.Unserializable, RecursionError, RuntimeError) as err:
            log.debug("store: not persisting %s (%s)", key, err)
            return
        except OSError:
            raise  # a full or read-only state disk: counted and said by _guarded
        except Exception as err:  # noqa: BLE001 - the writer thread must outlive any one write
            log.debug("store: write of %s failed: %r", key, err)
            return
        self.saves += 1
        with self._db_lock, self._db:
            self._db.execute("INSERT OR REPLACE INTO parsed VALUES (?, ?, ?, ?)", (*key, size, time.time_ns()))
        self._evict()
        name = self._names.get(key)
        if self.shared is not None and name is not None:
            self.shared.offer(Owner(self.code, name, key[1]), parsed)  # a snapshot: nothing changes it after

    def _flush(self) -> None:
        with self._lock:
            fps, self._pending_fps = self._pending_fps, {}
            uses, self._pending_uses = self._pending_uses, set()
        if not fps and not uses:
            return
        now = time.time_ns()
        with self._db_lock, self._db:
            self._db.executemany("INSERT OR REPLACE INTO fingerprints VALUES (?, ?, ?, ?, ?, ?, ?)",
                                 [(*k, fp, now) for k, fp in fps.items()])
            self._db.executemany("UPDATE parsed SET last_used=? WHERE fingerprint=? AND reader=?",
                                 [(now, *k) for k in uses])

    def _evict(self) -> None:
        """Drop least recently used entries until the store is within 90% of its bound."""
        with self._db_lock:
            total = self._db.execute("SELECT COALESCE(SUM(bytes), 0) FROM parsed").fetchone()[0]
            if total <= self.config.max_bytes:
                return
            rows = self._db.execute("SELECT fingerprint, reader, bytes FROM parsed ORDER BY last_used").fetchall()
        for fingerprint, reader, size in rows:
            if total <= self.config.max_bytes * 0.9:
                break
            self._remove((fingerprint, reader))
            total -= size

    def _expire(self) -> None:
        """Drop entries not used for ``entry_days`` (the parsed text of a document long unread goes)."""
        if self.config.entry_days <= 0:
            return
        cutoff = time.time_ns() - int(self.config.entry_days * _DAY_NS)
        with self._db_lock:
            rows = self._db.execute("SELECT fingerprint, reader FROM parsed WHERE last_used < ?", (cutoff,)).fetchall()
        for row in rows:
            self._remove(tuple(row))

    def _drop_other_code_versions(self) -> None:
        """Entries of other Reader code are dead weight: remove them at open."""
        self.entries.mkdir(parents=True, exist_ok=True)
        for child in self.parsed_dir.iterdir():
            if child.name not in ("tmp", self.code) and child.is_dir():
                shutil.rmtree(child, ignore_errors=True)

    def _remove(self, key: Key) -> None:
        with contextlib.suppress(ValueError):  # a forged ledger row: only the row goes
            shutil.rmtree(self._path(*key), ignore_errors=True)
        with self._lock:
            self._saved.pop(key, None)
        with self._db_lock, self._db:
            self._db.execute("DELETE FROM parsed WHERE fingerprint=? AND reader=?", key)

    def _maintain(self) -> None:
        """At open: clear temp dirs, forget ledger rows without a directory, prune old fingerprints."""
        stale = time.time() - 3600  # not younger ones: another process may be writing them
        for leftover in (self.parsed_dir / "tmp").iterdir():
            if _mtime(leftover) < stale:
                shutil.rmtree(leftover, ignore_errors=True)
        cutoff = time.time_ns() - self.config.fingerprint_days * _DAY_NS
        self._drop_other_code_versions()
        self._expire()
        with self._db_lock:
            rows = self._db.execute("SELECT fingerprint, reader FROM parsed").fetchall()
        gone = [row for row in rows if not _is_entry(self, *row)]  # outside the lock: lookups go on meanwhile
        with self._db_lock, self._db:
            self._db.executemany("DELETE FROM parsed WHERE fingerprint=? AND reader=?", gone)
            self._db.execute("DELETE FROM fingerprints WHERE seen < ?", (cutoff,))
            self._db.execute(  # cap: keep the most recently seen rows
                "DELETE FROM fingerprints WHERE seen < (SELECT seen FROM fingerprints ORDER BY seen DESC "
                "LIMIT 1 OFFSET ?)", (self.config.max_fingerprints,))


def _is_entry(store: ParsedStore, fingerprint: str, reader: str) -> bool:
    try:
        return store._path(fingerprint, reader).is_dir()
    except ValueError:
        return False


def _mtime(path: Path) -> float:
    return path.stat().st_mtime if path.exists() else 0.0


def _indexes_only(signature: tuple[Any, ...]) -> tuple[Any, ...]:
    """Without dense-vector caches: they grow with every hybrid read; saved at close or with an index."""
    return tuple(item for item in signature if not str(item[0]).startswith("dense:"))


def _signature(parsed: Parsed) -> tuple[Any, ...]:
    """Cheap change detector for lazily added indexes: keys and the sizes of dict values."""
    return tuple(sorted((k, value_size(v)) for k, v in parsed.data.items() if k not in TRANSIENT_KEYS))


def _snapshot(data: dict[str, Any]) -> dict[str, Any]:
    """Top-level copy (dict values copied too: Readers fill cache dicts in place)."""
    return {k: dict(v) if type(v) is dict else v for k, v in list(data.items()) if k not in TRANSIENT_KEYS}
