"""Location methods of the text-like Readers (``ReadIntent.method``, paper §4.2).

A location method turns one intent into per-unit scores (one array per slot)
that the Text Reader's greedy :func:`readers.retrieval.bm25index.select` fills a budget
from, or, for ``region``, into one contiguous run of units. Either way the
passages are runs of units, so they stay exact slices of the full view and
the Reader's coverage and anchors work unchanged.

* ``lexical``: exact terms and numbers. A unit scores the rarity weights of the
  query's content words and numbers it contains verbatim (case-insensitive,
  whole words; ``1,234`` matches ``1234``). One regex pass over the view; no
  stemming, no BM25 length normalisation, no neighbour smoothing.
* ``bm25``: sentence BM25 smoothed with the neighbours' scores (the default).
* ``hybrid``: BM25's top :data:`HYBRID_SHORTLIST` units re-ranked by
  ``(1 - w) x BM25 / max + w x cosine`` with ``w`` = :data:`HYBRID_DENSE_WEIGHT`,
  the cosine coming from ``readers.retrieval.dense`` (an optional extra), then smoothed
  with the neighbours like BM25. Only the shortlist is embedded (and cached per
  artifact), so a 250-page filing is never embedded whole on the request path.
  Without the extra, or when the model fails: BM25 and the flag
  ``hybrid-unavailable``.
* ``region``: one coherent region (long, multi-span evidence such as a meeting
  discussion wants one region, not sentence fragments: EVIDENCE-NOTES). Its
  terms are the query's content words without question phrasing
  ("summarize", "discussion", "think", ...). Within the best window of
  :data:`REGION_CONTEXT` x the budget (the discussion), the run of units within
  the budget that covers the most terms (each term saturating, weighted by its
  rarity among such windows), trimmed to its matching units and then grown
  outward to the run around it that uses the most of the budget. Slots share
  the one region.

Measured (scripts/eval_evidence.py --sweep 1000,1500,2000): on COVID-QA's
evaluation documents lexical and bm25 are ~14 points above the fixed-window
baseline at less exposure, region ~3 below (its question-phrasing and context
rules are for meetings; the selector does not pick it there). On QMSum's
evaluation documents region's recall is 13.6 / 19.4 / 24.1% at 1,000 / 1,500 /
2,000 chars against the window's 13.0 / 19.0 / 22.1%, at slightly less exposure
(calibration split, where it was tuned: 18.3 / 25.3 / 32.0% against
15.1 / 20.1 / 25.6%).
"""

from __future__ import annotations

import importlib
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np
from xxhash import xxh3_64_intdigest

from readers.base import Parsed, ReadIntent
from readers.retrieval.bm25index import (
    Mask,
    Offsets,
    Scores,
    Selection,
    UnitIndex,
    candidates,
    content_tokens,
    contextual_scores,
    select,
    smoothed,
    tokenize,
)

METHODS = ("lexical", "bm25", "hybrid", "region")
DEFAULT_METHOD = "bm25"
LABELS = {
    "lexical": "lexical",
    "bm25": "bm25+neighbours",
    "hybrid": "hybrid (bm25 shortlist + dense)",
    "region": "region (query-term hotspot)",
}
"""What ``Scope.method`` says for each method; each label starts with the method's name."""

HYBRID_SHORTLIST = 50
"""Units re-ranked densely: BM25's top 50 hold the evidence sentence 93% of the time (EVIDENCE-NOTES)."""

HYBRID_DENSE_WEIGHT = 0.3
"""Dense share w of the fused score: readers.retrieval.dense.FUSION_WEIGHT, the best of 0.1-1.0 on the
COVID-QA dev calibration split (scripts/bench_dense.py), with this same fusion and smoothing."""

DENSE_KEY = "text-units"
"""Cache key under which readers.retrieval.dense keeps the embeddings of a parsed artifact's units."""

Adjust = Callable[[int, Scores], Scores]
"""(slot number, its raw unit scores) -> the scores to rank by (see :func:`rank_units`)."""

_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_WORD = re.compile(r"[^\W\d_]\w+")


