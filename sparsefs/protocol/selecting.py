"""SelectReader (Algorithm 1, line 8): which configuration serves one read.

The selector itself (``readers.selection``) is pure: request groups, Wilson
bounds over the shipped calibration table, costs. This module gives it what
only the control plane knows — the artifact's kind and full-view length, the
resolved intent, the location methods the artifact's Reader honours (hybrid
only with the dense extra). Nothing a read does changes a later choice (the
cost book is calibration's: ``readers.selection.CostBook``), so a pack never
depends on what was asked before it. After a hybrid choice it queues the
artifact for the dense warm-up (``sparsefs.artifacts.warmup``).
"""

from __future__ import annotations

import functools
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
    """Chooses per read from the shipped calibration, and starts the dense warm-up after a hybrid choice."""

    def __init__(
        self, selector: Selector | None = None, warmer: DenseWarmer | None = None,
        on_warmed: Callable[[Parsed], None] | None = None,
    ) -> None:
        self.selector = selector or Selector(_shipped_table())  # reliability and costs: calibration's
        self.warmer = warmer if warmer is not None else (DenseWarmer(on_warmed=on_warmed) if warmup_enabled() else None)

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


@functools.cache
def _shipped_table() -> CalibrationTable:
    """The calibration table in the package, read once per process (reliability never changes online)."""
    return load_table()


def available(reader: Reader) -> list[Configuration]:
    """Snippet configurations the Reader honours; hybrid needs the dense extra."""
    methods = [m for m in sorted(reader.methods) if m in SNIPPETS and (m != "hybrid" or dense.available())]
    return [SNIPPETS[m] for m in methods]
