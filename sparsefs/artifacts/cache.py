"""Fingerprints and parsed artifacts, cached per artifact version.

The fingerprint is xxh3-128 of the content, remembered by (device, inode, size, mtime_ns) so an unchanged file
is never hashed twice. Parsed artifacts (full view plus Reader indexes) are cached by fingerprint in an LRU
bounded by their estimated footprint within the daemon's memory cap (``sparsefs.artifacts.memory``).

With a :class:`~sparsefs.store.parsed.ParsedStore` both survive a remount (and an eviction): a fingerprint
missing from memory is looked up on disk by the full stat key (with ctime) before hashing, and a parse
missing from memory is loaded from the store before parsing (``disk_loads`` counts those, ``parses`` the real
parses). A fingerprint taken while the file was racy (mtime within 2 s of the hash) is kept in memory only
and re-verified once the file has aged, so it can be persisted safely. Without a store: memory only.
"""

from __future__ import annotations

import errno
import math
import os
import stat
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

import xxhash

from readers import registry
from readers.base import ArtifactTooLarge, Parsed, Reader, ReaderError, UnsupportedArtifact
from readers.folder import FolderReader
from readers.kit.source import MemorySource
from sparsefs.artifacts import memory
from sparsefs.artifacts.bounded import BoundExceeded, Bounds, run_bounded
from sparsefs.source.collection import DirectoryCollection, Listing, walk
from sparsefs.source.rootfs import SourceRoot
from sparsefs.store.parsed import ParsedStore, is_racy

StatKey = tuple[int, int, int, int, int]  # dev, ino, size, mtime_ns, ctime_ns: ctime too, so
# new content given its old size and mtime back (cp -p, touch -d) is never taken for the old version
MAX_ARTIFACT_BYTES = 64 * 1024 * 1024
_HEAD_BYTES = 8192
_FOLDER = FolderReader()
_MAX_OVERRAN = 256
_TRANSIENT_OVERRUN_S = 60.0  # a timeout or a death may be the machine's load: parse again after this


def stat_key(st: os.stat_result) -> StatKey:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def variant(name: str) -> str:
    """What of a file's name a Reader's choice or parse depends on: its extension (a.py and a.rb
    with the same bytes are different artifacts), safe as a path component."""
    ext = os.path.splitext(name)[1].lower().lstrip(".")
    return "".join(c for c in ext if c.isalnum())[:12] or "-"


@dataclass(frozen=True)
class Artifact:
    """One version of one file, parsed by its Reader."""

    rel: str
    fingerprint: str
    key: StatKey
    reader: Reader
    parsed: Parsed

    @property
    def short_fingerprint(self) -> str:
        return self.fingerprint[:12]

    @property
    def parse_key(self) -> tuple[str, str]:
        """(fingerprint, "<reader>-<extension>"): this file version's key in the parsed store."""
        return _parse_key(self.fingerprint, self.reader, self.rel)


