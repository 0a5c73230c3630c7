"""BM25 over the units of one document, and the greedy choice of passages.

Documents and queries go through the same tokenizer: bm25s' regex split,
lower-casing, bm25s' English stopwords, the Snowball English stemmer. A
separate, broader stopword list decides which query words are *content* words
(used for coverage and for spotting intents with nothing to search for).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache, lru_cache
from itertools import chain
from operator import itemgetter
from typing import Any

import numpy as np
import numpy.typing as npt
from xxhash import xxh3_64_intdigest

Scores = npt.NDArray[np.float64]
Offsets = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]
Hashes = npt.NDArray[np.uint64]

NEIGHBOUR_WEIGHT = 0.3
"""Smoothed score = score + NEIGHBOUR_WEIGHT x (previous + next unit's score)."""

MAX_CANDIDATES = 200
"""Units considered per slot, best first."""

MAX_MISSES = 3
RELATIVE_FLOOR = 0.5
"""A slot stops filling at units scoring below this fraction of its best unit."""
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


def _stemmer(cache: bool = True) -> Any:
    import Stemmer

    # A fresh stemmer per call: PyStemmer objects keep a cache and are not thread-safe.
    return Stemmer.Stemmer("english") if cache else Stemmer.Stemmer("english", 0)


@cache
def _content_stopwords() -> list[str]:
    return sorted(set(_bm25s().stopwords.STOPWORDS_EN_PLUS) | _CONTENT_EXTRA_STOPWORDS)


_SHORT_AMPERSAND = re.compile(r"\b(\w{1,3})&(\w{1,3})\b")


def join_ampersands(text: str) -> str:
    """'R&D' -> 'RD', 'S&P' -> 'SP', 'AT&T' -> 'ATT': otherwise single letters vanish in tokenizing."""
    return _SHORT_AMPERSAND.sub(r"\1\2", text) if "&" in text else text


def tokenize(text: str) -> list[str]:
    """Stemmed index tokens of ``text`` (bm25s English stopwords removed)."""
    result = _bm25s().tokenize(
        join_ampersands(text), stopwords="en", stemmer=_stemmer(), return_ids=False, show_progress=False
    )
    return list(result[0]) if result else []


@lru_cache(maxsize=512)
def content_tokens(text: str) -> frozenset[str]:
    """Stemmed content words: index tokens minus a broad English stopword list.

    Kept for the last few hundred texts: one locate asks again about the same slots and passages
    (ranking, then each slot's coverage signals), and tokenizing costs about a millisecond each."""
    result = _bm25s().tokenize(
        join_ampersands(text),
        stopwords=_content_stopwords(),
        stemmer=_stemmer(),
        return_ids=False,
        show_progress=False,
    )
    return frozenset(result[0]) if result else frozenset()


class UnitIndex:
    """BM25 (Lucene variant, as bm25s computes it) over the units; picklable, read-only.

    Terms are 64-bit hashes of stems, kept sorted, with a posting list (unit, BM25
    weight) each. Building it takes a few C-level passes over the tokens and no
    Python step per token, so its cost stays linear in the text.
    """

    def __init__(self, texts: Sequence[str]) -> None:
        self.size = len(texts)
        self.shift = 1
        self.terms: Hashes = np.zeros(0, dtype=np.uint64)
        self.indptr: Offsets = np.zeros(1, dtype=np.int64)
        self.docs: npt.NDArray[np.int32] = np.zeros(0, dtype=np.int32)
        self.weights: npt.NDArray[np.float32] = np.zeros(0, dtype=np.float32)
        if texts:
            self._build(*_stem_hashes(texts))

    def _build(self, stems: Hashes, docs: Offsets) -> None:
        """Posting lists from the stem hash and unit of every indexed token.

        One sort of (term, unit) keys: the unit in the low ``shift`` bits, the term in
        the stem hash's other (at least 44) bits; two of a few million distinct stems
        are unlikely to share them, and if they do they only share postings.
        """
        lengths = np.bincount(docs, minlength=self.size)
        if not len(stems):
            return
        self.shift = max(1, (self.size - 1).bit_length())
        keys = (stems >> np.uint64(self.shift) << np.uint64(self.shift)) | docs.astype(np.uint64)
        del stems, docs
        keys.sort()
        at = np.flatnonzero(np.append(True, keys[1:] != keys[:-1]))
        tf = np.diff(np.append(at, len(keys))).astype(np.float64)
        keys = keys[at]
        docs = (keys & np.uint64((1 << self.shift) - 1)).astype(np.int64)
        terms = keys >> np.uint64(self.shift)
        del keys
        term_at = np.flatnonzero(np.append(True, terms[1:] != terms[:-1]))
        self.terms = terms[term_at]
        self.indptr = np.append(term_at, len(terms)).astype(np.int64)
        df = np.diff(self.indptr)
        idf = np.log(1 + (self.size - df + 0.5) / (df + 0.5)).astype(np.float32)
        norm = K1 * ((1 - B) + B * lengths[docs] / max(float(lengths.mean()), 1e-9))
        self.weights = (np.repeat(idf, df) * (tf / (norm + tf))).astype(np.float32)
        self.docs = docs.astype(np.int32)

    def _document_frequency(self, hashes: Hashes) -> npt.NDArray[np.int64]:
        """Units holding each term (by stem hash; 0 for a term the index lacks)."""
        if not len(self.terms) or not len(hashes):
            return np.zeros(len(hashes), dtype=np.int64)
        terms = hashes >> np.uint64(self.shift)
        at = np.minimum(np.searchsorted(self.terms, terms), len(self.terms) - 1)
        held = self.terms[at] == terms
        df: npt.NDArray[np.int64] = np.where(held, self.indptr[at + 1] - self.indptr[at], 0)
        return df

    def term_weights(self, hashes: Hashes) -> npt.NDArray[np.float64]:
        """BM25's rarity weight (idf) of each term; a term no unit holds weighs as the rarest."""
        df = self._document_frequency(hashes).astype(np.float64)
        return np.log(1 + (self.size - df + 0.5) / (df + 0.5))

    def term_presence(self, hashes: Hashes) -> npt.NDArray[np.float64]:
        """1.0 for each term some unit holds, else 0.0."""
        return (self._document_frequency(hashes) > 0).astype(np.float64)

    def scores(self, query: str) -> Scores:
        """BM25 score of each unit (zeros when no query token is in the index)."""
        total = np.zeros(self.size, dtype=np.float32)
        if not len(self.terms):
            return total.astype(np.float64)
        for term in _hashes(tokenize(query)) >> np.uint64(self.shift):
            at = int(np.searchsorted(self.terms, term))
            if at < len(self.terms) and self.terms[at] == term:
                lo, hi = int(self.indptr[at]), int(self.indptr[at + 1])
                total[self.docs[lo:hi]] += self.weights[lo:hi]  # a term's units are distinct
        return total.astype(np.float64)


CONTEXT_WEIGHT = 0.25
"""How much the session context counts against the slot itself: enough to order passages
that match the slot about equally, too little to lift a weak match over a strong one."""


def contextual_scores(index: UnitIndex, query: str, context: str | None) -> Scores:
    """BM25 of ``query``; units it matches gain CONTEXT_WEIGHT times the context's score."""
    scores = index.scores(query)
    if not context:
        return scores
    extra = index.scores(context)
    return scores + CONTEXT_WEIGHT * extra * (scores > 0)


K1 = 1.5
B = 0.75
_TOKEN = re.compile(r"\w\w+")  # what bm25s' r"(?u)\b\w\w+\b" finds, a little faster
_CHUNK = 8192


def term_hashes(stems: Sequence[str]) -> Hashes:
    """The index's hashes of stemmed terms (as ``content_tokens`` gives them)."""
    return _hashes(list(stems))


def _hashes(words: Sequence[str]) -> Hashes:
    """Stable 64-bit hashes (xxh3) of ``words``."""
    return np.fromiter(map(xxh3_64_intdigest, map(str.encode, words)), np.uint64, len(words))


@cache
def _stopword_hashes() -> Hashes:
    return _hashes(_bm25s().stopwords.STOPWORDS_EN)


def _stem_hashes(texts: Sequence[str]) -> tuple[Hashes, Offsets]:
    """Stem hash and unit of every token of ``texts`` but bm25s' English stopwords."""
    stemmer = _stemmer(cache=False)  # words are stemmed once per chunk: a cache only costs
    stems: list[Hashes] = []
    units: list[Offsets] = []
    for at in range(0, len(texts), _CHUNK):
        per_unit = [_TOKEN.findall(join_ampersands(t).lower()) for t in texts[at : at + _CHUNK]]
        flat = list(chain.from_iterable(per_unit))
        raw = _hashes(flat)
        keep = ~np.isin(raw, _stopword_hashes())
        stems.append(_stems_of(flat, raw, stemmer)[keep])
        counts = np.fromiter(map(len, per_unit), np.int64, len(per_unit))
        units.append(np.repeat(np.arange(at, at + len(per_unit), dtype=np.int64), counts)[keep])
    return np.concatenate(stems), np.concatenate(units)


def _stems_of(tokens: list[str], raw: Hashes, stemmer: Any) -> Hashes:
    """Stem hash of each token; each distinct token is stemmed once, numbers not at all."""
    distinct, first, inverse = np.unique(raw, return_index=True, return_inverse=True)
    words = _pick(tokens, first)
    wordy = np.flatnonzero(~np.fromiter(map(str.isdigit, words), np.bool_, len(words)))
    distinct[wordy] = _hashes(stemmer.stemWords(_pick(words, wordy)))
    result: Hashes = distinct[inverse]
    return result


def _pick(items: list[str], at: npt.NDArray[np.intp]) -> list[str]:
    """items[i] for each i in ``at`` (one C-level pass)."""
    if len(at) < 2:
        return [items[i] for i in at.tolist()]
    return list(itemgetter(*at.tolist())(items))


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
        best = float(scores[queues[j][0]]) if queues[j] else 0.0
        _fill(sel, j, queues[j][1:], scores, share, max_chars, RELATIVE_FLOOR * best)
    return sel


def _fill(
    sel: Selection, slot: int, queue: list[int], scores: Scores, share: float, max_chars: int, floor: float
) -> None:
    misses = 0
    for u in queue:
        if float(scores[u]) < floor:
            return
        room = min(share - sel.spent.get(slot, 0), max_chars - sel.cost)
        if room <= 0 or misses > MAX_MISSES:
            return
        if not sel.offer(u, slot, float(scores[u]), room):
            misses += 1
