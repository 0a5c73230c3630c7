"""Budget accounting for one reading episode.

Invariants (Proposition 4.1 of the paper):

* ``sparse_exposed`` (E) never exceeds ``full_view_chars`` (L): a batch is
  admitted only when its *serialized* size fits in ``L - E``;
* a batch that does not fit intact is withheld, never truncated, and the full
  view is delivered instead, at most once; the episode then closes;
* so total exposure E + (L if the full view was delivered) is at most 2L.

All functions are pure: they take a :class:`Budget` and return a new one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum


class Decision(StrEnum):
    """What the Gate does with a request or a batch."""

    NATIVE_FIT = "native-fit"
    SPARSE = "sparse"
    ADMIT = "admit"
    FALLBACK = "fallback"
    REUSE_FULL_VIEW = "reuse-full-view"
    CLOSED = "closed"


@dataclass(frozen=True)
class GateConfig:
    """Tunable thresholds; the defaults are the product's."""

    native_fit_chars: int = 4_000

    def __post_init__(self) -> None:
        if self.native_fit_chars < 0:
            raise ValueError("native_fit_chars must be >= 0")


@dataclass(frozen=True)
class Budget:
    """Exposure state of one episode, in characters of the full view's unit."""

    full_view_chars: int
    sparse_exposed: int = 0
    full_view_delivered: bool = False
    closed: bool = False

    def __post_init__(self) -> None:
        if self.full_view_chars < 0 or self.sparse_exposed < 0:
            raise ValueError("budget sizes must be >= 0")

    @property
    def remaining(self) -> int:
        """Characters of sparse payload the episode may still admit."""
        return max(0, self.full_view_chars - self.sparse_exposed)


@dataclass(frozen=True)
class Admission:
    """The Gate's verdict on one serialized batch, with the budget after it."""

    decision: Decision
    budget: Budget
    delivered_chars: int


def choose_mode(full_view_chars: int, config: GateConfig, needs_full_view: bool = False) -> Decision:
    """Native fit when the full view is small or explicitly needed, else sparse."""
    if needs_full_view or full_view_chars <= config.native_fit_chars:
        return Decision.NATIVE_FIT
    return Decision.SPARSE


def admit_batch(budget: Budget, payload_chars: int) -> Admission:
    """Admit a serialized batch if it fits intact in L - E; else fall back."""
    if payload_chars < 0:
        raise ValueError("payload size must be >= 0")
    if budget.closed:
        return Admission(Decision.CLOSED, budget, 0)
    if payload_chars <= budget.remaining:
        after = replace(budget, sparse_exposed=budget.sparse_exposed + payload_chars)
        return Admission(Decision.ADMIT, after, payload_chars)
    return deliver_full_view(budget)


def deliver_full_view(budget: Budget) -> Admission:
    """Deliver the full view once and close; a repeat delivers nothing new."""
    if budget.full_view_delivered:
        return Admission(Decision.REUSE_FULL_VIEW, replace(budget, closed=True), 0)
    after = replace(budget, full_view_delivered=True, closed=True)
    return Admission(Decision.FALLBACK, after, budget.full_view_chars)


def total_exposure(budget: Budget) -> int:
    """Sparse payload plus the full view if it was delivered (<= 2L)."""
    full = budget.full_view_chars if budget.full_view_delivered else 0
    return budget.sparse_exposed + full
