"""Amounts written in text, and when two of them agree (for ``@verify``; pure, stdlib only).

An :class:`Amount` is a measured value as a passage writes it: a currency
amount (``$2.1 billion``, ``£1,234.5``, ``€40m``, ``USD 40 million``,
``$2.1bn``, ``2.1B`` after a currency sign), a percentage (``12%``,
``12 percent``; ``0.12`` is *not* 12%: only an explicit percent is one), or a
plain number (``156,000``, ``(1,234)``). Values are kept as magnitudes: the
accounting parentheses of ``(278)`` and a leading minus are presentation
(expenses are shown negative in one table and positive in the next), and the
claim's wording ("loss", "decreased") is checked as polarity instead.

What is *not* an amount, because it is context and not the measured value:

- a year (1900-2100 written as four plain digits: ``in 2023``, ``FY2023``);
- a date (``2020-01-25``, ``January 25, 2020``, ``25 January 2020``,
  ``1/25/2020``): these become date tokens (:func:`find_dates`) that count as
  terms of the claim;
- a footnote or list marker: ``expenses(1)``, ``(2)``, ``[3]``, a single digit
  in parentheses;
- digits inside a word or a model name (``FY2023``, ``777X``, ``10-K``'s ``K``
  is a word, so ``10`` stays a plain number).

Agreement (:func:`agrees`) uses the precision both sides state: each amount
carries ``ulp``, the unit of its last written digit (``2.1 billion`` -> 1e8,
``2,098 million`` -> 1e6, ``12.5%`` -> 0.1), and two values agree when they
differ by at most half the coarser ulp, i.e. when the finer one rounds to the
coarser one: ``2.1 billion`` agrees with ``2,098 million`` and ``2,149
million``, not with ``2,000 million`` or ``2,160 million``.

A plain number written as an amount (grouped ``2,100`` or scaled ``2,100
million``, ``2.1B``) compares with currency: text often drops the sign.
Financial tables state their unit once ("Dollars in millions") far from the
figures, so an amount written without a scale word that is currency or a
grouped plain number (``$2,852``, ``35,931``) also agrees when it equals the
other value times 1,000, 1,000,000 or 1,000,000,000. Amounts after "by"
(``increased by $94 million``) are changes (``delta``) and only compare with
changes.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal

Kind = Literal["currency", "percent", "plain"]

_SCALES = {"thousand": 1e3, "k": 1e3, "million": 1e6, "mn": 1e6, "mm": 1e6, "m": 1e6,
           "billion": 1e9, "bn": 1e9, "b": 1e9, "trillion": 1e12, "tn": 1e12}
_TABLE_FACTORS = (1.0, 1e3, 1e6, 1e9)
_AMOUNT = re.compile(
    r"""(?<![\w.,/&])
    (?P<open>\()?
    (?P<cur>US\$|\$|€|£|(?:USD|EUR|GBP)\s?)?
    [-−–]?
    (?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)
    (?:(?P<word>\s?(?:thousand|million|billion|trillion|bn|mn)\b)|(?P<letter>(?:mm|[kKmMbB])(?![\w])))?
    (?P<pct>\s?%|\s?per\s?cent\b)?
    (?P<curword>\s(?:dollars|euros|pounds|USD|EUR|GBP)\b)?
    (?P<close>\))?
    (?![\w])""",
    re.VERBOSE | re.IGNORECASE,
)
_BY = re.compile(r"\bby\s*$", re.IGNORECASE)
_FOOTNOTE = re.compile(r"(?<=[^\W\d_])\(\d{1,2}\)|\[\d{1,3}\]|(?<![\w)])\(\d\)")
_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december")
_MONTH = r"(?P<mon>" + "|".join(f"{m[:3]}(?:{m[3:]})?" for m in _MONTHS) + r")\.?"
_DATES = (
    re.compile(r"(?<!\d)(?P<y>(?:19|20)\d\d)-(?P<m>[01]\d)-(?P<d>[0-3]\d)(?!\d)"),
    re.compile(r"(?<!\d)(?P<m>1[0-2]|0?[1-9])/(?P<d>3[01]|[12]\d|0?[1-9])/(?P<y>(?:19|20)\d\d)(?!\d)"),
    re.compile(r"\b" + _MONTH + r"\s+(?P<d>3[01]|[12]\d|0?[1-9])(?:st|nd|rd|th)?,?\s+(?P<y>(?:19|20)\d\d)\b",
               re.IGNORECASE),
    re.compile(r"\b(?P<d>3[01]|[12]\d|0?[1-9])(?:st|nd|rd|th)?\s+" + _MONTH + r",?\s+(?P<y>(?:19|20)\d\d)\b",
               re.IGNORECASE),
)
_YEAR = re.compile(r"(?:19|20)\d\d")


@dataclass(frozen=True)
class Amount:
    """A measured value written in text; ``start``/``end`` are offsets into that text."""

    value: float
    ulp: float
    kind: Kind
    start: int
    end: int
    scaled: bool = False
    grouped: bool = False
    delta: bool = False
    unit: str = ""


@dataclass(frozen=True)
class DateMention:
    """A date written in text, as a canonical token (``date:2020-01-25``)."""

    token: str
    start: int
    end: int


def find_dates(text: str) -> list[DateMention]:
    """Every date in ``text`` (ISO, US numeric, ``Month D, YYYY``, ``D Month YYYY``)."""
    found: list[DateMention] = []
    for pattern in _DATES:
        for match in pattern.finditer(text):
            if not any(d.start < match.end() and match.start() < d.end for d in found):
                found.append(DateMention(_date_token(match), match.start(), match.end()))
    return sorted(found, key=lambda d: d.start)


def _date_token(match: re.Match[str]) -> str:
    groups = match.groupdict()
    month = int(groups["m"]) if groups.get("m") else _month_number(groups["mon"])
    return f"date:{int(groups['y']):04d}-{month:02d}-{int(groups['d']):02d}"


def _month_number(name: str) -> int:
    prefix = name.lower()[:3]
    return next(i for i, m in enumerate(_MONTHS, 1) if m.startswith(prefix))


def masked_context(text: str) -> str:
    """``text`` with dates and footnote markers blanked (same length, so offsets hold)."""
    spans = [(d.start, d.end) for d in find_dates(text)]
    spans += [(m.start(), m.end()) for m in _FOOTNOTE.finditer(text)]
    chars = list(text)
    for start, end in spans:
        chars[start:end] = " " * (end - start)
    return "".join(chars)


def find_amounts(text: str) -> list[Amount]:
    """Every measured value in ``text`` (years, dates and footnote markers left out)."""
    masked = masked_context(text)
    amounts = []
    for match in _AMOUNT.finditer(masked):
        amount = _amount(match, masked)
        if amount is not None:
            amounts.append(amount)
    return amounts


def parse_amount(text: str) -> Amount | None:
    """The one amount that is all of ``text`` (a table cell), else None."""
    stripped = text.strip()
    found = find_amounts(stripped)
    if len(found) == 1 and found[0].start == 0 and found[0].end == len(stripped):
        return found[0]
    return None


def _amount(match: re.Match[str], text: str) -> Amount | None:
    num = match.group("num")
    cur = (match.group("cur") or match.group("curword") or "").strip()
    letter = match.group("letter")
    if letter and not cur and not letter.isupper():
        return None  # "5m" without a currency is as likely metres as millions; "5M", "2.1B" are not
    scale_word = (match.group("word") or letter or "").strip().lower()
    if _YEAR.fullmatch(num) and not (cur or scale_word or match.group("pct")):
        return None
    kind: Kind = "percent" if match.group("pct") else "currency" if cur else "plain"
    scale = _SCALES[scale_word] if scale_word else 1.0
    decimals = len(num.partition(".")[2])
    return Amount(
        value=float(num.replace(",", "")) * scale,
        ulp=10.0**-decimals * scale,
        kind=kind,
        start=match.start(),
        end=match.end(),
        scaled=bool(scale_word),
        grouped="," in num,
        delta=_BY.search(text, 0, match.start()) is not None,
        unit=_unit(cur),
    )


def _unit(cur: str) -> str:
    cur = cur.upper()
    return {"US$": "$", "USD": "$", "DOLLARS": "$", "EUR": "€", "EUROS": "€", "GBP": "£", "POUNDS": "£"}.get(cur, cur)


def comparable(claim: Amount, found: Amount) -> bool:
    """Do these measure the same kind of thing (so that a different value is a contradiction)?"""
    if claim.delta != found.delta:
        return False
    if claim.unit and found.unit and claim.unit != found.unit:
        return False
    if claim.kind == found.kind:
        return True
    kinds = {claim.kind, found.kind}
    plain = claim if claim.kind == "plain" else found
    return kinds == {"currency", "plain"} and (plain.grouped or plain.scaled)


def agrees(claim: Amount, found: Amount) -> bool:
    """Same value, up to the coarser stated precision (and a table's unit, see the module doc)."""
    if not comparable(claim, found):
        return False
    factors = _TABLE_FACTORS if _table_figure(found) else (1.0,)
    return any(_close(claim.value, claim.ulp, found.value * f, found.ulp * f) for f in factors)


def _table_figure(found: Amount) -> bool:
    return not found.scaled and (found.kind == "currency" or (found.kind == "plain" and found.grouped))


def _close(a: float, a_ulp: float, b: float, b_ulp: float) -> bool:
    tolerance = max(a_ulp, b_ulp) / 2
    return math.isclose(a, b, rel_tol=1e-9) or abs(a - b) <= tolerance * (1 + 1e-9)
