"""Reading episodes: one artifact version under one objective (paper §4.1).

Refine, verify and focus share the open episode's evidence record and budget;
a new objective (intent/collect with other text) or a changed fingerprint
starts a new episode (the old one closes, "artifact changed"); delivering the
full view closes it and retires its sparse observations: the agent may drop
them, the full view supersedes them. With a :class:`StateDB` every change is
saved (Algorithm 1, SaveEpisode) and the newest episodes are loaded back at
mount, so a remount continues where the last mount stopped.

An episode's id is a function of what it is (artifact, version, objective) and of the episodes of that
same objective before it (:func:`episode_id`), never of how many other episodes a mount opened: the id
is part of the pack's text, so a counter would make the same question's pack differ in width (and, at
the edge of the budget, in its passages) with what was asked before it on other files. ``number`` keeps
the order episodes were opened in (pruning, listings).

A pack is built at lookup (its size must be known) but charged when it is
read: the changes a build makes are *staged* (:meth:`EpisodeStore.staging`)
and applied by :meth:`EpisodeStore.commit` when the pack is delivered, if the
artifact's episodes did not move on meanwhile (then the pack is built again).
So a name nothing reads (``mkdir 'x@intent=...'``, a '/' in a question, a
read that failed) opens and charges no episode.
"""

from __future__ import annotations

import copy
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import xxhash

from gate import Budget
from readers.actions import Episode as Role
from readers.actions import named
from sparsefs.protocol.pack import display_name
from sparsefs.store.state import MAX_EPISODES_LOADED, StateDB

CONTINUING_ACTIONS = named(episode=Role.CONTINUES)  # readers.actions: refine, verify, focus, full
ID_CHARS = 4
"""Base-36 characters of an episode id after its 'e': 1.7 million ids, a collision is probed past."""
_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def episode_id(artifact: str, fingerprint: str, objective: str, taken: Callable[[str], bool]) -> str:
    """``e`` + ID_CHARS base-36 digits of a hash of (artifact, version, objective, n): the first n whose id is
    not ``taken`` (an earlier episode of the same objective, or, rarely, another one's)."""
    for n in range(1_000_000):
        key = "\0".join((artifact, fingerprint, objective, str(n))).encode("utf-8", "surrogateescape")
        value, digits = xxhash.xxh64_intdigest(key), []
        for _ in range(ID_CHARS):
            value, digit = divmod(value, 36)
            digits.append(_DIGITS[digit])
        candidate = "e" + "".join(digits)
        if not taken(candidate):
            return candidate
    raise RuntimeError("no free episode id")  # a million ids taken by one objective: not reachable


@dataclass
class Episode:
    """The evidence record and budget of one episode."""

    id: str
    artifact: str
    fingerprint: str
    objective: str
    budget: Budget
    number: int = 0  # the order episodes were opened in (this state directory's)
    started: float = field(default_factory=time.time)
    spans: list[tuple[int, int]] = field(default_factory=list)
    anchors: list[str] = field(default_factory=list)
    passages: list[tuple[str, int, int]] = field(default_factory=list)  # (anchor, start, end) of each span
    reads: int = 0
    close_reason: str = ""
    retired: bool = False
    detached: bool = False  # an exact operation's own episode: never the artifact's current one
    method: str | None = None  # the location method its first read was given; refine keeps it

    @property
    def closed(self) -> bool:
        return self.budget.closed

    def close(self, reason: str) -> None:
        self.budget = replace(self.budget, closed=True)
        self.close_reason = reason

    def to_json(self) -> dict[str, Any]:
        """What ``.sparsefs/episodes/<id>.json`` and ``sparsefs episodes`` show."""
        b = self.budget
        return {
            "id": self.id,
            "number": self.number,
            "artifact": display_name(self.artifact),
            "fingerprint": self.fingerprint,
            "objective": self.objective,
            "started": self.started,
            "reads": self.reads,
            "exposed_sparse": b.sparse_exposed,
            "full_view_chars": b.full_view_chars,
            "full_view_delivered": b.full_view_delivered,
            "full_view_pack_chars": b.full_view_pack_chars,
            "reserve": b.reserve,
            "budget_left": b.remaining,
            "closed": b.closed,
            "close_reason": self.close_reason,
            "observations_retired": self.retired,
            "anchors": self.anchors,
        }

    def to_record(self) -> dict[str, Any]:
        """Everything needed to restore the episode (JSON-safe; the path stays as the core sees it)."""
        return self.to_json() | {"artifact_rel": self.artifact, "spans": self.spans, "passages": self.passages,
                                 "detached": self.detached, "method": self.method}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Episode:
        length = int(record["full_view_chars"])
        delivered = bool(record["full_view_delivered"])
        budget = Budget(length, int(record["exposed_sparse"]), delivered, bool(record["closed"]),
                        reserve=min(length, int(record.get("reserve", 0))),
                        full_view_pack_chars=int(record.get("full_view_pack_chars", length if delivered else 0)))
        return cls(
            id=str(record["id"]), artifact=str(record["artifact_rel"]), fingerprint=str(record["fingerprint"]),
            objective=str(record["objective"]), budget=budget, started=float(record["started"]),
            spans=[(int(a), int(b)) for a, b in record["spans"]], anchors=[str(a) for a in record["anchors"]],
            passages=[(str(a), int(s), int(e)) for a, s, e in record.get("passages", ())],
            reads=int(record["reads"]), close_reason=str(record["close_reason"]),
            retired=bool(record.get("observations_retired", False)), detached=bool(record.get("detached", False)),
            method=str(record["method"]) if record.get("method") else None, number=int(record.get("number", 0)),
        )


