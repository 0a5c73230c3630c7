"""What a person would have read instead of a pack: the full reads a served pack stands for.

The savings (sparsefs.store.savings, docs/SEMANTICS.md "Savings") compare what packs exposed with what a
person reading the same files without SparseFS would have read. Each delivered pack's log line names those
reads (``reads``), decided here, where the artifact is at hand:

* a pack of a file: that file version, whole (``L``), whatever the pack was (a preview, a sparse pack, an
  exact result, the full view): one full read, which the read window then counts once;
* a version whose full view extends the version last delivered of the same path (a log that grew by
  appending: the old full view is its prefix) says so, so that only the new tail counts;
* a pack of a folder: the folder's listing (each member's path, as ``find`` prints it) plus every member the
  pack carries text of (a passage from it, or the whole member in a full view), each as that member's own
  version: a person lists the folder, then opens the files the evidence is in; they would not have read
  every file of it, which is what counting the folder's full view assumed;
* an error pack: nothing (nothing was served).
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Callable

import xxhash

from readers.base import ReaderError
from sparsefs.artifacts.cache import Artifact, ArtifactCache
from sparsefs.protocol.pack import EvidencePack, display_name
from sparsefs.store.savings import FullRead

_REMEMBERED = 4096  # paths whose last delivered version is remembered for growth


def _nothing() -> None:
    return None


class Baseline:
    """Decides the full reads of a pack; remembers, per path, the version last delivered (for growth)."""

    def __init__(self, artifacts: ArtifactCache) -> None:
        self.artifacts = artifacts
        self._delivered: OrderedDict[str, tuple[str, int, str]] = OrderedDict()  # rel -> (fingerprint, L, hash)
        self._hashes: OrderedDict[str, str] = OrderedDict()  # fingerprint -> xxh3-128 of its full view
        self._lock = threading.Lock()

    def reads(self, artifact: Artifact, pack: EvidencePack) -> tuple[tuple[FullRead, ...], Callable[[], None]]:
        """The full reads ``pack`` stands for, and what to call once it is delivered."""
        if pack.decision == "error":
            return (), _nothing
        members = artifact.reader.members(artifact.parsed)
        if members:
            return self._collection(artifact, pack, members), _nothing
        return self._file(artifact)

    def _file(self, artifact: Artifact) -> tuple[tuple[FullRead, ...], Callable[[], None]]:
        view, rel, version = artifact.parsed.full_view, artifact.rel, artifact.fingerprint
        name = display_name(rel)
        with self._lock:
            last = self._delivered.get(rel)
        if last is not None and last[0] == version:
            return (FullRead(name, version, len(view)),), _nothing
        whole = self._hash(artifact)
        entry = (version, len(view), whole)
        delivered = functools.partial(self._remember, rel, entry)  # no reference to the parse: the memo keeps this
        if last is None or len(view) <= last[1] or _prefix_hash(view, last[1]) != last[2]:
            return (FullRead(name, version, len(view)),), delivered
        return (FullRead(name, version, len(view), last[0], last[1]),), delivered

    def _hash(self, artifact: Artifact) -> str:
        """xxh3-128 of the version's full view, once per version."""
        with self._lock:
            known = self._hashes.get(artifact.fingerprint)
        if known is None:
            known = _prefix_hash(artifact.parsed.full_view, len(artifact.parsed.full_view))
            with self._lock:
                self._hashes[artifact.fingerprint] = known
                while len(self._hashes) > _REMEMBERED:
                    self._hashes.popitem(last=False)
        return known

    def _remember(self, rel: str, entry: tuple[str, int, str]) -> None:
        """The version delivered last for its path, with its full view's length and hash."""
        with self._lock:
            self._delivered.pop(rel, None)
            self._delivered[rel] = entry
            while len(self._delivered) > _REMEMBERED:
                self._delivered.popitem(last=False)

    def _collection(
        self, artifact: Artifact, pack: EvidencePack, members: tuple[tuple[str, int, int], ...]
    ) -> tuple[FullRead, ...]:
        listing = sum(len(display_name(rel)) + 1 for rel, _, _ in members)
        reads = [FullRead(display_name(artifact.rel), artifact.fingerprint, listing)]
        spans = [item.span for item in pack.evidence if item.span is not None]
        for rel, start, end in members:
            carried = pack.full_view is not None or any(a < end and b > start for a, b in spans)
            if end > start and carried:
                reads += self._member(_join(artifact.rel, rel), end - start)
        return tuple(reads)

    def _member(self, rel: str, chars: int) -> list[FullRead]:
        try:
            version = self.artifacts.fingerprint(rel)
        except (OSError, ReaderError):
            return []  # gone or unreadable since the folder was read: nothing a person could have read either
        return [FullRead(display_name(rel), version, chars)]


def _prefix_hash(view: str, chars: int) -> str:
    """xxh3-128 of the first ``chars`` characters of ``view``, UTF-8 encoded."""
    return xxhash.xxh3_128_hexdigest(view[:chars].encode("utf-8", "surrogatepass"))


def _join(parent: str, name: str) -> str:
    return f"{parent}/{name}" if parent else name
