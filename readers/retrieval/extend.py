"""Passages that reach the end of the sentence the answer is in.

Units are sentences of at most ``readers.retrieval.segment.UNIT_CAP`` (400) characters, so BM25 scores
a focused span; a longer sentence is cut into pieces at spaces. Chosen piece by piece, a passage can stop
in the middle of the sentence that holds the answer ("... an estimated 35,000 to 60,000 ventilators
would be needed, up to an estimated 7.3 billion surgical masks or respirators would be required, and
perhaps") or start in the middle of it ("(iii) the regularity of the virion major coat protein lattice,
which ..."): issue 27 counts 53 of 196 paper misses that stop just short of the answer.

So scoring stays per piece, and *choosing* is per sentence: :func:`sentence_groups` joins the pieces of
one sentence (consecutive units with no line break between them, the first not ending a sentence), and
:func:`grouped` turns a ranking over units into one over those groups (a group scores as its best
piece, is blocked when any piece is). The budget-filling selection then takes whole sentences, each
with the next sentence as before, and pays for them within the same budget: nothing is added after the
budget is spent. A group never exceeds :data:`MAX_GROUP_CHARS`, so a run-on "sentence" (a reference
list, a table flattened to one line) still comes in pieces. A line break ends a group: a row of a table
or a line of code is never joined to the next one, so rows and cells stay whole units as the segmenter
cut them.

Measured on the calibration split (docs/BENCHMARKS.md, issue 27), covidqa at the Reader with 1,340
passage characters: 241 -> 245 of 332 hits at the same median passage length (1,253 -> 1,257). Growing
passages to their sentence ends *after* choosing reached 247 but spent 15 more characters a pack at the
median (40 at the mean) beyond the budget, and 243 when weaker passages were dropped to pay for it.
"""

from __future__ import annotations

import re
from collections.abc import MutableMapping
from dataclasses import replace
from typing import Any

import numpy as np

from readers.retrieval.bm25index import Mask, Offsets, Scores, Selection, UnitIndex
from readers.retrieval.methods import LABELS, Ranking, choose_units
from readers.retrieval.segment import UNIT_CAP

MAX_GROUP_CHARS = 800
"""Longest group (two full units): a longer sentence is chosen in parts."""
GROUPS_KEY = "sentence_groups"
"""Where :func:`groups_of` keeps a document's groups in its parsed data (one int64 array)."""
_SENTENCE_END = re.compile(r"[.!?][\"'\u201d\u2019)\]]*\Z")


def sentence_groups(text: str, starts: Offsets, ends: Offsets) -> Offsets:
    """Group number of each unit: consecutive units of one sentence share it (see the module docstring)."""
    n = len(starts)
    group = np.zeros(n, dtype=np.int64)
    current, first = 0, 0
    for u in range(1, n):
        lo, hi = int(ends[u - 1]), int(starts[u])
        joined = (
            "\n" not in text[lo:hi]
            and not _SENTENCE_END.search(text, max(int(starts[u - 1]), lo - 4), lo)
            and int(ends[u]) - int(starts[first]) <= MAX_GROUP_CHARS
        )
        if not joined:
            current, first = current + 1, u
        group[u] = current
    return group


def grouped(
    ranking: Ranking, starts: Offsets, ends: Offsets, blocked: Mask, group: Offsets
) -> tuple[Ranking, Offsets, Offsets, Mask]:
    """The ranking, offsets and blocked mask over sentence groups instead of units (``ranked`` only:
    ``raw`` stays per unit for coverage and candidates). ``group`` may be a slice of a whole document's
    groups (a scoped view): only where it changes matters."""
    if not len(group):
        return ranking, starts, ends, blocked
    first = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    last = np.r_[first[1:] - 1, len(group) - 1]
    g_blocked: Mask = np.logical_or.reduceat(blocked, first)
    ranked = {j: _group_max(scores, first) for j, scores in ranking.ranked.items()}
    return replace(ranking, ranked=ranked), starts[first], ends[last], g_blocked


def _within(group: Offsets, starts: Offsets, ends: Offsets, limit: int) -> Offsets:
    """``group`` with every group longer than ``limit`` characters split back into its units (a small
    budget keeps its promise that only a first unit may exceed it)."""
    first = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    last = np.r_[first[1:] - 1, len(group) - 1]
    long = (ends[last] - starts[first]) > limit
    if not long.any():
        return group
    new = np.r_[True, group[1:] != group[:-1]] | np.repeat(long, np.diff(np.r_[first, len(group)]))
    result: Offsets = np.cumsum(new) - 1
    return result


def _group_max(scores: Scores, first: Offsets) -> Scores:
    result: Scores = np.maximum.reduceat(scores, first)
    return result


def groups_of(data: MutableMapping[str, Any], text: str, starts: Offsets, ends: Offsets) -> Offsets:
    """The sentence groups of all units of a document (``starts``/``ends``: every unit), computed on the
    first read that needs them and kept in its parsed ``data``."""
    group = data.get(GROUPS_KEY)
    if not isinstance(group, np.ndarray) or len(group) != len(starts):
        group = sentence_groups(text, starts, ends)
        data[GROUPS_KEY] = group
    return group


def choose_sentences(
    ranking: Ranking, index: UnitIndex, view: tuple[Offsets, Offsets, int], blocked: Mask, max_chars: int,
    k: int | None, group: Offsets,
) -> Selection:
    """``readers.retrieval.methods.choose_units`` over whole sentences: the view's units grouped by
    ``group`` (their slice of :func:`groups_of`), chosen per group, and given back as a selection of the
    view's own units (:func:`ungrouped`: a passage is a run of units, as the Reader anchors it); a region
    is one run already and is chosen as before."""
    starts, ends, first = view
    if ranking.method == LABELS["region"] or not len(starts):
        return choose_units(ranking, index, view, blocked, max_chars, k)
    group = _within(group, starts, ends, max(max_chars, UNIT_CAP))
    by_group, g_starts, g_ends, g_blocked = grouped(ranking, starts, ends, blocked, group)
    return ungrouped(choose_units(by_group, index, (g_starts, g_ends, first), g_blocked, max_chars, k), group,
                     starts, ends, blocked)


def ungrouped(chosen: Selection, group: Offsets, starts: Offsets, ends: Offsets, blocked: Mask) -> Selection:
    """A selection of groups as one of their units: each unit of a chosen group serves the group's slots
    at its score; the cost and the number of passages are the same (adjacent groups are adjacent units)."""
    bounds = np.r_[np.flatnonzero(np.r_[True, group[1:] != group[:-1]]), len(group)].tolist()
    out = Selection(starts, ends, blocked, chosen.k, spent=dict(chosen.spent), cost=chosen.cost, runs=chosen.runs)
    for g, slots in chosen.slots.items():
        for u in range(bounds[g], bounds[g + 1]):
            out.slots[u] = set(slots)
            out.best[u] = chosen.best[g]
    return out
