"""The locate pipeline every ranking Reader shares: units in view -> ranked by the intent's method -> chosen
within the budget -> passages -> coverage judged by the calibrated model.

A Reader describes what it may pick from as a :class:`UnitView` (unit offsets into its full view, where
they sit in the :class:`UnitIndex` that scores them, its ``Scope``) and keeps only what is its own: how
a run of chosen units becomes anchored passages, and how one unit is labelled. Everything between is
here, so every Reader honours every location method of :mod:`readers.retrieval.methods` (lexical, bm25,
hybrid, region: ``ReadIntent.method``) the same way, and a slot is ``matched`` by the same calibrated
promise (:mod:`readers.retrieval.confidence`) whichever Reader served it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from readers.base import Batch, EvidenceItem, Parsed, ReadIntent, Scope, SlotCoverage
from readers.retrieval.bm25index import Mask, Offsets, Scores, Selection, UnitIndex, blocked_mask, content_tokens
from readers.retrieval.confidence import judge, signals
from readers.retrieval.methods import Adjust, Ranking, choose_units, rank_units

CANDIDATES = 3
"""Closest units an unresolved slot names."""
NO_CONTENT = "no-content-words"


@dataclass(frozen=True, eq=False)
class UnitView:
    """The units one locate may pick from.

    ``starts``/``ends`` are the units' offsets into the full view, in document order; ``first`` is
    where the first of them sits in the index ``index()`` returns (built on first use: a read
    without content words never builds one); ``ids`` are their ids in the artifact's dense cache
    when those are not ``first, first + 1, ...``; ``silent`` units never score (a PDF's page markers).
    """

    starts: Offsets
    ends: Offsets
    first: int
    scope: Scope
    index: Callable[[], UnitIndex]
    ids: Offsets | None = None
    silent: Mask | None = None


@dataclass(frozen=True, eq=False)
class Located:
    """What the pipeline found: the slots and their content words, the ranking, the chosen units."""

    slots: tuple[str, ...]
    contents: tuple[frozenset[str], ...]
    index: UnitIndex
    ranking: Ranking
    selection: Selection
    blocked: Mask

    def coverage(
        self, items: Sequence[EvidenceItem], label_of: Callable[[int], str], skip_blocked: bool = False
    ) -> tuple[SlotCoverage, ...]:
        """One judged entry per slot; candidates are labelled by ``label_of(unit in view)`` (never an
        already exposed unit with ``skip_blocked``)."""
        blocked = self.blocked if skip_blocked else None
        return tuple(
            slot_coverage(self.index, slot, j, self.contents[j], self.ranking.raw.get(j), items,
                          closest_labels(self.ranking.raw.get(j), label_of, blocked), self.ranking.verbatim)
            for j, slot in enumerate(self.slots)
        )

    def batch(
        self, items: Sequence[EvidenceItem], scope: Scope, label_of: Callable[[int], str],
        flags: tuple[str, ...] = (), skip_blocked: bool = False,
    ) -> Batch:
        """The Reader's answer: its passages, the scope named by the method that ran, judged coverage."""
        coverage = self.coverage(items, label_of, skip_blocked)
        return Batch(tuple(items), replace(scope, method=self.ranking.method), coverage, (*flags, *self.ranking.flags))


def locate_units(
    parsed: Parsed, view: UnitView, intent: ReadIntent, max_chars: int, exclude: Sequence[tuple[int, int]] = (),
    k: int | None = None, contents: Sequence[frozenset[str]] | None = None, adjust: Adjust | None = None,
) -> Located | None:
    """Rank the view's units by the intent's method and choose them within ``max_chars`` (at most
    ``k`` passages), never one overlapping ``exclude``; None when no slot has a content word
    (``contents``: each slot's, when a Reader counts more than its words, e.g. symbol names)."""
    slots = intent.slots or (intent.text,)
    words = tuple(contents) if contents is not None else tuple(content_tokens(slot) for slot in slots)
    if not any(words):
        return None
    index = view.index()
    blocked = blocked_mask(view.starts, view.ends, exclude)
    if view.silent is not None:
        blocked |= view.silent
    searched = {j: slot for j, slot in enumerate(slots) if words[j]}
    units = (view.starts, view.ends, view.first)
    ranking = rank_units(parsed, index, units, intent, searched, blocked, view.silent, adjust, view.ids)
    selection = choose_units(ranking, index, units, blocked, max_chars, k)
    return Located(tuple(slots), words, index, ranking, selection, blocked)


def unresolved(intent: ReadIntent, scope: Scope, flags: tuple[str, ...] = ()) -> Batch:
    """The answer to a read none of whose slots has a content word: nothing, every slot unresolved."""
    slots = intent.slots or (intent.text,)
    return Batch((), scope, tuple(SlotCoverage(slot, "unresolved") for slot in slots), (*flags, NO_CONTENT))


def run_score(selection: Selection, run: Sequence[int]) -> float:
    """A passage's score: its best unit's, rounded as packs show it."""
    return round(max(selection.best[u] for u in run), 4)


def run_slots(selection: Selection, run: Sequence[int]) -> tuple[int, ...]:
    """The slots a passage serves: those of any of its units."""
    return tuple(sorted(set().union(*(selection.slots[u] for u in run))))


def slot_coverage(
    index: UnitIndex,
    slot: str,
    j: int,
    content: frozenset[str],
    raw: Scores | None,
    items: Sequence[EvidenceItem],
    closest: Sequence[str],
    verbatim: bool = False,
) -> SlotCoverage:
    """Slot j's passages judged by the calibrated coverage model: matched, candidate, or unresolved with
    the ``closest`` units. A passage counts as the slot's when it scores > 0 and shares a content word
    (``verbatim``: the score already says it holds one as written)."""
    mine = sorted((it for it in items if j in it.slots), key=lambda it: -it.score)
    if not (mine and mine[0].score > 0 and (verbatim or content & content_tokens(mine[0].text))):
        mine = []
    sig = signals(index, slot, raw, [it.text for it in mine])
    return judge(slot, sig, [it.anchor.label for it in mine], closest, verbatim)


def closest_labels(
    raw: Scores | None, label_of: Callable[[int], str], blocked: Mask | None = None, n: int = CANDIDATES
) -> tuple[str, ...]:
    """Labels of the best-scoring units (raw, unsmoothed scores > 0), distinct, at most ``n``: where an
    unresolved slot's evidence most likely is."""
    if raw is None:
        return ()
    labels: list[str] = []
    for u in np.argsort(-raw, kind="stable")[: 4 * n].tolist():
        if raw[u] > 0 and (blocked is None or not blocked[u]):
            label = label_of(u)
            if label not in labels:
                labels.append(label)
    return tuple(labels[:n])