class ArtifactCache:
    """Loads artifacts through the source root; thread-safe, bounded."""

    def __init__(
        self,
        root: SourceRoot,
        max_parsed_chars: int = 256 * 1024 * 1024,
        store: ParsedStore | None = None,
        bounds: Bounds | None = None,
        max_parsed_bytes: int | None = None,
    ) -> None:
        self.root = root
        self.max_parsed_bytes = max_parsed_bytes or memory.process_cap().parsed_bytes  # estimated footprint
        result_bytes = min(2 * max_parsed_chars, self.max_parsed_bytes // 2)  # a result becomes ~2x in objects
        self.bounds = bounds and replace(bounds, result_bytes=min(bounds.result_bytes, result_bytes))
        # None: parse in this process (tests, benchmarks); the daemon bounds every parse
        self.store = store
        self.max_parsed_chars = max_parsed_chars
        self._fingerprints: dict[StatKey, str] = {}
        self._parsed: OrderedDict[tuple[str, str], Parsed] = OrderedDict()
        self._parsed_chars = 0
        self._sizes = memory.Footprints()
        self.evictions = 0
        self._dirty: set[str] = set()
        self._hashed: set[str] = set()
        self._readers: dict[tuple[str, str], Reader] = {}  # (fingerprint, name variant) -> its Reader
        self._lock = threading.Lock()
        self._parse_locks: dict[tuple[str, str], tuple[threading.Lock, list[int]]] = {}  # key -> (lock, [users])
        self._racy: set[StatKey] = set()
        self._current: dict[str, tuple[tuple[str, str], int]] = {}  # path -> (parse key, ctime_ns) of its latest
        self._holders: Counter[tuple[str, str]] = Counter()  # parse key -> how many paths are that version
        self._overran: OrderedDict[tuple[str, str], tuple[BoundExceeded, float]] = OrderedDict()  # -> (err, until)
        self.parses = 0
        self.disk_loads = 0

    def load(self, rel: str) -> Artifact:
        """The parsed artifact; an unchanged, already parsed file is not even read."""
        self._hashed.add(rel)
        fd = open_confined(self.root, rel)
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                return self._load_folder(rel, st)
            _check_regular(st)
            key, fresh = stat_key(st), self._take_dirty(rel) or self._recheck(st)
            warm = None if fresh else self._warm(rel, key)
            if warm is not None:
                return warm
            data = _read_all(fd, st.st_size)
        finally:
            os.close(fd)
        return self._build(rel, st, data, fresh)

    def fingerprint(self, rel: str) -> str:
        """The content fingerprint of ``rel`` now; hashes only new or written files."""
        self._hashed.add(rel)
        fd = open_confined(self.root, rel)
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                return self._folder_version(rel, walk(self.root, rel))
            _check_regular(st)
            if not (self._take_dirty(rel) or self._recheck(st)):
                known = self._known(st)
                if known is not None:
                    return known
            data = _read_all(fd, st.st_size)
        finally:
            os.close(fd)
        return self._fingerprint(st, data, fresh=True)

    def _load_folder(self, rel: str, st: os.stat_result) -> Artifact:
        """A directory as a collection; cached only when every member was indexed.

        The version is taken after parsing (members parsed now have content
        fingerprints); a partial index gets a version of its own per indexed
        count, so its packs are never frozen and its episodes never outlive it.
        """
        listing = walk(self.root, rel)
        known = self._folder_version(rel, listing)
        with self._lock:
            cached = self._parsed.get((known, _FOLDER.name))
        if cached is not None:
            return Artifact(rel, known, stat_key(st), _FOLDER, cached)
        source = DirectoryCollection(rel, listing.members, listing.left_out, self._member, self._is_cached)
        parsed = _FOLDER.parse_collection(source)
        version = self._folder_version(rel, listing)  # members parsed just now have content fingerprints
        if parsed.data.get("complete"):
            self._remember((version, _FOLDER.name), parsed)
        else:
            version = xxhash.xxh3_128_hexdigest(f"{version} partial {len(parsed.full_view)}".encode())
        return Artifact(rel, version, stat_key(st), _FOLDER, parsed)

    def _folder_version(self, rel: str, listing: Listing) -> str:
        """xxh3-128 over each member's path and content fingerprint (else its stat key)."""
        digest = xxhash.xxh3_128()
        for member, key in zip(listing.members, listing.keys, strict=True):
            digest.update(
                f"{member.rel}\0{self._member_version(_join(rel, member.rel), key)}\n".encode(
                    "utf-8", "surrogateescape"
                )
            )
        digest.update(f"left-out {listing.left_out}".encode())
        return digest.hexdigest()

    def _member_version(self, rel: str, key: StatKey) -> str:
        if rel in self._dirty:
            try:
                return self.fingerprint(rel)  # written since it was hashed: hash it again now
            except (OSError, ReaderError):
                return "unreadable"
        with self._lock:
            known = self._fingerprints.get(key)
        if known is None and self.store is not None:
            known = self.store.fingerprint_of(key)  # what an earlier mount hashed: the same folder version
            if known is not None:
                with self._lock:
                    self._fingerprints[key] = known  # a folder is versioned on every lookup: ask SQLite once
        return known or "stat:" + ":".join(map(str, key))

    def _is_cached(self, rel: str) -> bool:
        """Would loading ``rel`` now cost no parse? (stat only; False when unsure)"""
        try:
            st = self.root.lstat(rel)
        except OSError:
            return False
        with self._lock:
            fingerprint = self._fingerprints.get(stat_key(st))
            reader = self._readers.get((fingerprint, variant(rel))) if fingerprint else None
            if rel in self._dirty:
                return False
            if fingerprint is not None and reader is not None and _parse_key(fingerprint, reader, rel) in self._parsed:
                return True
        if self.store is None or not stat.S_ISREG(st.st_mode):
            return False
        fingerprint = fingerprint or self.store.fingerprint_get(st)
        return fingerprint is not None and self.store.contains(fingerprint)

    def _member(self, rel: str) -> tuple[Reader, Parsed]:
        try:
            artifact = self.load(rel)
        except OSError as err:
            raise UnsupportedArtifact(f"cannot read: {err.strerror or err}", hint="check its permissions") from None
        return artifact.reader, artifact.parsed

    def _warm(self, rel: str, key: StatKey) -> Artifact | None:
        with self._lock:
            fingerprint = self._fingerprints.get(key)
            reader = self._readers.get((fingerprint, variant(rel))) if fingerprint else None
            if fingerprint is None or reader is None:
                return None
            cache_key = _parse_key(fingerprint, reader, rel)
            parsed = self._parsed.get(cache_key)
            if parsed is None:
                return None
            self._parsed.move_to_end(cache_key)
        if self.store is not None:
            self.store.note_use(*cache_key, parsed)
        self._remeasure(cache_key, parsed)
        self._make_room(len(parsed.full_view), parsed=True)
        return Artifact(rel, fingerprint, key, reader, parsed)

    def _build(self, rel: str, st: os.stat_result, data: bytes, fresh: bool) -> Artifact:
        key = stat_key(st)
        fingerprint = self._fingerprint(st, data, fresh)
        reader = registry.select(os.path.basename(rel), data[:_HEAD_BYTES])
        parsed = self._parse(fingerprint, reader, os.path.basename(rel), data)
        with self._lock:
            self._readers[(fingerprint, variant(rel))] = reader
            self._supersede(rel, _parse_key(fingerprint, reader, rel), key[4])
        return Artifact(rel, fingerprint, key, reader, parsed)

    def _supersede(self, rel: str, cache_key: tuple[str, str], ctime_ns: int) -> None:
        """With the lock held: ``rel`` is now this version, and the one it replaces leaves memory unless
        another path still is that version (the store keeps it for a revert). Without this, a file saved
        every few seconds kept every past parse until the character bound, gigabytes later. A load of an
        older version (by ctime) that finishes after a newer one's replaces nothing."""
        old, old_ctime = self._current.get(rel, (None, 0))
        if old == cache_key or (old is not None and ctime_ns < old_ctime):
            return
        self._current[rel] = (cache_key, ctime_ns)
        self._holders[cache_key] += 1
        if old is None:
            return
        self._holders[old] -= 1
        if self._holders[old] <= 0:
            del self._holders[old]
            dropped = self._parsed.pop(old, None)
            self._parsed_chars -= len(dropped.full_view) if dropped is not None else 0
            self._sizes.forget(old)

    def mark_dirty(self, rel: str) -> None:
        """``rel`` was written: rehash on next load even if (size, mtime) look equal.

        Only files hashed before can hold a stale fingerprint, so the set stays as
        small as the set of files ever read as artifacts (git writing thousands of
        objects through the mount adds nothing).
        """
        if rel in self._hashed and rel not in self._dirty:
            with self._lock:
                self._dirty.add(rel)
        if rel in self._current and not self.root.exists(rel):
            self._forget_path(rel)

    def _forget_path(self, rel: str) -> None:
        """``rel`` was removed or renamed away: it no longer holds its version (its parse stays in the LRU)."""
        with self._lock:
            old, _ = self._current.pop(rel, (None, 0))
            if old is not None:
                self._holders[old] -= 1
                if self._holders[old] <= 0:
                    del self._holders[old]

    def _take_dirty(self, rel: str) -> bool:
        with self._lock:
            dirty = rel in self._dirty
            self._dirty.discard(rel)
            return dirty

    def _recheck(self, st: os.stat_result) -> bool:
        """A racy fingerprint of a file that has aged since: hash once more, then persist it."""
        if self.store is None or stat_key(st) not in self._racy:
            return False
        return not is_racy(st, time.time_ns())

    def _known(self, st: os.stat_result) -> str | None:
        """The fingerprint of this version without hashing: memory, then the store."""
        key = stat_key(st)
        with self._lock:
            known = self._fingerprints.get(key)
        if known is not None or self.store is None:
            return known
        known = self.store.fingerprint_get(st)
        if known is not None:
            with self._lock:
                self._fingerprints[key] = known
        return known

    def _fingerprint(self, st: os.stat_result, data: bytes, fresh: bool) -> str:
        cached = None if fresh else self._known(st)
        if cached is not None:
            return cached
        key = stat_key(st)
        digest = xxhash.xxh3_128_hexdigest(data)
        with self._lock:
            self._fingerprints[key] = digest
        if self.store is not None:
            self._persist_fingerprint(st, digest)
        return digest

    def _persist_fingerprint(self, st: os.stat_result, digest: str) -> None:
        assert self.store is not None
        stored = self.store.fingerprint_put(st, digest, time.time_ns())
        with self._lock:
            (self._racy.discard if stored else self._racy.add)(stat_key(st))

    def _parse(self, fingerprint: str, reader: Reader, name: str, data: bytes) -> Parsed:
        """Parse once per (fingerprint, Reader, name variant): concurrent loads of one version wait."""
        cache_key = _parse_key(fingerprint, reader, name)
        with self._parse_lock(cache_key):
            with self._lock:
                hit = self._parsed.get(cache_key)
                if hit is not None:
                    self._parsed.move_to_end(cache_key)
            if hit is not None:
                self._remeasure(cache_key, hit)
                self._make_room(len(hit.full_view), parsed=True)
                return hit
            self._make_room(len(data))
            stored = self.store.load(*cache_key, content=data) if self.store is not None else None
            if stored is not None:
                self._remember(cache_key, stored, parsed_now=False)
                return stored
            started = time.perf_counter()
            parsed = self._run_parse(cache_key, reader, MemorySource(name, data))
            if self.store is not None:  # the bytes name the parse in a shared tier, if there is one
                self.store.save(*cache_key, parsed, time.perf_counter() - started, content=data)
            self._remember(cache_key, parsed)
        return parsed

    @contextmanager
    def _parse_lock(self, cache_key: tuple[str, str]) -> Iterator[None]:
        """One lock per version being parsed, never shared: a parse that hangs until its bound
        holds up only the requests for that same version."""
        with self._lock:
            lock, users = self._parse_locks.setdefault(cache_key, (threading.Lock(), [0]))
            users[0] += 1
        try:
            with lock:
                yield
        finally:
            with self._lock:
                users[0] -= 1
                if not users[0]:
                    del self._parse_locks[cache_key]

    def _run_parse(self, cache_key: tuple[str, str], reader: Reader, source: MemorySource) -> Parsed:
        """Parse, under the bounds when there are any. A version that overran is answered at once after:
        for good if the overrun is ``lasting`` (memory, result size), for a while if not (time, death)."""
        if self.bounds is None or not self.bounds.isolates(registry.isolated(reader.name), source.data):
            return reader.parse(source)
        with self._lock:
            err, until = self._overran.get(cache_key, (None, 0.0))
        if err is not None and time.monotonic() < until:
            raise BoundExceeded(err.message, err.hint, err.lasting)
        try:
            return run_bounded(lambda: reader.parse(source), self.bounds, f"{reader.name} Reader")
        except BoundExceeded as err:
            with self._lock:
                self._overran[cache_key] = (err, math.inf if err.lasting else time.monotonic() + _TRANSIENT_OVERRUN_S)
                while len(self._overran) > _MAX_OVERRAN:
                    self._overran.popitem(last=False)
            raise

    def _remember(self, cache_key: tuple[str, str], parsed: Parsed, parsed_now: bool = True) -> None:
        size = memory.measure(parsed)
        with self._lock:
            self.parses += parsed_now
            self.disk_loads += not parsed_now
            old = self._parsed.pop(cache_key, None)
            self._parsed_chars -= len(old.full_view) if old is not None else 0
            self._parsed[cache_key] = parsed
            self._parsed_chars += len(parsed.full_view)
            self._sizes.set(cache_key, size, memory.shape(parsed))
            dropped = self._evict()
        self._let_go(dropped)

    def _make_room(self, size: int, parsed: bool = False) -> None:
        """Before a request on an artifact of ``size`` (source bytes to parse or load; ``parsed``: full-view
        characters of a held parse): evict so that a new parse's share (4x its bytes) and the request's peak fit."""
        with self._lock:
            dropped = self._evict(0 if parsed else min(4 * size, self.max_parsed_bytes // 2),
                                  memory.working_set(size, parsed))
        self._let_go(dropped)

    def _remeasure(self, cache_key: tuple[str, str], parsed: Parsed) -> None:
        """A hit whose Reader built indexes since it was measured (BM25, dense vectors) weighs more now."""
        shape = memory.shape(parsed)
        if self._sizes.shape(cache_key) == shape:
            return
        size = memory.measure(parsed)
        with self._lock:
            if self._parsed.get(cache_key) is not parsed:
                return
            self._sizes.set(cache_key, size, shape)
            dropped = self._evict()
        self._let_go(dropped)

    def _evict(self, coming: int = 0, working: int = 0) -> list[tuple[Parsed, int]]:
        """With the lock held: least recently used out until both bounds hold with ``coming`` more bytes of
        parses and ``working`` bytes of a request's peak (the newest always stays); each evicted parse with
        its estimated footprint."""
        dropped = []
        room = memory.room_for_parses(self._sizes.total, working)  # once per pass: RSS drops only after a trim
        share = self.max_parsed_bytes - coming
        bound = min(share, room) if room is not None else share
        while (self._parsed_chars > self.max_parsed_chars or self._sizes.total > bound) and len(self._parsed) > 1:
            key, parsed = self._parsed.popitem(last=False)
            self._parsed_chars -= len(parsed.full_view)
            dropped.append((parsed, self._sizes.forget(key)))
        self.evictions += len(dropped)
        return dropped

    def _let_go(self, dropped: list[tuple[Parsed, int]]) -> None:
        """Evicted parses: the store saves the indexes they grew (it serves them from now on); memory goes back."""
        if self.store is not None:
            for parsed, _ in dropped:
                self.store.save_grown(parsed)
        memory.give_back(sum(size for _, size in dropped))

    def memory_state(self) -> dict[str, int]:
        """The parsed artifacts held in memory, for stats.json."""
        with self._lock:
            return {"parsed_entries": len(self._parsed), "parsed_mib": self._sizes.total >> 20,
                    "parsed_budget_mib": self.max_parsed_bytes >> 20, "evictions": self.evictions}


def _parse_key(fingerprint: str, reader: Reader, name: str) -> tuple[str, str]:
    """(fingerprint, "<reader>-<extension>"): the cache and store key of one parse."""
    return fingerprint, f"{reader.name}-{variant(name)}"


def open_confined(root: SourceRoot, rel: str) -> int:
    """Open for reading, following symlinks only while they stay inside the root."""
    try:
        return root.open_file(rel, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not block the daemon
    except OSError as err:
        if err.errno in (errno.EXDEV, errno.ELOOP):
            raise UnsupportedArtifact(
                "this path leads outside the mounted source root (a symlink); it is not served",
                hint="ask about a file inside the workspace",
            ) from None
        raise


def _check_regular(st: os.stat_result) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise UnsupportedArtifact("not a regular file", hint="read it with ordinary tools")
    if st.st_size > MAX_ARTIFACT_BYTES:
        raise ArtifactTooLarge(
            f"artifact is {st.st_size:,} bytes, over the {MAX_ARTIFACT_BYTES:,}-byte evidence bound",
            hint="read ranges of the original with @raw (e.g. head -c / tail -c)",
        )


def _read_all(fd: int, size: int) -> bytes:
    chunks = []
    remaining = MAX_ARTIFACT_BYTES + 1
    while remaining > 0:
        chunk = os.read(fd, min(remaining, max(size, 1 << 20)))
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    data = b"".join(chunks)
    if len(data) > MAX_ARTIFACT_BYTES:
        raise ArtifactTooLarge("artifact grew past the evidence bound while reading", hint="retry")
    return data


def _join(parent: str, name: str) -> str:
    return f"{parent}/{name}" if parent else name