@dataclass
class Ranking:
    """Per-slot scores over the units in view, and how they were made.

    ``raw`` feeds coverage candidates (unsmoothed), ``ranked`` the selection.
    """

    raw: dict[int, Scores]
    ranked: dict[int, Scores]
    method: str
    flags: tuple[str, ...] = field(default=())
    query: str = ""  # the searched slots together (what a region is scored against)

    @property
    def verbatim(self) -> bool:
        """A positive score means the unit holds a slot's word or number as written."""
        return self.method == LABELS["lexical"]


# -- lexical -----------------------------------------------------------------------


@cache
def _stopwords() -> frozenset[str]:
    from bm25s.stopwords import STOPWORDS_EN_PLUS

    return frozenset(STOPWORDS_EN_PLUS)


def lexical_terms(query: str) -> list[str]:
    """Regex patterns of the query's content words and numbers, in order, without repeats."""
    stop = _stopwords()
    patterns: list[str] = []
    for number in _NUMBER.findall(query):
        digits = number.replace(",", "")
        body = r"\.".join(",?".join(part) for part in digits.split("."))
        patterns.append(rf"(?<![\d,.]){body}(?![\d]|[.,]\d)")
    for word in _WORD.findall(query.lower()):
        if word not in stop:
            patterns.append(rf"\b{re.escape(word)}\b")
    return list(dict.fromkeys(patterns))


def lexical_scores(text: str, starts: Offsets, ends: Offsets, query: str) -> Scores:
    """Per unit: sum of log(1 + units / units containing the term) over the terms it contains."""
    scores = np.zeros(len(starts), dtype=np.float64)
    terms = lexical_terms(query)
    if not terms or not len(starts):
        return scores
    pattern = re.compile("|".join(f"({t})" for t in terms), re.IGNORECASE)
    found = [(m.start(), m.lastindex or 1) for m in pattern.finditer(text, int(starts[0]), int(ends[-1]))]
    if not found:
        return scores
    at, term = np.asarray(found, dtype=np.int64).T
    units = np.searchsorted(ends, at, side="right")
    inside = units < len(starts)
    inside[inside] &= starts[units[inside]] <= at[inside]  # not in the gap between two units
    for t in np.unique(term[inside]):
        hit = np.unique(units[inside & (term == t)])
        scores[hit] += math.log(1 + len(starts) / len(hit))
    return scores


# -- hybrid ------------------------------------------------------------------------


def dense_module() -> Any | None:
    """``readers.retrieval.dense`` when the dense extra is installed and its model loads, else None."""
    try:
        dense = importlib.import_module("readers.retrieval.dense")
    except ImportError:
        return None
    return dense if dense.available() else None


def hybrid_scores(scores: Scores, blocked: Mask, cosine: Callable[[list[int]], Scores]) -> Scores:
    """(1 - w) x BM25 / max, plus w x max(cosine, 0) for BM25's shortlist (``readers.retrieval.dense.fuse``).

    ``cosine(ids)`` gives the dense similarity of the query to units ``ids``; units off the
    shortlist keep only their BM25 share, so fusion never lifts a unit BM25 did not score.
    """
    top = float(scores.max()) if len(scores) else 0.0
    if top <= 0:
        return np.zeros(len(scores), dtype=np.float64)
    fused: Scores = (1 - HYBRID_DENSE_WEIGHT) * scores / top
    shortlist = candidates(scores, blocked)[:HYBRID_SHORTLIST]
    if shortlist:
        fused[shortlist] += HYBRID_DENSE_WEIGHT * np.clip(np.asarray(cosine(shortlist), dtype=np.float64), 0.0, None)
    return fused


MAX_WARM_UNITS = 20_000
"""Units :func:`warm_dense` embeds per artifact at most (the 252-page 3M 10-K has 5,940)."""