@dataclass(frozen=True)
class Staged:
    """The episodes one build changed or started, as it left them; applied when its pack is delivered."""

    artifact: str
    revision: int  # the artifact's episode revision the build started from
    episodes: tuple[Episode, ...] = ()
    current: str | None = None  # the artifact's current episode after the build


def _nothing() -> None:
    return None


@dataclass(frozen=True)
class Delivery:
    """What delivering a pack applies (sparsefs.protocol.access.Protocol.deliver): the episode changes its build
    staged, and what the baseline remembers of the version it read (sparsefs.protocol.baseline)."""

    rel: str
    staged: Staged | None = None
    delivered: Callable[[], None] = _nothing


class EpisodeStore:
    """Thread-safe, bounded set of episodes with one open episode per artifact."""

    def __init__(self, state: StateDB | None = None, max_episodes: int = MAX_EPISODES_LOADED) -> None:
        self._episodes: OrderedDict[str, Episode] = OrderedDict()
        self._open: dict[str, str] = {}
        self._max = max_episodes
        self._state = state
        self.lock = threading.RLock()
        self._next = 1 + (state.last_episode_number() if state else 0)
        self._revision: dict[str, int] = {}  # artifact -> commits so far (a staged build applies to one)
        self._staging: dict[str, list[str]] = {}  # artifact being built -> the episodes the build started
        if state is not None:
            self._restore(state)

    def _restore(self, state: StateDB) -> None:
        """Each artifact's newest sparse episode is current again, open or closed: a closed one
        still says which version was read last and whether its full view went out."""
        for record, _ in state.load_episodes(self._max):
            episode = Episode.from_record(record)
            self._episodes[episode.id] = episode
            if not episode.detached:
                self._open[episode.artifact] = episode.id

    def ensure(self, artifact: str, fingerprint: str, action: str, objective: str, full_view_chars: int,
               reserve: int = 0) -> Episode:
        """The episode this access belongs to (SyncArtifactVersion, then EnsureEpisode)."""
        with self.lock:
            current = self._current(artifact)
            if current and not current.closed and current.fingerprint != fingerprint:
                current.close(f"artifact changed (fingerprint {fingerprint[:12]})")
                self.save(current)
            if current and _continues(current, fingerprint, action, objective):
                return current
            return self._start(artifact, fingerprint, objective, full_view_chars, reserve=reserve)

    def detached(self, artifact: str, fingerprint: str, objective: str, full_view_chars: int,
                 reserve: int = 0) -> Episode:
        """An episode of its own for an exact operation: the open episode (what refine,
        verify and focus continue) stays the artifact's sparse reading."""
        with self.lock:
            episode = self._start(artifact, fingerprint, objective, full_view_chars, open_=False, reserve=reserve)
            episode.detached = True
            return episode

    def superseded(self, artifact: str, fingerprint: str) -> Episode | None:
        """The artifact's last episode if it closed by delivering this version's full view."""
        with self.lock:
            current = self._current(artifact)
            if current and current.closed and current.fingerprint == fingerprint and current.budget.full_view_delivered:
                return current
            return None

    def current_id(self, artifact: str) -> str | None:
        with self.lock:
            return self._open.get(artifact)

    def previous_fingerprint(self, artifact: str) -> str | None:
        with self.lock:
            current = self._current(artifact)
            return current.fingerprint if current else None

    @contextmanager
    def staging(self, artifact: str) -> Iterator[list[Staged]]:
        """Build a pack of ``artifact`` without charging it: what the build changes is handed out (one
        :class:`Staged` in the yielded list) and the store is left as it was. The caller holds the artifact's
        lock; other artifacts go on meanwhile."""
        with self.lock:
            revision = self._revision.get(artifact, 0)
            current_id = self._open.get(artifact)
            current = self._episodes.get(current_id) if current_id else None
            before = copy.deepcopy(current)
            self._staging[artifact] = []
        out: list[Staged] = []
        try:
            yield out
        finally:
            with self.lock:
                out.append(self._unstage(artifact, revision, current_id, before))

    def _unstage(self, artifact: str, revision: int, current_id: str | None, before: Episode | None) -> Staged:
        """Collect what the build changed, then put the store back as it was (lock held)."""
        started = self._staging.pop(artifact)
        after = self._episodes.get(current_id) if current_id else None
        changed = [after] if after is not None and after != before else []
        changed += [self._episodes[i] for i in started if i in self._episodes]
        staged = Staged(artifact, revision, tuple(changed), self._open.get(artifact))
        for episode_id in started:
            self._episodes.pop(episode_id, None)
        if before is not None and current_id is not None:
            self._episodes[current_id] = before
        if current_id is None:
            self._open.pop(artifact, None)
        else:
            self._open[artifact] = current_id
        return staged

    def commit(self, staged: Staged) -> bool:
        """Apply a staged build; False (nothing applied) when the artifact's episodes changed since it began."""
        with self.lock:
            if not staged.episodes:
                return True
            if self._revision.get(staged.artifact, 0) != staged.revision:
                return False
            self._revision[staged.artifact] = staged.revision + 1
            for episode in staged.episodes:
                self._episodes[episode.id] = episode
                self._episodes.move_to_end(episode.id)
            if staged.current is None:
                self._open.pop(staged.artifact, None)
            else:
                self._open[staged.artifact] = staged.current
            self._bound()
        for episode in staged.episodes:
            self.save(episode)
        return True

    def revision(self, artifact: str) -> int:
        with self.lock:
            return self._revision.get(artifact, 0)

    def save(self, episode: Episode) -> None:
        """Persist the episode's record (a no-op without a state database, or while its build is staged:
        the commit saves it)."""
        if self._state is None:
            return
        with self.lock:
            if episode.artifact in self._staging:
                return
            record, is_open = episode.to_record(), self._open.get(episode.artifact) == episode.id
        self._state.save_episode(record, is_open and not episode.closed)

    def all(self) -> list[Episode]:
        with self.lock:
            return list(self._episodes.values())

    def get(self, episode_id: str) -> Episode | None:
        with self.lock:
            return self._episodes.get(episode_id)

    def _taken(self, episode_id: str) -> bool:
        """An id in use, in memory or in the state database."""
        return episode_id in self._episodes or (self._state is not None and self._state.has_episode(episode_id))

    def _current(self, artifact: str) -> Episode | None:
        episode_id = self._open.get(artifact)
        return self._episodes.get(episode_id) if episode_id else None

    def _start(
        self, artifact: str, fingerprint: str, objective: str, full_view_chars: int, open_: bool = True,
        reserve: int = 0,
    ) -> Episode:
        budget = Budget(full_view_chars, reserve=min(reserve, full_view_chars))
        number, self._next = self._next, self._next + 1
        episode = Episode(episode_id(artifact, fingerprint, objective, self._taken), artifact, fingerprint, objective,
                          budget, number=number)
        self._episodes[episode.id] = episode
        if open_:
            self._open[artifact] = episode.id
        if artifact in self._staging:
            self._staging[artifact].append(episode.id)
        else:
            self._bound()
        return episode

    def _bound(self) -> None:
        """Forget the oldest episodes beyond the bound (lock held)."""
        while len(self._episodes) > self._max:
            _, dropped = self._episodes.popitem(last=False)
            if self._open.get(dropped.artifact) == dropped.id:
                del self._open[dropped.artifact]


def _continues(episode: Episode, fingerprint: str, action: str, objective: str) -> bool:
    if episode.closed or episode.fingerprint != fingerprint:
        return False
    return action in CONTINUING_ACTIONS or episode.objective == objective
