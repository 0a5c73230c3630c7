"""Budget accounting for one reading episode.

Exposure is what the agent reads: every character of every pack, header,
coverage and next steps included, not only the passages. A full-view pack is
the full view (L) plus a few lines of its own; ``reserve`` holds back that many
characters of the sparse budget so the bound still counts them.

Invariants (Proposition 4.1 of the paper, for whole packs):

* ``sparse_exposed`` (E, the sparse packs' whole size) never exceeds
  ``L - reserve``: a pack is admitted only when its *serialized* size fits in
  what remains;
* a pack that does not fit intact is withheld, never truncated, and the full
  view is delivered instead, at most once, in a pack of at most
  ``L + reserve`` characters; the episode then closes;
* so total exposure E + (the full-view pack, if delivered) is at most 2L.

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
    pack_share: float = 0.4  # a pack must be at most this share of L to be worth its protocol

    def __post_init__(self) -> None:
        if self.native_fit_chars < 0:
            raise ValueError("native_fit_chars must be >= 0")
        if not 0 < self.pack_share <= 1:
            raise ValueError("pack_share must be in (0, 1]")


@dataclass(frozen=True)
class Budget:
    """Exposure state of one episode, in characters of the full view's unit."""

    full_view_chars: int
    sparse_exposed: int = 0
    full_view_delivered: bool = False
    closed: bool = False
    reserve: int = 0  # the most a full-view pack adds to L (its own lines); at most L
    full_view_pack_chars: int = 0  # the whole full-view pack, once delivered

    def __post_init__(self) -> None:
        if min(self.full_view_chars, self.sparse_exposed, self.reserve, self.full_view_pack_chars) < 0:
            raise ValueError("budget sizes must be >= 0")
        if self.reserve > self.full_view_chars:
            raise ValueError("the reserve for a full-view pack's own lines cannot exceed L")

    @property
    def remaining(self) -> int:
        """Characters of sparse packs the episode may still admit."""
        return max(0, self.full_view_chars - self.reserve - self.sparse_exposed)

    @property
    def full_pack_limit(self) -> int:
        """The largest full-view pack the bound allows: L plus the reserve."""
        return self.full_view_chars + self.reserve


@dataclass(frozen=True)
class Admission:
    """The Gate's verdict on one serialized batch, with the budget after it."""

    decision: Decision
    budget: Budget
    delivered_chars: int


def choose_mode(
    full_view_chars: int, config: GateConfig, needs_full_view: bool = False, pack_chars: int = 0
) -> Decision:
    """Native fit when the full view is small, explicitly needed, or not clearly dearer than the pack
    asked for (``pack_chars`` over ``pack_share`` of L), else sparse."""
    small = full_view_chars <= config.native_fit_chars or pack_chars > config.pack_share * full_view_chars
    return Decision.NATIVE_FIT if needs_full_view or small else Decision.SPARSE


def admit_batch(budget: Budget, payload_chars: int, full_pack_chars: int | None = None) -> Admission:
    """Admit a serialized pack if it fits intact in what remains; else fall back to the full view
    (``full_pack_chars``: the size of that full-view pack, L when not given)."""
    if payload_chars < 0:
        raise ValueError("payload size must be >= 0")
    if budget.closed:
        return Admission(Decision.CLOSED, budget, 0)
    if payload_chars <= budget.remaining:
        after = replace(budget, sparse_exposed=budget.sparse_exposed + payload_chars)
        return Admission(Decision.ADMIT, after, payload_chars)
    return deliver_full_view(budget, full_pack_chars)


def deliver_full_view(budget: Budget, pack_chars: int | None = None) -> Admission:
    """Deliver the full view once, in a pack of ``pack_chars`` (L when not given), and close; a repeat
    delivers nothing new. A pack larger than L + reserve would break the bound: ValueError."""
    if budget.full_view_delivered:
        return Admission(Decision.REUSE_FULL_VIEW, replace(budget, closed=True), 0)
    size = budget.full_view_chars if pack_chars is None else pack_chars
    if not budget.full_view_chars <= size <= budget.full_pack_limit:
        raise ValueError(f"a full-view pack of {size} chars is outside [L, L + reserve]")
    after = replace(budget, full_view_delivered=True, closed=True, full_view_pack_chars=size)
    return Admission(Decision.FALLBACK, after, size)


def total_exposure(budget: Budget) -> int:
    """Sparse packs plus the full-view pack if it was delivered (<= 2L)."""
    return budget.sparse_exposed + (budget.full_view_pack_chars if budget.full_view_delivered else 0)
