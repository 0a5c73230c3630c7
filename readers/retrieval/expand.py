"""Query expansion from the document's own vocabulary: the abbreviations it defines.

A question and its evidence often name the same thing differently: the agent asks about "HRCT" where
the paper writes "high resolution CT", or asks about "Middle East respiratory syndrome" where the
evidence sentence only says "MERS-CoV". BM25 sees no shared word, so the evidence ranks low (issue 27's
miss analysis: 81 of 196 paper misses rank the wrong sentences, often such paraphrase). A general
thesaurus would guess; the document itself says which forms are equal where it defines them:
"... high resolution computed tomography (HRCT) ..." or "HRCT (high resolution CT) ...".

:func:`glossary` finds those definitions with the Schwartz–Hearst algorithm (Schwartz & Hearst 2003, "A
simple algorithm for identifying abbreviation definitions in biomedical text"): a short form in
parentheses (2-10 characters, at most two words, a letter, starting with a letter or digit) after the
words that spell it, matched right to left, character by character, the short form's first
character at the start of a word; or, when the parentheses hold a longer phrase, the word before them
as the short form and the phrase as the long form. No list of domain words, so it reads a 10-K
("earnings before interest, taxes, depreciation and amortization (EBITDA)") as it reads a paper.

:func:`expansion` gives the text to search beside a query: the long forms of the short forms it
uses, and the short forms of the long forms it spells out. :func:`expanded_scores` adds that text's
BM25 scores, scaled by :data:`EXPANSION_WEIGHT`, to the units the query itself scores or that the
expansion scores, so a unit holding only the other form can rank too; it never replaces the query.

Cost: one regex pass over the full view when a document is first asked about (about 1 ms on a 40K-char
paper, 70-90 ms on a 1M-char 10-K, scripts/bench_quality_costs.py), kept in the parsed artifact; nothing
per unit at query time but one extra BM25 lookup when the query names a defined form.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from readers.retrieval.bm25index import Scores, UnitIndex
from readers.retrieval.methods import Adjust

EXPANSION_WEIGHT = 0.5
"""Share of a unit's expansion score added to its query score: the other form of a word the query uses
is evidence of the same need, weaker than the query's own words (0.5 and 1.0 measured the same on the
calibration split: covidqa 241 -> 244 of 332 at the Reader, same passage length)."""
MAX_DEFINITIONS = 5_000
"""Definitions kept per document: a 10-K defines a few hundred; past this the first ones win."""
MAX_SHORT = 10
"""Longest short form, in characters (Schwartz–Hearst)."""
MAX_SCAN_CHARS = 4_000_000
"""Characters of a full view scanned for definitions; the rest is not (bounded parse-time work)."""

_PAREN = re.compile(r"\(([^()\n]{0,60}?[^\W\d_][^()\n]{0,60})\)")  # with a letter: "(16,820)" is no definition
_WORD = re.compile(r"[^\W_]+(?:[-'’][^\W_]+)*")
_CLAUSE_END = re.compile(r"[.;:!?\[\]{}]|\n\s*\n")


@dataclass(frozen=True)
class Glossary:
    """The document's definitions both ways: short form -> long form, and long form (lowercase words
    joined by one space) -> short form."""

    long_of: Mapping[str, str]
    short_of: Mapping[str, str]

    def __bool__(self) -> bool:
        return bool(self.long_of)


EMPTY = Glossary({}, {})
GLOSSARY_KEY = "glossary"
"""Where :func:`glossary_of` keeps a document's definitions in its parsed data (a plain str -> str dict,
so the parsed store can save it)."""


def glossary(text: str) -> Glossary:
    """Every abbreviation ``text`` defines (the first definition of a short form wins)."""
    long_of: dict[str, str] = {}
    for match in _PAREN.finditer(text, 0, min(len(text), MAX_SCAN_CHARS)):
        pair = _definition(text, match)
        if pair is not None and pair[0] not in long_of:
            long_of[pair[0]] = pair[1]
            if len(long_of) >= MAX_DEFINITIONS:
                break
    short_of = {_norm(long): short for short, long in long_of.items()}
    return Glossary(long_of, short_of)


def glossary_of(data: MutableMapping[str, Any], text: str) -> Glossary:
    """The glossary of the document whose parsed data is ``data`` and full view ``text``, found on the
    first read that asks and kept in ``data``."""
    long_of = data.get(GLOSSARY_KEY)
    if not isinstance(long_of, dict):
        long_of = dict(glossary(text).long_of)
        data[GLOSSARY_KEY] = long_of
    return Glossary(long_of, {_norm(long): short for short, long in long_of.items()})


def _definition(text: str, match: re.Match[str]) -> tuple[str, str] | None:
    """(short form, long form) that the parenthesis at ``match`` defines, or None."""
    inside = match.group(1).strip()
    before = _clause_before(text, match.start())
    if _short_form_ok(inside):
        words = _WORD.findall(before)
        window = words[-min(len(inside) + 5, 2 * len(inside)) :]
        long = _long_form(inside, " ".join(window))
        return (inside, long) if long else None
    last = re.search(r"(\S+)\s*$", before)
    if last is None or len(inside.split()) < 2:
        return None
    short = last.group(1).strip(",\"'“”")
    if not _short_form_ok(short):
        return None
    long = _long_form(short, " ".join(_WORD.findall(inside)))
    return (short, long) if long else None


def _clause_before(text: str, at: int) -> str:
    """The text before ``at`` back to the last clause end (at most 200 characters)."""
    window = text[max(0, at - 200) : at]
    ends = list(_CLAUSE_END.finditer(window))
    return window[ends[-1].end() :] if ends else window


def _short_form_ok(short: str) -> bool:
    """2-10 characters, at most two words, a letter, starting with a letter or digit, not a plain
    lowercase word (a parenthetical remark) nor a citation year."""
    if not 2 <= len(short) <= MAX_SHORT or len(short.split()) > 2 or not short[0].isalnum():
        return False
    if not any(c.isalpha() for c in short) or (short.islower() and short.isalpha()):
        return False
    return not re.fullmatch(r"\d{4}[a-z]?|[ivx]+|[a-z]", short, re.IGNORECASE)


def _long_form(short: str, candidate: str) -> str | None:
    """Schwartz–Hearst's best long form of ``short`` at the end of ``candidate``: each of its letters
    and digits found right to left, the first one at the start of a word."""
    s, i = len(short) - 1, len(candidate) - 1
    while s >= 0:
        c = short[s].lower()
        if not c.isalnum():
            s -= 1
            continue
        while i >= 0 and (candidate[i].lower() != c or (s == 0 and i > 0 and candidate[i - 1].isalnum())):
            i -= 1
        if i < 0:
            return None
        i, s = i - 1, s - 1
    long = candidate[candidate.rfind(" ", 0, i + 1) + 1 :].strip()
    words = long.split()
    if len(long) <= len(short) or len(words) < 2 or short.lower() in (w.lower() for w in words):
        return None
    return long


def _norm(phrase: str) -> str:
    return " ".join(w.lower() for w in _WORD.findall(phrase))


def other_forms(query: str, words: Glossary) -> list[str]:
    """The other forms of the defined forms ``query`` uses: long forms of its short forms (as written,
    case-sensitive, whole tokens), short forms of the long forms it spells out (any case)."""
    if not words:
        return []
    tokens = set(re.findall(r"[^\s()\[\],;:?!\"“”]+", query))
    tokens |= {t.rstrip(".") for t in tokens}
    found = [words.long_of[t] for t in sorted(tokens) if t in words.long_of]
    spelled = f" {_norm(query)} "
    found += [short for long, short in words.short_of.items() if f" {long} " in spelled]
    return list(dict.fromkeys(found))


def expansion(query: str, words: Glossary) -> str:
    """The text searched beside ``query``: :func:`other_forms` joined."""
    return " ".join(other_forms(query, words))


def adjust_for(index: UnitIndex, words: Glossary, slots: Mapping[int, str], part: slice) -> Adjust | None:
    """The score adjustment that adds each slot's expansion (``readers.retrieval.methods.Adjust``): slot j's
    raw scores over the view (``part`` of the index) -> with its expansion's; None when no slot names a
    defined form."""
    extra = {j: expansion(slot, words) for j, slot in slots.items()}
    if not any(extra.values()):
        return None
    return lambda j, raw: expanded_scores(index, raw, extra.get(j, ""), part)


def expanded_scores(index: UnitIndex, raw: Scores, extra: str, part: slice) -> Scores:
    """``raw`` (the query's BM25 over the units in ``part`` of the index) plus EXPANSION_WEIGHT times the
    expansion's BM25 over the same units."""
    if not extra:
        return raw
    more = index.scores(extra)[part]
    result: Scores = raw + EXPANSION_WEIGHT * more
    return result
