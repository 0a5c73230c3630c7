"""SelectReader (Algorithm 1, line 8): which configuration serves one read.

The selector itself (``readers.selection``) is pure: request groups, Wilson
bounds over the shipped calibration table, costs. This module gives it what
only the control plane knows — the artifact's kind and full-view length, the
resolved intent, the location methods the artifact's Reader honours (hybrid
only with the dense extra) — and feeds read outcomes back into the cost book:
an episode's first pack is its exposure, everything later in the same
episode (refines, a fallback's full view) its follow-up exposure, settled
when the artifact's next episode starts or the tally table fills. After a
hybrid choice it queues the artifact for the dense warm-up (``sparsefs.artifacts.warmup``).
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from readers.base import Parsed, Reader
from readers.registry import group_of
from readers.retrieval import dense
from readers.selection import (
    FULL_VIEW,
    SNIPPETS,
    CalibrationTable,
    Choice,
    Configuration,
    RequestGroup,
    Selector,
    load_table,
)
from sparsefs.artifacts.warmup import DenseWarmer
from sparsefs.artifacts.warmup import enabled as warmup_enabled

MAX_TALLIES = 1_000


@dataclass
class _Tally:
    group: RequestGroup
    config: Configuration
    exposed: int
    follow_up: int = 0


@dataclass(frozen=True)
class Selection:
    """One read's group and the selector's choice."""

    group: RequestGroup
    choice: Choice

    @property
    def full_view(self) -> bool:
        return self.choice.config == FULL_VIEW

    @property
    def method(self) -> str | None:
        return None if self.full_view else self.choice.config.method

    def describe(self) -> str:
        p = f"p_valid {self.choice.p_valid:.2f}" if self.choice.p_valid is not None else "not calibrated"
        return f"{self.choice.config.key} for {self.group.key} ({p}; {self.choice.reason})"


class ConfigurationChooser:
    """Chooses per read, remembers per episode, and teaches the cost book what reads cost."""

    def __init__(
        self, selector: Selector | None = None, warmer: DenseWarmer | None = None,
        on_warmed: Callable[[Parsed], None] | None = None,
    ) -> None:
        self.selector = selector or Selector(_shipped_table())  # one cost book per mount
        self.warmer = warmer if warmer is not None else (DenseWarmer(on_warmed=on_warmed) if warmup_enabled() else None)
        self._by_episode: OrderedDict[str, _Tally] = OrderedDict()
        self._lock = threading.Lock()

    def choose(self, reader: Reader, kind: str, full_view_chars: int, action: str, text: str) -> Selection:
        group = group_of(kind, full_view_chars, action, text)
        return Selection(group, self.selector.choose(group, available(reader)))

    def chosen(self, selection: Selection, parsed: Parsed) -> None:
        """After a hybrid choice: embed the rest of the artifact in the background (sparsefs.artifacts.warmup)."""
        if self.warmer is not None and selection.method == "hybrid":
            self.warmer.submit(parsed)

    def close(self) -> None:
        if self.warmer is not None:
            self.warmer.close()

    def record(self, episode_id: str, selection: Selection | None, exposed: int) -> None:
        """A pack of ``exposed`` characters went out in the episode."""
        settled: list[_Tally] = []
        with self._lock:
            tally = self._by_episode.get(episode_id)
            if tally is not None:
                tally.follow_up += exposed
            elif selection is not None:
                self._by_episode[episode_id] = _Tally(selection.group, selection.choice.config, exposed)
                while len(self._by_episode) > MAX_TALLIES:
                    settled.append(self._by_episode.popitem(last=False)[1])
        self._observe(settled)

    def settle(self, episode_id: str) -> None:
        """The episode is over (its artifact started another): its costs are final."""
        with self._lock:
            tally = self._by_episode.pop(episode_id, None)
        self._observe([tally] if tally is not None else [])

    def _observe(self, tallies: list[_Tally]) -> None:
        for t in tallies:
            self.selector.costs.observe(t.group, t.config, t.exposed, t.follow_up)


@functools.cache
def _shipped_table() -> CalibrationTable:
    """The calibration table in the package, read once per process (reliability never changes online)."""
    return load_table()


def available(reader: Reader) -> list[Configuration]:
    """Snippet configurations the Reader honours; hybrid needs the dense extra."""
    methods = [m for m in sorted(reader.methods) if m in SNIPPETS and (m != "hybrid" or dense.available())]
    return [SNIPPETS[m] for m in methods]