def warm_dense(parsed: Parsed, stop: Callable[[], bool], limit: int | None = None) -> int:
    """Embed the units of a text-like artifact ahead of its next hybrid reads (at most ``limit``
    new ones per call); how many were added.

    Off the request path only (a background thread): with all units cached, a new question
    costs one query embedding instead of up to readers.retrieval.dense.MAX_NEW_UNITS unit embeddings.
    Page markers are skipped; nothing happens without the dense extra or unit offsets.
    """
    dense = dense_module()
    starts, ends = parsed.data.get("unit_starts"), parsed.data.get("unit_ends")
    if dense is None or not isinstance(starts, np.ndarray) or not isinstance(ends, np.ndarray):
        return 0
    markers = parsed.data.get("markers")
    ids = np.arange(len(starts), dtype=np.int64)
    if isinstance(markers, np.ndarray) and markers.shape == ids.shape:
        ids = ids[~markers]
    text = parsed.full_view

    def texts_of(chunk: Sequence[int]) -> list[str]:
        return [text[int(starts[i]) : int(ends[i])] for i in chunk]

    added: int = dense.warm_units(parsed, DENSE_KEY, ids[:MAX_WARM_UNITS], texts_of, stop, limit)
    return added


def _cosine(dense: Any, parsed: Parsed, starts: Offsets, ends: Offsets, ids: Offsets, query: str) -> Callable[
    [list[int]], Scores
]:
    """The dense similarity of ``query`` to units of the view (positions local to the view; ``ids``, sorted,
    are their ids in the artifact's dense cache)."""
    text = parsed.full_view

    def texts_of(wanted: Sequence[int]) -> list[str]:
        at = np.searchsorted(ids, np.asarray(wanted, dtype=np.int64))
        return [text[int(starts[i]) : int(ends[i])] for i in at.tolist()]

    def cosine(local: list[int]) -> Scores:
        similarities = dense.unit_similarities(parsed, DENSE_KEY, ids[np.asarray(local, dtype=np.int64)], texts_of,
                                               query)
        return np.nan_to_num(np.asarray(similarities, dtype=np.float64))  # NaN: a unit left unembedded

    return cosine


# -- region ------------------------------------------------------------------------

REGION_SATURATION = 3.0
"""A query term found in c units of a window adds idf x c / (c + REGION_SATURATION), the idf
counted over the windows (a meeting's topic words are in most windows, so they weigh little).
Covering several distinct terms beats repeating one: on QMSum's calibration split at 1,500
chars, summing the sentence scores reached 19.5% recall; this 20.7% (idf over sentences 19.0%)."""

REGION_CONTEXT = 3.0
"""The region is the best budget-sized window inside the best window of REGION_CONTEXT x the budget:
a meeting discusses a topic over a few thousand characters (QMSum's evidence: median 2,800), and a
budget-sized peak outside that discussion is more often a stray mention. On QMSum's calibration split
+0.2 to +1.3 points at 1,000-2,000 chars on each half of its documents (2x and 4x: less)."""

REGION_QUESTION_WORDS = (
    "summarize summary discussion discuss discussed discussing think thought opinion say said decide decided "
    "decision conclusion talk talked mention mentioned group team members member what did when about why how which"
)
"""How questions about a meeting are phrased, not what they are about ("Summarize the discussion about
X", "What did the group think of Y when discussing Z"): left out of the region's terms. The words are
rare in a transcript, so their idf is high and they pull the region to stray mentions; on QMSum's
calibration split at 1,500 chars dropping them and other function words (with :func:`_grow`'s
fuller region) took recall from 20.7% to 24.5%."""


@cache
def _question_stems() -> frozenset[str]:
    return frozenset(tokenize(REGION_QUESTION_WORDS))


def region_terms(query: str) -> list[str]:
    """The query's index tokens that say what it is about: content words, not question phrasing;
    all of its tokens when that leaves none."""
    tokens = tokenize(query)
    content = content_tokens(query)
    topical = [t for t in tokens if t in content and t not in _question_stems()]
    return topical or tokens


def term_presence(index: UnitIndex, query: str, first: int, n: int) -> Scores:
    """0/1 matrix (distinct region term x unit) over the ``n`` units from ``first``."""
    rows: list[Scores] = []
    keys = np.fromiter(map(xxh3_64_intdigest, map(str.encode, region_terms(query))), np.uint64)
    for term in np.unique(keys >> np.uint64(index.shift)):
        at = int(np.searchsorted(index.terms, term))
        if at == len(index.terms) or index.terms[at] != term:
            continue
        units = index.docs[int(index.indptr[at]) : int(index.indptr[at + 1])].astype(np.int64) - first
        units = units[(units >= 0) & (units < n)]
        if len(units):
            row = np.zeros(n, dtype=np.float64)
            row[units] = 1.0
            rows.append(row)
    return np.asarray(rows, dtype=np.float64).reshape(len(rows), n)


