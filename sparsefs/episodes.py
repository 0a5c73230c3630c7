"""Reading episodes: one artifact version under one objective.

Refine, verify and focus share the open episode's evidence record and budget;
a new objective (intent/collect with other text) or a changed fingerprint
starts a new episode; delivering the full view closes it.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from gate import Budget
from sparsefs.pack import display_name

CONTINUING_ACTIONS = frozenset({"refine", "verify", "focus", "full"})


@dataclass
class Episode:
    """The evidence record and budget of one episode."""

    id: str
    artifact: str
    fingerprint: str
    objective: str
    budget: Budget
    started: float = field(default_factory=time.time)
    spans: list[tuple[int, int]] = field(default_factory=list)
    anchors: list[str] = field(default_factory=list)
    reads: int = 0
    close_reason: str = ""

    @property
    def closed(self) -> bool:
        return self.budget.closed

    def to_json(self) -> dict[str, Any]:
        b = self.budget
        return {
            "id": self.id,
            "artifact": display_name(self.artifact),
            "fingerprint": self.fingerprint,
            "objective": self.objective,
            "started": self.started,
            "reads": self.reads,
            "exposed_sparse": b.sparse_exposed,
            "full_view_chars": b.full_view_chars,
            "full_view_delivered": b.full_view_delivered,
            "budget_left": b.remaining,
            "closed": b.closed,
            "close_reason": self.close_reason,
            "anchors": self.anchors,
        }


class EpisodeStore:
    """Thread-safe, bounded set of episodes with one open episode per artifact."""

    def __init__(self, max_episodes: int = 2000) -> None:
        self._episodes: OrderedDict[str, Episode] = OrderedDict()
        self._open: dict[str, str] = {}
        self._ids = itertools.count(1)
        self._max = max_episodes
        self.lock = threading.RLock()

    def ensure(self, artifact: str, fingerprint: str, action: str, objective: str, full_view_chars: int) -> Episode:
        """The episode this access belongs to, starting one when needed."""
        with self.lock:
            current = self._current(artifact)
            if current and _continues(current, fingerprint, action, objective):
                return current
            return self._start(artifact, fingerprint, objective, full_view_chars)

    def detached(self, artifact: str, fingerprint: str, objective: str, full_view_chars: int) -> Episode:
        """An episode of its own for an exact operation: the open episode (what refine,
        verify and focus continue) stays the artifact's sparse reading."""
        with self.lock:
            return self._start(artifact, fingerprint, objective, full_view_chars, open_=False)

    def previous_fingerprint(self, artifact: str) -> str | None:
        with self.lock:
            current = self._current(artifact)
            return current.fingerprint if current else None

    def all(self) -> list[Episode]:
        with self.lock:
            return list(self._episodes.values())

    def get(self, episode_id: str) -> Episode | None:
        with self.lock:
            return self._episodes.get(episode_id)

    def _current(self, artifact: str) -> Episode | None:
        episode_id = self._open.get(artifact)
        return self._episodes.get(episode_id) if episode_id else None

    def _start(
        self, artifact: str, fingerprint: str, objective: str, full_view_chars: int, open_: bool = True
    ) -> Episode:
        episode = Episode(f"e{next(self._ids)}", artifact, fingerprint, objective, Budget(full_view_chars))
        self._episodes[episode.id] = episode
        if open_:
            self._open[artifact] = episode.id
        while len(self._episodes) > self._max:
            self._episodes.popitem(last=False)
        return episode


def _continues(episode: Episode, fingerprint: str, action: str, objective: str) -> bool:
    if episode.closed or episode.fingerprint != fingerprint:
        return False
    return action in CONTINUING_ACTIONS or episode.objective == objective
