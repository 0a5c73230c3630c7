"""BM25 over the units of one document, and the greedy choice of passages.

Documents and queries go through the same tokenizer: bm25s' regex split,
lower-casing, bm25s' English stopwords, the Snowball English stemmer. A
separate, broader stopword list decides which query words are *content* words
(used for coverage and for spotting intents with nothing to search for).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np
import numpy.typing as npt

Scores = npt.NDArray[np.float64]
Offsets = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]

NEIGHBOUR_WEIGHT = 0.3
"""Smoothed score = score + NEIGHBOUR_WEIGHT x (previous + next unit's score)."""

MAX_CANDIDATES = 200
"""Units considered per slot, best first."""

MAX_MISSES = 3
"""Candidates that do not fit the remaining budget before a slot stops filling."""

_CONTENT_EXTRA_STOPWORDS = frozenset(
    [
        "would",
        "could",
        "may",
        "might",
        "must",
        "shall",
        "also",
        "tell",
        "show",
        "give",
        "find",
        "please",
        "get",
        "say",
        "says",
        "said",
        "anything",
        "something",
        "everything",
        "nothing",
        "thing",
        "things",
    ]
)


def _bm25s() -> Any:
    import bm25s

    return bm25s


def _stemmer() -> Any:
    import Stemmer

    # A fresh stemmer per call: PyStemmer objects keep a cache and are not thread-safe.
    return Stemmer.Stemmer("english")


@cache
def _content_stopwords() -> list[str]:
    return sorted(set(_bm25s().stopwords.STOPWORDS_EN_PLUS) | _CONTENT_EXTRA_STOPWORDS)


def tokenize(text: str) -> list[str]:
    """Stemmed index tokens of ``text`` (bm25s English stopwords removed)."""
    result = _bm25s().tokenize(text, stopwords="en", stemmer=_stemmer(), return_ids=False, show_progress=False)
    return list(result[0]) if result else []


def content_tokens(text: str) -> frozenset[str]:
    """Stemmed content words: index tokens minus a broad English stopword list."""
    result = _bm25s().tokenize(
        text,
        stopwords=_content_stopwords(),
        stemmer=_stemmer(),
        return_ids=False,
        show_progress=False,
    )
    return frozenset(result[0]) if result else frozenset()


class UnitIndex:
    """BM25 scores of every unit for a query; picklable, read-only after build."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.size = len(texts)
        self._retriever: Any = None
        if not texts:
            return
        bm25s = _bm25s()
        tokens = bm25s.tokenize(
            list(texts),
            stopwords="en",
            stemmer=_stemmer(),
            return_ids=True,
            show_progress=False,
        )
        if not tokens.vocab:  # nothing searchable (bm25s cannot index an empty vocabulary)
            return
        retriever = bm25s.BM25()
        retriever.index(tokens, show_progress=False)
        self._retriever = retriever

    def scores(self, query: str) -> Scores:
        """BM25 score of each unit (zeros when no query token is in the index)."""
        zeros: Scores = np.zeros(self.size, dtype=np.float64)
        if self._retriever is None:
            return zeros
        vocab: dict[str, int] = self._retriever.vocab_dict
        ids = [vocab[token] for token in tokenize(query) if token in vocab]
        if not ids:
            return zeros
        raw = self._retriever.get_scores_from_ids(ids)
        return np.asarray(raw, dtype=np.float64)


# -- choosing passages -------------------------------------------------------------


def smoothed(scores: Scores) -> Scores:
    """score + NEIGHBOUR_WEIGHT x (previous + next), zero past the ends."""
    padded = np.pad(scores, 1)
    result: Scores = scores + NEIGHBOUR_WEIGHT * (padded[:-2] + padded[2:])
    return result


def blocked_mask(starts: Offsets, ends: Offsets, exclude: Sequence[tuple[int, int]]) -> Mask:
    """Units overlapping any non-empty excluded [start, end) span (units are sorted, disjoint)."""
    mask: Mask = np.zeros(len(starts), dtype=np.bool_)
    for lo, hi in exclude:
        if hi > lo:
            first = int(np.searchsorted(ends, lo, side="right"))
            last = int(np.searchsorted(starts, hi, side="left"))
            mask[first:last] = True
    return mask


def candidates(scores: Scores, blocked: Mask) -> list[int]:
    """Unit indices with a positive score, best first, at most MAX_CANDIDATES."""
    usable = np.flatnonzero((scores > 0) & ~blocked)
    order = usable[np.argsort(-scores[usable], kind="stable")]
    return [int(u) for u in order[:MAX_CANDIDATES]]


@dataclass
class Selection:
    """Units picked so far, the slots each serves, and what the passages cost."""

    starts: Offsets
    ends: Offsets
    blocked: Mask
    k: int | None = None
    slots: dict[int, set[int]] = field(default_factory=dict)
    best: dict[int, float] = field(default_factory=dict)
    spent: dict[int, int] = field(default_factory=dict)
    cost: int = 0
    runs: int = 0

    def offer(self, u: int, slot: int, score: float, room: float, alone: float | None = None) -> bool:
        """Take unit ``u`` and its successor within ``room`` chars, else ``u`` alone within
        ``alone`` (default ``room``) chars; never more than k passages."""
        nxt = u + 1
        pair = [u, nxt] if nxt < len(self.blocked) and not self.blocked[nxt] else [u]
        for units, limit in ((pair, room), ([u], room if alone is None else alone)):
            chars, runs = self.delta(units)
            if chars <= limit and (self.k is None or self.runs + runs <= self.k):
                self._take(units, slot, score, chars, runs)
                return True
        return False

    def delta(self, units: Sequence[int]) -> tuple[int, int]:
        """(extra passage chars, extra passages) if ``units`` were added."""
        taken = set(self.slots)
        chars = runs = 0
        for u in sorted(set(units) - taken):
            left, right = u - 1 in taken, u + 1 in taken
            chars += int(self.ends[u] - self.starts[u])
            chars += int(self.starts[u] - self.ends[u - 1]) if left else 0
            chars += int(self.starts[u + 1] - self.ends[u]) if right else 0
            runs += 1 - int(left) - int(right)
            taken.add(u)
        return chars, runs

    def _take(self, units: Sequence[int], slot: int, score: float, chars: int, runs: int) -> None:
        self.cost += chars
        self.runs += runs
        self.spent[slot] = self.spent.get(slot, 0) + chars
        for u in units:
            self.slots.setdefault(u, set()).add(slot)
            self.best[u] = max(self.best.get(u, 0.0), score)

    def passages(self) -> list[list[int]]:
        """Runs of consecutive unit indices, in document order."""
        runs: list[list[int]] = []
        for u in sorted(self.slots):
            if runs and runs[-1][-1] == u - 1:
                runs[-1].append(u)
            else:
                runs.append([u])
        return runs


def select(
    starts: Offsets,
    ends: Offsets,
    ranked: dict[int, Scores],
    blocked: Mask,
    max_chars: int,
    k: int | None,
) -> Selection:
    """Per slot, best units (each with its successor) in score order within the slot's share.

    First every slot gets its best unit (the batch's first unit is taken even when it
    alone exceeds ``max_chars``; nothing else may); then each slot fills up to
    ``max_chars / slots``. So the total is at most max(max_chars, one unit).
    """
    sel = Selection(starts, ends, blocked, k)
    queues = {j: candidates(scores, blocked) for j, scores in ranked.items()}
    for j, scores in ranked.items():
        if queues[j]:
            u = queues[j][0]
            alone = math.inf if not sel.slots else None  # the batch's first unit always fits
            sel.offer(u, j, float(scores[u]), max_chars - sel.cost, alone)
    share = max_chars / max(1, len(ranked))
    for j, scores in ranked.items():
        _fill(sel, j, queues[j][1:], scores, share, max_chars)
    return sel


def _fill(sel: Selection, slot: int, queue: list[int], scores: Scores, share: float, max_chars: int) -> None:
    misses = 0
    for u in queue:
        room = min(share - sel.spent.get(slot, 0), max_chars - sel.cost)
        if room <= 0 or misses > MAX_MISSES:
            return
        if not sel.offer(u, slot, float(scores[u]), room):
            misses += 1