def region_selection(
    index: UnitIndex,
    view: tuple[Offsets, Offsets, int],
    query: str,
    ranked: dict[int, Scores],
    blocked: Mask,
    max_chars: int,
) -> Selection:
    """One run of units: the window within ``max_chars`` covering the query's terms best,
    trimmed to the units that match and grown back, a unit a side in turn, to the budget."""
    starts, ends, first = view
    sel = Selection(starts, ends, blocked)
    presence = term_presence(index, query, first, len(starts))
    presence[:, blocked] = 0.0
    if not presence.any():
        return sel
    lo, hi = _best_window(starts, ends, blocked, presence, max_chars)
    lo, hi = _grow(starts, ends, blocked, max_chars, lo, hi)
    for u in range(lo, hi + 1):
        sel.slots[u] = {j for j, scores in ranked.items() if scores[u] > 0}
        sel.best[u] = max((float(scores[u]) for scores in ranked.values()), default=0.0)
    sel.cost, sel.runs = int(ends[hi] - starts[lo]), 1
    return sel


def _window_scores(starts: Offsets, ends: Offsets, presence: Scores, span: int) -> tuple[Scores, Offsets, Scores]:
    """Per unit ``hi``: the score of the window of units ending at ``hi`` within ``span`` chars
    (starting at the first unit within ``span`` of its end), that window's first unit, and the idf."""
    n = len(starts)
    his = np.arange(n)
    los = np.minimum(np.searchsorted(starts, ends - span, side="left"), his)
    counts = np.zeros((len(presence), n + 1))
    np.cumsum(presence, axis=1, out=counts[:, 1:])
    inside = counts[:, his + 1] - counts[:, los]
    df = (inside > 0).sum(axis=1)
    idf = np.log(1 + (n - df + 0.5) / (df + 0.5))
    return idf @ (inside / (inside + REGION_SATURATION)), los, idf


def _best_window(starts: Offsets, ends: Offsets, blocked: Mask, presence: Scores, max_chars: int) -> tuple[int, int]:
    """[lo, hi] (inclusive) of unblocked units, span <= max_chars, covering the query best
    within the best wider window (:data:`REGION_CONTEXT`), trimmed to matching units; the best
    unit alone when no window fits the budget."""
    his = np.arange(len(starts))
    score, los, idf = _window_scores(starts, ends, presence, max_chars)
    walls = np.concatenate(([0], np.cumsum(blocked)))
    too_long = (ends - starts) > max_chars
    score[too_long | (walls[his + 1] - walls[los] > 0)] = -1.0
    if float(score.max()) <= 0:
        u = int(np.argmax(idf @ presence))  # no window fits: the best unit alone (it may exceed the budget)
        return u, u
    wide, wide_los, _ = _window_scores(starts, ends, presence, int(REGION_CONTEXT * max_chars))
    end = int(np.argmax(wide))
    within = (his <= end) & (los >= wide_los[end])
    if float(score[within].max(initial=0.0)) > 0:
        score[~within] = -1.0
    hi = int(np.argmax(score))
    lo = int(los[hi])
    matched: Mask = np.asarray(presence.any(axis=0), dtype=np.bool_)
    while lo < hi and not matched[lo]:
        lo += 1
    while hi > lo and not matched[hi]:
        hi -= 1
    return lo, hi


