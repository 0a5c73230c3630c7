"""Lexical stance of a passage toward a claim (for ``@verify``; see :mod:`readers.claims.verify`).

A claim is parsed once (:func:`parse_claim`): its amounts
(:mod:`readers.claims.numbers`; years and dates are context, not values), its
key terms (stemmed content words, bm25s' English stopwords dropped;
``R&D`` and "research and development" are one term, so are SG&A, capex,
EPS, ...; dates are terms too), its direction words (increased/decreased,
rose/fell, higher/lower, gain/loss, approved/rejected ...) and whether it is
negated (not, no, never, none, without, n't).

:func:`stance` classifies a passage from *spots*: an amount with the text
within :data:`WINDOW` characters on either side (in a table row: the row and
the amount's column name), or, for a claim without amounts, a sentence (a
table row). A spot is about the claim when it holds at least two thirds of the
claim's key terms (at most :data:`MAX_NEEDED_TERMS`).

- With amounts, per claim amount: it *agrees* when a spot about the claim
  holds a comparable amount with the same value, *differs* when such spots
  hold comparable amounts and none has it. The passage contradicts when any
  claim amount differs (or agrees only next to the opposite direction word:
  "decreased by $94 million" against "increased by $94 million"), and supports
  when some agree and none differ, so a prior-year figure beside the right one
  does not contradict. Negation is not checked next to amounts.
- Without amounts, a spot about the claim supports, and one whose polarity is
  flipped contradicts: an odd number of negations against the claim's, or the
  opposite direction word without the claim's own; the two flips cancel ("did
  not increase" agrees with "decreased"). When the claim has a direction word
  ("increased"), a spot without a word on that axis says nothing either way.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import cache, lru_cache
from typing import Literal

from readers.claims.numbers import Amount, agrees, comparable, find_amounts, find_dates, parse_amount

Stance = Literal["supporting", "contradicting"]
STANCES: tuple[Stance, Stance] = ("supporting", "contradicting")

WINDOW = 80
"""Characters on either side of an amount that count as "next to" it (a table row or a short
sentence; PDF tables put a row's label on the line above its figures)."""
MAX_NEEDED_TERMS = 4


def _set(words: str) -> frozenset[str]:
    return frozenset(words.split())


_WORD = re.compile(r"[^\W\d_](?:\w|[&'\u2019](?=\w))*")
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|\n\s*\n")
_ALIASES: dict[str, tuple[str, ...]] = {
    "r&d": ("research and development", "research development"),
    "sg&a": ("selling general and administrative", "selling general administrative"),
    "capex": ("capital expenditures", "capital expenditure"),
    "eps": ("earnings per share",),
    "m&a": ("mergers and acquisitions",),
    "p&l": ("profit and loss",),
    "yoy": ("year over year",),
    "q1": ("first quarter",), "q2": ("second quarter",), "q3": ("third quarter",), "q4": ("fourth quarter",),
}
_PHRASES = sorted(((tuple(p.split()), alias) for alias, ps in _ALIASES.items() for p in ps), key=lambda x: -len(x[0]))
_NEGATIONS = frozenset({"not", "no", "never", "none", "without", "cannot", "neither", "nor"})
_AXES: tuple[tuple[frozenset[str], frozenset[str]], ...] = (
    (_set("increase increased increases increasing rose rise rises risen rising grew grow grows growing growth "
          "climbed jumped expanded up higher greater larger exceeded upregulated elevated enhanced raised boosted"),
     _set("decrease decreased decreases decreasing fell fall falls fallen falling declined decline declines "
          "declining dropped drop drops shrank shrink contracted reduced reduction down lower fewer smaller "
          "downregulated diminished suppressed lowered")),
    (_set("gain gains profit profits profitable positive surplus"),
     _set("loss losses unprofitable negative deficit")),
    (_set("approved accepted passed succeeded success successful"),
     _set("rejected denied failed failure unsuccessful")),
)
_UNIT_WORDS = _set("thousand million billion trillion bn mn percent per cent dollars dollar usd eur euros gbp pounds")
_EXTRA_STOPWORDS = _set(
    "would could may might must shall also approximately around nearly roughly almost respectively year years fiscal"
)
NEG = "!neg"


@dataclass(frozen=True)
class Token:
    """A term of a text: a stem, an alias (``r&d``), a date, ``!neg`` or a direction (``+0``, ``-2``)."""

    term: str
    start: int
    end: int


@dataclass(frozen=True)
class Claim:
    """A parsed claim: what it measures (amounts), about what (terms), which way (polarity)."""

    text: str
    amounts: tuple[Amount, ...]
    terms: frozenset[str]
    directions: frozenset[str]
    negated: bool
    spelled: tuple[tuple[str, str], ...]  # (term, as the claim writes it)
    required: frozenset[str] = frozenset()  # terms every spot must hold (see with_key_term)

    @property
    def needed(self) -> int:
        """How many of the claim's terms a spot must hold to be about the claim."""
        return min(MAX_NEEDED_TERMS, math.ceil(2 * len(self.terms) / 3))


@dataclass(frozen=True)
class Spot:
    """One place in a passage: an amount (or none) and the terms around it."""

    amount: Amount | None
    terms: tuple[str, ...]

    def holds(self, claim: Claim) -> bool:
        here = set(self.terms)
        return bool(claim.terms) and claim.required <= here and len(claim.terms & here) >= claim.needed

    def antonym(self, claim: Claim) -> bool:
        """The opposite of one of the claim's direction words, without the claim's own."""
        here = set(self.terms)
        return any(_opposite(d) in here and d not in here for d in claim.directions)

    def says_direction(self, claim: Claim) -> bool:
        """A direction word on one of the claim's axes, either way."""
        here = set(self.terms)
        return any(d in here or _opposite(d) in here for d in claim.directions)

    def flipped(self, claim: Claim) -> bool:
        """Opposite direction XOR a different negation parity (the two flips cancel)."""
        return self.antonym(claim) != ((self.terms.count(NEG) % 2 == 1) != claim.negated)


# -- tokens ---------------------------------------------------------------------


def tokens(text: str) -> list[Token]:
    """The terms of ``text`` in order, with their offsets (stopwords, numbers, unit words dropped)."""
    found = [Token(d.token, d.start, d.end) for d in find_dates(text)]
    words = [(m.group().lower().removesuffix("'s").removesuffix("\u2019s"), m.start(), m.end())
             for m in _WORD.finditer(text) if not _inside(m, found) and text[m.end() : m.end() + 1] != "$"]
    i = 0
    while i < len(words):
        alias, n = _alias_at(words, i)
        if alias:
            found.append(Token(alias, words[i][1], words[i + n - 1][2]))
        else:
            found.extend(_word_token(*words[i]))
        i += max(n, 1)
    return sorted(found, key=lambda t: t.start)


def _inside(match: re.Match[str], dates: list[Token]) -> bool:
    return any(d.start <= match.start() < d.end for d in dates)


def _alias_at(words: list[tuple[str, int, int]], i: int) -> tuple[str | None, int]:
    if words[i][0] in _ALIASES:
        return words[i][0], 1
    for phrase, alias in _PHRASES:
        if tuple(w for w, _, _ in words[i : i + len(phrase)]) == phrase:
            return alias, len(phrase)
    return None, 1


def _word_token(word: str, start: int, end: int) -> list[Token]:
    special = _special(word)
    if special:
        return [Token(special, start, end)]
    if word in _stopwords() or word in _UNIT_WORDS:
        return []
    return [Token(_stem(word), start, end)]


def _special(word: str) -> str | None:
    if word in _NEGATIONS or word.endswith(("n't", "n\u2019t")):
        return NEG
    for axis, (up, down) in enumerate(_AXES):
        if word in up or word in down:
            return f"{'+' if word in up else '-'}{axis}"
    return None


def _opposite(direction: str) -> str:
    return ("-" if direction[0] == "+" else "+") + direction[1:]


@cache
def _stopwords() -> frozenset[str]:
    import bm25s

    return frozenset(bm25s.stopwords.STOPWORDS_EN_PLUS) | _EXTRA_STOPWORDS


@lru_cache(maxsize=65_536)
def _stem(word: str) -> str:
    import Stemmer

    stemmed: str = Stemmer.Stemmer("english", 0).stemWord(word)
    return stemmed


# -- claims ---------------------------------------------------------------------


def parse_claim(text: str) -> Claim:
    found = tokens(text)
    terms = frozenset(t.term for t in found if t.term != NEG and t.term[0] not in "+-")
    return Claim(
        text=text,
        amounts=tuple(find_amounts(text)),
        terms=terms,
        directions=frozenset(t.term for t in found if t.term[0] in "+-"),
        negated=sum(t.term == NEG for t in found) % 2 == 1,
        spelled=tuple((t.term, text[t.start : t.end]) for t in found if t.term != NEG and t.term[0] not in "+-"),
    )


def claim_query(claim: Claim) -> str:
    """Content words, years and the other spelling of each alias; never the amounts.

    An amount in the query would rank passages that share its digits ("35" of
    ``35,931``) above those with another figure, i.e. favour supporting
    passages over contradicting ones.
    """
    years = re.findall(r"(?<!\d)(?:19|20)\d\d(?!\d)", claim.text)
    words = [_spelling(term, written) for term, written in claim.spelled]
    unique: dict[str, str] = {}
    for word in " ".join([*words, *years]).split():
        unique.setdefault(word.lower(), word)
    return " ".join(unique.values()) or claim.text


def _spelling(term: str, written: str) -> str:
    """The claim's word, plus the other spelling of an alias (``R&D research and development``) or a date."""
    if term.startswith("date:"):
        return f"{written} {term[5:]}"
    if term not in _ALIASES:
        return written
    spellings: dict[str, str] = {}
    for spelling in (written, term, _ALIASES[term][0]):
        spellings.setdefault(spelling.lower(), spelling)
    return " ".join(spellings.values())


def with_key_term(claim: Claim, frequency: Callable[[str], int]) -> Claim:
    """Require the claim's rarest term (fewest units holding it, at least one) in every spot.

    With three or more terms two thirds suffice, and two generic ones ("content" and
    "expense" far from "technology") would otherwise make a spot about the claim.
    """
    if len(claim.terms) < 3:
        return claim
    counts = {term: frequency(_spelling(term, written)) for term, written in claim.spelled}
    present = [(n, term) for term, n in counts.items() if n > 0]
    return replace(claim, required=frozenset({min(present)[1]})) if present else claim


# -- stance ---------------------------------------------------------------------


def stance(claim: Claim, text: str, heading: str | None = None) -> Stance | None:
    """How a passage bears on the claim, as found in its words (None: neither)."""
    columns = _columns(text, heading)
    spots = [s for s in _spots(claim, text, columns) if s.holds(claim)]
    if claim.amounts:
        return _number_stance(claim, spots)
    flips = [s.flipped(claim) for s in spots if not claim.directions or s.says_direction(claim)]
    return "contradicting" if any(flips) else "supporting" if flips else None


def _number_stance(claim: Claim, spots: list[Spot]) -> Stance | None:
    verdicts = set()
    for wanted in claim.amounts:
        same = [s for s in spots if s.amount is not None and comparable(wanted, s.amount)]
        agreeing = [s for s in same if s.amount is not None and agrees(wanted, s.amount)]
        if agreeing:
            verdicts.add("flip" if all(s.antonym(claim) for s in agreeing) else "agree")
        elif same:
            verdicts.add("differ")
    if verdicts & {"differ", "flip"}:
        return "contradicting"
    return "supporting" if verdicts else None


def _columns(text: str, heading: str | None) -> tuple[str, ...] | None:
    """Column names of a tabular passage (a table Reader's heading, or a TSV header line), else None."""
    if heading and "columns: " in heading:
        listed = heading.split("columns: ", 1)[1].split("\u2026", 1)[0]
        return tuple(name.strip() for name in listed.split(" | "))
    lines = text.split("\n", 2)
    if len(lines) >= 2 and "\t" in lines[0] and "\t" in lines[1]:
        return tuple(lines[0].split("\t"))
    return None


def _spots(claim: Claim, text: str, columns: tuple[str, ...] | None) -> list[Spot]:
    if columns is not None:
        return list(_row_spots(claim, text, columns))
    found = tokens(text)
    if not claim.amounts:
        return [Spot(None, _terms(found, a, b)) for a, b in _sentences(text)]
    starts = [t.start for t in found]
    return [Spot(a, _terms(found, a.start - WINDOW, a.end + WINDOW, starts)) for a in find_amounts(text)]


def _row_spots(claim: Claim, text: str, columns: tuple[str, ...]) -> Iterator[Spot]:
    for line in text.split("\n"):
        row = tuple(t.term for t in tokens(line))
        if not claim.amounts:
            yield Spot(None, row)
            continue
        for i, cell in enumerate(line.split("\t")):
            amount = parse_amount(cell)
            if amount is not None:
                column = tuple(t.term for t in tokens(columns[i])) if i < len(columns) else ()
                yield Spot(amount, row + column)


def _terms(found: Sequence[Token], lo: int, hi: int, starts: Sequence[int] | None = None) -> tuple[str, ...]:
    starts = starts if starts is not None else [t.start for t in found]
    return tuple(t.term for t in found[bisect_left(starts, lo) : bisect_right(starts, hi)])


def _sentences(text: str) -> Iterator[tuple[int, int]]:
    start = 0
    for match in _SENTENCE_END.finditer(text):
        yield start, match.start()
        start = match.end()
    yield start, len(text)
