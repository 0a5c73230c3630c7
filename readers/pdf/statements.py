"""Financial statement pages, found by the words agents use for them.

Agents ask for "the cash flow statement", "the P&L" or "the balance sheet";
filings title those pages "Consolidated Statements of Cash Flows", "Consolidated
Statements of Operations", "Statement of Financial Position". At parse time a
page is a statement page of a kind when one of its first lines names that kind
and most of its rows carry figures (an index that lists every statement by
name is not one). A read whose text names a kind ranks the units of those
pages higher, so the statement itself, not a passage that mentions it, comes
first.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

TITLES: Mapping[str, re.Pattern[str]] = {
    "income": re.compile(
        r"statements? of (consolidated |comprehensive )?(income|operations|earnings|(net )?loss)|"
        r"income statements?|profit and loss|statements? of comprehensive income", re.IGNORECASE),
    "balance": re.compile(r"balance sheets?|statements? of financial (position|condition)", re.IGNORECASE),
    "cash": re.compile(r"statements? of (consolidated )?cash flows?|cash flows? statements?", re.IGNORECASE),
    "equity": re.compile(r"statements? of (changes in )?(stock|share)holders'?\u2019? equity|"
                         r"statements? of (changes in )?equity", re.IGNORECASE),
    "segments": re.compile(r"(business|reportable|operating) segments?|segment (information|results|data)",
                           re.IGNORECASE),
}
ASKED: Mapping[str, re.Pattern[str]] = {
    "income": re.compile(r"income statements?|statements? of (income|operations|earnings)|\bp ?& ?l\b|"
                         r"profit (and|&) loss|\bp/l\b", re.IGNORECASE),
    "balance": re.compile(r"balance sheets?|statements? of financial position", re.IGNORECASE),
    "cash": re.compile(r"cash ?flows? statements?|statements? of cash ?flows?", re.IGNORECASE),
    "equity": re.compile(r"statements? of (stockholders'?|shareholders'?|changes in) equity", re.IGNORECASE),
    "segments": re.compile(r"\bsegments?\b", re.IGNORECASE),
}
IMPLIED: Mapping[str, re.Pattern[str]] = {
    "income": re.compile(
        r"\b(revenues?|net sales|gross (margin|profit)|operating (income|margin|profit)|net (income|earnings|"
        r"profit margin)|earnings per share|eps|cost of (goods sold|sales|revenues?)|cogs|interest expense|"
        r"ebitd?a?|topline|top line)\b", re.IGNORECASE),
    "balance": re.compile(
        r"\b(total assets|current (assets|liabilities)|working capital|inventor(y|ies)|accounts (payable|"
        r"receivable)|pp&e|property,? plant,? and equipment|total (debt|liabilities)|shareholders'? equity|"
        r"book value)\b", re.IGNORECASE),
    "cash": re.compile(
        r"\b(capex|capital expenditures?|operating cash flows?|cash from operations|free cash flow|"
        r"depreciation and amortization|d&a|dividends paid|(share|stock) repurchases?|"
        r"(operating|investing|financing) activities)\b", re.IGNORECASE),
}
"""Figures that live on a statement: a read that asks for them ranks that statement's pages higher, though
less than one that names the statement (IMPLIED_BOOST)."""
TITLE_LINES = 8
"""A statement names itself in its first lines (after a running header such as 'Table of Contents')."""
FIGURE_ROWS = 0.4
"""At least this share of a statement page's rows carry two or more figures."""
BOOST = 0.6
"""A unit on a statement page the read names gains this share of the slot's best score."""
IMPLIED_BOOST = 0.3
"""... and on a statement page whose figures the read asks for."""
_FIGURE = re.compile(r"\(?\$?\s?\d[\d,]*(\.\d+)?\)?|—|–")


def statement_kinds(text: str) -> tuple[str, ...]:
    """The kinds of statement page ``text`` (one page's text) is; () for any other page."""
    rows = [row for row in text.split("\n") if row.strip()]
    if len(rows) < 6 or sum(len(_FIGURE.findall(row)) >= 2 for row in rows) < FIGURE_ROWS * len(rows):
        return ()
    head = "\n".join(rows[:TITLE_LINES])
    return tuple(kind for kind, title in TITLES.items() if title.search(head))


def statement_pages(page_texts: Sequence[str]) -> dict[str, list[int]]:
    """kind -> 1-based pages of that statement."""
    return pages_by_kind(page_texts, statement_kinds)


def pages_by_kind(page_texts: Sequence[str], kinds_of: Callable[[str], Sequence[str]]) -> dict[str, list[int]]:
    """kind -> 1-based pages that ``kinds_of(page text)`` names as that kind."""
    found: dict[str, list[int]] = {}
    for number, text in enumerate(page_texts, 1):
        for kind in kinds_of(text):
            found.setdefault(kind, []).append(number)
    return found


def asked_kinds(text: str) -> dict[str, float]:
    """The statement kinds a read's text names (BOOST) or asks figures of (IMPLIED_BOOST)."""
    kinds = {kind: IMPLIED_BOOST for kind, implied in IMPLIED.items() if implied.search(text)}
    return kinds | {kind: BOOST for kind, asked in ASKED.items() if asked.search(text)}