def _grow(starts: Offsets, ends: Offsets, blocked: Mask, max_chars: int, lo: int, hi: int) -> tuple[int, int]:
    """The run around [lo, hi] within ``max_chars`` that uses the most characters (units are
    whole, so growing a unit a side in turn can stop short); of equals, the most centred."""
    n = len(starts)
    best = (int(ends[hi] - starts[lo]), 0, lo, hi)
    left, right = lo, hi
    while right + 1 < n and not blocked[right + 1] and int(ends[right + 1] - starts[left]) <= max_chars:
        right += 1
    while left >= 0 and not blocked[left] and int(ends[hi] - starts[left]) <= max_chars:
        while int(ends[right] - starts[left]) > max_chars:  # a unit more on the left, fewer on the right
            right -= 1
        balance = -abs(int(starts[lo] - starts[left]) - int(ends[right] - ends[hi]))
        best = max(best, (int(ends[right] - starts[left]), balance, left, right))
        left -= 1
    return best[2], best[3]


# -- dispatch ----------------------------------------------------------------------


def rank_units(
    parsed: Parsed,
    index: UnitIndex,
    view: tuple[Offsets, Offsets, int],
    intent: ReadIntent,
    slots: dict[int, str],
    blocked: Mask,
    silent: Mask | None = None,
    adjust: Adjust | None = None,
    ids: Offsets | None = None,
) -> Ranking:
    """Per-slot scores of the units in ``view`` = (starts, ends, first unit) by ``intent.method``.

    ``slots`` maps slot numbers to the slots worth searching (those with content words);
    ``silent`` units never score (a PDF's page markers), so no neighbour inherits from them;
    ``adjust(j, raw)`` changes slot j's raw scores before they are ranked, whatever the method (the
    Code Reader lifts the definition of a symbol the slot names; a region is placed by where the
    terms are, so there they only say which slots a unit serves). ``first`` is the view's first
    unit in ``index``; ``ids`` are the view's units in the artifact's dense cache when they are not
    ``first, first + 1, ...`` (a Reader that indexes a scope on its own). An unknown method is read
    as the default.
    """
    starts, ends, first = view
    method = intent.method if intent.method in METHODS else DEFAULT_METHOD
    if method == "lexical":
        scored = {j: lexical_scores(parsed.full_view, starts, ends, slot) for j, slot in slots.items()}
        raw = _silenced(_adjusted(scored, adjust), silent)
        return Ranking(raw, raw, LABELS["lexical"])
    part = slice(first, first + len(starts))
    scored = {j: contextual_scores(index, slot, intent.context)[part] for j, slot in slots.items()}
    raw = _silenced(_adjusted(scored, adjust), silent)
    ranked = {j: smoothed(scores) for j, scores in raw.items()}
    if method != "hybrid":
        return Ranking(raw, ranked, LABELS[method], query=" ".join(slots.values()))
    dense = dense_module()
    if dense is None:
        return Ranking(raw, ranked, LABELS["bm25"], ("hybrid-unavailable",))
    dense_ids = np.arange(first, first + len(starts), dtype=np.int64) if ids is None else ids
    try:
        fused = {
            j: smoothed(hybrid_scores(scores, blocked, _cosine(dense, parsed, starts, ends, dense_ids, slots[j])))
            for j, scores in raw.items()
        }
    except Exception:  # noqa: BLE001 - onnxruntime's errors derive from Exception; BM25 still answers
        return Ranking(raw, ranked, LABELS["bm25"], ("hybrid-unavailable",))
    return Ranking(raw, fused, LABELS["hybrid"])


def _adjusted(raw: dict[int, Scores], adjust: Adjust | None) -> dict[int, Scores]:
    return raw if adjust is None else {j: adjust(j, scores) for j, scores in raw.items()}


def _silenced(raw: dict[int, Scores], silent: Mask | None) -> dict[int, Scores]:
    if silent is None:
        return raw
    return {j: np.where(silent, 0.0, scores) for j, scores in raw.items()}


def choose_units(
    ranking: Ranking,
    index: UnitIndex,
    view: tuple[Offsets, Offsets, int],
    blocked: Mask,
    max_chars: int,
    k: int | None,
) -> Selection:
    """The units to send: one region for ``region``, else the per-slot budget fill."""
    starts, ends, first = view
    if ranking.method == LABELS["region"]:
        return region_selection(index, (starts, ends, first), ranking.query, ranking.ranked, blocked, max_chars)
    return select(starts, ends, ranking.ranked, blocked, max_chars, k)
