"""What a filing's pages are, by their structure: boilerplate to demote, statements to go to.

Two measured problems of filing packs (issue 27):

* **Boilerplate floods the results.** A 10-K repeats the question's words where nothing is said: the
  table of contents lists every item ("Legal Proceedings 17"), the exhibit index names every agreement,
  the certifications repeat "this annual report ... PepsiCo, Inc." twice, the signature page lists the
  directors, Exhibit 21 lists the subsidiaries, the auditor's consent names every registration
  statement. :func:`boilerplate_kinds` tells those pages by their layout (a title in the first lines
  plus the structure that kind of page has: lines ending in page numbers, lines starting with exhibit
  numbers, "/s/" lines, "I, <name>, certify that"), and :func:`demotion` scales the scores of their
  units by :data:`DEMOTE`, unless the read asks for that kind ("who signed", "list of subsidiaries").
* **Ratio and margin questions need a statement the pack never shows.** "Does Corning have positive
  working capital?" shares no word with the balance sheet's "Total current assets" and "Total current
  liabilities", so BM25 ranks MD&A prose (or the table of contents) first. :data:`METRICS` maps the
  metrics analysts ask for to the statement rows they are computed from (textbook definitions:
  working capital = current assets - current liabilities, operating margin = operating income / revenue,
  ...); :func:`primary_statements` finds each statement's own page (of the pages titled as that
  statement, the one holding most of its standard rows), and :func:`row_lift` lifts the units of that
  page holding the rows the read's metric needs, so they are chosen like any strong match.

Both are score adjustments over the units in view (``readers.retrieval.methods.Adjust``): nothing is
added to a pack beyond what the budget-filling selection picks. The page analysis runs once per artifact
(a regex pass per page: 70-140 ms on a 250-500 page 10-K under load), kept in its parsed data as plain
lists; a read then pays about half a millisecond.

And a promise: :func:`rows_shown` says the rows a read's metric needs are in view (every statement it
needs, on that statement's own page), which the PDF Reader reports as ``matched``. The coverage judge's
calibrated model never reaches "matched" on filings (its signals are word overlap; filing questions are
long and their evidence is figures), while this structural fact held for 11 of 11 calibration packs.

Measured on the calibration split (docs/BENCHMARKS.md, issue 27): financebench packs citing an evidence
page 15 -> 16 of 24; packs saying "matched" 0 -> 11, all 11 hits.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from typing import Any

import numpy as np

from readers.pdf.statements import pages_by_kind
from readers.retrieval.bm25index import Offsets, Scores

DEMOTE = 0.3
"""Scale of a boilerplate unit's score: kept findable (a question may need a page nothing else holds),
but below real content that matches as well. Set before measuring, not tuned: the calibration split has
24 filing questions, too few to tune on."""
ROW_LIFT = 0.8
"""A unit on a statement's own page holding a row the read's metric needs gains this share of the slot's
best score (the statements' named-title boost, readers.pdf.statements.BOOST, is 0.6). Set, not tuned."""
HEAD_LINES = 8
"""A page names what it is in its first lines (after a running header such as 'Table of Contents')."""

_ITEM_PREFIX = re.compile(r"^(item|part)\s+[0-9IVX]+[A-Z]?\.?\s+", re.IGNORECASE)
_PAGE_NUMBER_LINE = re.compile(r"^[^\d$()]+\s\d{1,3}$")
_EXHIBIT_LINE = re.compile(
    r"^(exhibit\s+)?(\(\d{1,3}(\.\d{1,3}){0,2}[a-z]?\)|\d{1,3}(\.\d{1,3}){1,2}[a-z]?\*{0,2})(\s|$)", re.IGNORECASE)
_SIGNED = re.compile(r"/s/")
_CERTIFY = re.compile(r"\bI,\s+[A-Z][^,\n]{2,60},\s+certify\b", re.IGNORECASE)
_TITLES: Mapping[str, re.Pattern[str]] = {
    "contents": re.compile(r"(table of )?contents|index|index to (financial statements|the report)", re.IGNORECASE),
    "exhibits": re.compile(r"(exhibit index|index to exhibits|exhibits?( and financial statement schedules)?)\.?",
                           re.IGNORECASE),
    "subsidiaries": re.compile(r"(exhibit 21(\.\d+)?\W*)?((list of |significant )?subsidiaries( of .{0,80})?)\.?",
                               re.IGNORECASE),
    "signatures": re.compile(r"signatures?", re.IGNORECASE),
    "certification": re.compile(r".{0,60}\bcertifications?\b.{0,120}", re.IGNORECASE),
    "consent": re.compile(r"(exhibit 23(\.\d+)?\W*)?consent of independent .{0,80}", re.IGNORECASE),
}
"""Title lines (a whole short line in a page's first lines) of each boilerplate kind."""
ASKED: Mapping[str, re.Pattern[str]] = {
    "contents": re.compile(r"\b(table of contents|contents|which page|what page)\b", re.IGNORECASE),
    "exhibits": re.compile(r"\bexhibits?\b", re.IGNORECASE),
    "subsidiaries": re.compile(r"\bsubsidiar", re.IGNORECASE),
    "signatures": re.compile(r"\b(sign(ed|s|atures?|ing)?|signator\w*|directors?)\b", re.IGNORECASE),
    "certification": re.compile(r"\b(certif\w*|sarbanes|section (302|906))\b", re.IGNORECASE),
    "consent": re.compile(r"\b(consent|auditors?|accounting firm)\b", re.IGNORECASE),
}
"""A read that asks for a kind of page does not demote it."""


def _titled(rows: Sequence[str], kind: str) -> bool:
    """One of the first rows is a title of ``kind`` (the whole row, at most 160 characters)."""
    return any(len(row) <= 160 and _TITLES[kind].fullmatch(row) for row in rows[:HEAD_LINES])


def boilerplate_kinds(text: str) -> tuple[str, ...]:
    """The boilerplate kinds one page's text is (see the module docstring); () for content."""
    rows = [row.strip() for row in text.split("\n") if row.strip()]
    if not rows:
        return ()
    kinds = []
    numbered = sum(bool(_PAGE_NUMBER_LINE.match(_ITEM_PREFIX.sub("", r))) for r in rows)
    if numbered >= 8 and numbered >= 0.3 * len(rows) and (_titled(rows, "contents") or numbered >= 0.5 * len(rows)):
        kinds.append("contents")
    exhibits = sum(bool(_EXHIBIT_LINE.match(r)) for r in rows)
    if exhibits >= 5 and (exhibits >= 0.4 * len(rows) or (_titled(rows, "exhibits") and exhibits >= 0.15 * len(rows))):
        kinds.append("exhibits")
    if _titled(rows, "subsidiaries"):
        kinds.append("subsidiaries")
    signed = len(_SIGNED.findall(text)) >= 2 or "pursuant to the requirements" in text.lower()
    if _titled(rows, "signatures") and signed:
        kinds.append("signatures")
    if _titled(rows, "certification") and _CERTIFY.search(text):
        kinds.append("certification")
    if _titled(rows, "consent"):
        kinds.append("consent")
    return tuple(kinds)


def boilerplate_pages(page_texts: Sequence[str]) -> dict[str, list[int]]:
    """kind -> 1-based pages of that boilerplate."""
    return pages_by_kind(page_texts, boilerplate_kinds)


def demoted_pages(found: Mapping[str, Sequence[int]], question: str) -> set[int]:
    """Pages of the boilerplate kinds the read does not ask for."""
    return {page for kind, pages in found.items() if not ASKED[kind].search(question) for page in pages}


def demotion(page_of_unit: Offsets, pages: set[int]) -> Scores:
    """Per unit: DEMOTE on a demoted page, else 1."""
    if not pages:
        return np.ones(len(page_of_unit))
    return np.where(np.isin(page_of_unit, sorted(pages)), DEMOTE, 1.0)


# -- statements --------------------------------------------------------------------

ROWS: Mapping[str, Mapping[str, str]] = {
    "income": {
        "revenue": r"^(total )?(net )?(sales|revenues?|operating revenues?)\b",
        "cost": r"^(total )?cost of (sales|revenues?|goods sold|products sold)",
        "gross": r"^gross (profit|margin)",
        "operating": r"^(total )?operating (income|profit)|^income from operations|^operating income \(loss\)",
        "interest": r"^interest expense",
        "pretax": r"^(income|earnings) (from continuing operations )?before (provision for )?income tax",
        "tax": r"^(provision for|benefit from)? ?income tax(es)?( expense| provision)?\b|^income tax",
        "net": r"^net (income|earnings|loss)( attributable to [^\d]*)?\b",
        "eps": r"earnings per (common )?share|per share",
    },
    "balance": {
        "cash": r"^cash and cash equivalents",
        "securities": r"^(marketable securities|short-term investments)",
        "receivables": r"^(accounts |trade )?receivables?|^accounts receivable",
        "inventories": r"^(total )?inventor(y|ies)",
        "current_assets": r"^total current assets",
        "ppe": r"^property,? plant,? and equipment.{0,20}net|^net property|^property and equipment,? net",
        "assets": r"^total assets",
        "payables": r"^accounts payable",
        "current_liabilities": r"^total current liabilities",
        "debt": r"^(long-term debt|total debt|short-term borrowings|current portion of long-term debt)",
        "liabilities": r"^total liabilities\b(?! and)",
        "equity": r"^total (\w+ )?(share|stock)holders.? equity|^total equity",
    },
    "cash": {
        "operating_cash": r"^net cash (provided by|from|generated).{0,20}operating",
        "capex": r"^(purchases? of|payments for|additions to|expenditures for) property|^capital expenditures",
        "depreciation": r"^depreciation",
        "dividends": r"^(cash )?dividends paid|^dividends to",
        "buybacks": r"^(purchases?|repurchases?) of (treasury |common )?(stock|shares)",
    },
}
"""Standard rows of each statement, by name (matched at a row's start, case-insensitive)."""

METRICS: Sequence[tuple[re.Pattern[str], Mapping[str, tuple[str, ...]]]] = tuple(
    (re.compile(pattern, re.IGNORECASE), needs)
    for pattern, needs in (
        # ratios and margins, by their textbook definitions
        (r"working capital|current ratio|liquidity ratio", {"balance": ("current_assets", "current_liabilities")}),
        (r"quick ratio|acid.test", {"balance": ("cash", "securities", "receivables", "current_liabilities")}),
        (r"cash ratio", {"balance": ("cash", "securities", "current_liabilities")}),
        (r"capital.intensi|fixed asset|asset turnover",
         {"cash": ("capex", "depreciation"), "balance": ("ppe", "assets"), "income": ("revenue",)}),
        (r"return on (total )?assets|\broa\b", {"income": ("net",), "balance": ("assets",)}),
        (r"return on (shareholders.? |stockholders.? )?equity|\broe\b", {"income": ("net",), "balance": ("equity",)}),
        (r"gross (profit )?margin", {"income": ("revenue", "cost", "gross")}),
        (r"operating (profit )?margin|\bebit\b", {"income": ("revenue", "operating")}),
        (r"ebitda", {"income": ("operating",), "cash": ("depreciation",)}),
        (r"net (profit |income )?margin|profit margin", {"income": ("revenue", "net")}),
        (r"effective tax rate", {"income": ("pretax", "tax")}),
        (r"interest coverage|times interest", {"income": ("operating", "interest")}),
        (r"inventory turnover|days inventory|\bdio\b", {"income": ("cost",), "balance": ("inventories",)}),
        (r"receivables? turnover|days sales outstanding|\bdso\b", {"income": ("revenue",),
                                                                  "balance": ("receivables",)}),
        (r"payables? turnover|days payables? outstanding|\bdpo\b", {"income": ("cost",), "balance": ("payables",)}),
        (r"debt.to.(equity|capital|assets)|leverage ratio|debt ratio",
         {"balance": ("debt", "liabilities", "equity", "assets")}),
        (r"dividend payout|payout ratio", {"cash": ("dividends",), "income": ("net",)}),
        (r"operating cash flow ratio", {"cash": ("operating_cash",), "balance": ("current_liabilities",)}),
        (r"free cash flow|\bfcf\b", {"cash": ("operating_cash", "capex")}),
        (r"cash conversion", {"cash": ("operating_cash",), "income": ("net",)}),
        (r"revenue growth|sales growth|\bcagr\b|total revenues?|net sales|top.?line", {"income": ("revenue",)}),
        # rows the read names itself
        (r"total assets", {"balance": ("assets",)}),
        (r"total liabilities", {"balance": ("liabilities",)}),
        (r"(total )?current assets", {"balance": ("current_assets",)}),
        (r"(total )?current liabilities", {"balance": ("current_liabilities",)}),
        (r"accounts receivable", {"balance": ("receivables",)}),
        (r"accounts payable", {"balance": ("payables",)}),
        (r"inventor(y|ies)", {"balance": ("inventories",)}),
        (r"pp&e|property,? plant,? and equipment", {"balance": ("ppe",)}),
        (r"capex|capital expenditures?", {"cash": ("capex",)}),
        (r"depreciation", {"cash": ("depreciation",)}),
        (r"operating cash flow|cash (flows? )?from operations|cash provided by operating",
         {"cash": ("operating_cash",)}),
        (r"dividends? paid|cash dividends", {"cash": ("dividends",)}),
        (r"(share|stock) (repurchases?|buybacks?)", {"cash": ("buybacks",)}),
        (r"earnings per share|\beps\b", {"income": ("eps",)}),
        (r"cost of (goods sold|sales|revenues?)|\bcogs\b", {"income": ("cost",)}),
        (r"gross profit", {"income": ("gross",)}),
        (r"operating income|operating profit|income from operations", {"income": ("operating",)}),
        (r"net income|net earnings", {"income": ("net",)}),
        (r"interest expense", {"income": ("interest",)}),
    )
)
"""Metrics a read may ask for, and the statement rows each is computed from."""


def needed_rows(question: str) -> dict[str, set[str]]:
    """statement kind -> names of the rows (:data:`ROWS`) the question's metrics are computed from."""
    found: dict[str, set[str]] = {}
    for pattern, needs in METRICS:
        if pattern.search(question):
            for kind, rows in needs.items():
                found.setdefault(kind, set()).update(rows)
    return found


REASONS = re.compile(r"\b(why|drove|drive[rns]?|driven|explain\w*|reasons?|caus\w*|impact\w*|affect\w*|"
                     r"contribut\w*|discuss\w*|describe\w*)\b", re.IGNORECASE)
"""A read that asks why a figure moved is not answered by the statement that shows the figure."""
BREAKDOWN = re.compile(
    r"\b(segments?|segmental|regions?|regional(ly)?|geograph\w*|countr(y|ies)|domestic(ally)?|international(ly)?|"
    r"foreign|overseas|north america\w*|latin america\w*|europe\w*|asia\w*|emea|apac|divisions?|"
    r"business (units?|lines?)|product (lines?|categor\w*|groups?|families)|brands?|channels?|"
    r"by (product|customer|market|geograph|region|segment|countr|business|brand|channel|categor|type)\w*)\b"
    r"|(?<![A-Za-z])U\.?S\.?(?![A-Za-z]|\s*dollars)", re.IGNORECASE)
"""A read that asks for a part of a figure (a segment's, a region's, a product line's: a breakdown "by X") is
not answered by the consolidated row a statement shows; the breakdown is in a note or in MD&A."""
NON_GAAP = re.compile(
    r"\b(adjusted|non[- ]?gaap|pro[- ]forma|organic(ally)?|excluding|exclude[sd]?|underlying|normali[sz]ed|"
    r"constant[- ]currency|comparable (store )?sales|same[- ]store|core (earnings|eps|operating|income|profit|"
    r"revenues?|sales|growth))\b", re.IGNORECASE)
"""A read that asks for an adjusted (non-GAAP) measure is not answered by the statements, which show the
GAAP figures; the company's own reconciliation defines it ("unadjusted" is the GAAP figure: no match)."""


STATED = re.compile(r"\beffective (income )?tax rates?\b", re.IGNORECASE)
"""Metrics a filing states itself, in the note that reconciles them (the income tax note's rate
reconciliation is a required disclosure): the statement rows they can be computed from are shown, but the
stated figure, which may differ (discrete items, rounding), is the evidence, so rows in view promise nothing.
Found on the calibration split's one false "matched" (an effective tax rate change)."""


_SENTENCE = re.compile(r"(?<=[.?!])\s+(?=[A-Z])")
_CONDITIONAL = re.compile(r"^(if|in case|where|when)\b", re.IGNORECASE)


def promisable(question: str) -> bool:
    """Whether the rows of a statement can answer the read at all: not when it asks for reasons, for a part
    of a consolidated figure, or for an adjusted measure (each decided from the question's words). A
    conditional follow-up after the question ("If working capital is not a useful metric, explain why")
    says what to do when the figure does not apply; it asks no reason of the figure itself."""
    asked = " ".join(s for i, s in enumerate(_SENTENCE.split(question)) if i == 0 or not _CONDITIONAL.match(s))
    return not (REASONS.search(asked) or BREAKDOWN.search(asked) or NON_GAAP.search(asked))


def rows_shown(question: str, known: Mapping[str, Any], shown: Sequence[tuple[int, str]]) -> bool:
    """The statement rows the read's metrics need are in view: for every statement kind they come from (that
    the artifact has a primary page for), each needed row is in a passage on that page (``shown``: (page,
    text) pairs); never for a read the statements cannot answer (:func:`promisable`). Every row, not one of
    them: a working-capital read shown its current assets but not its current liabilities cannot be answered
    from the pack."""
    needs = needed_rows(question)
    primary: Mapping[str, int] = known["primary"]
    kinds = [kind for kind in needs if kind in primary]
    if not kinds or not promisable(question) or STATED.search(question):
        return False
    return all(needs[kind] <= rows_in([text for page, text in shown if page == primary[kind]], kind)
               for kind in kinds)


def rows_in(texts: Sequence[str], kind: str) -> set[str]:
    """The names of ``kind``'s standard rows (:data:`ROWS`) that start a line of one of ``texts``."""
    lines = [line.strip() for text in texts for line in text.split("\n")]
    return {name for name, pattern in ROWS[kind].items() if any(re.match(pattern, ln, re.IGNORECASE) for ln in lines)}


def row_count(text: str, kind: str) -> int:
    """How many of a statement's standard rows one page holds (each row name counted once)."""
    return len(rows_in([text], kind))


def primary_statements(page_texts: Sequence[str], titled: Mapping[str, Sequence[int]]) -> dict[str, int]:
    """kind -> the statement's own page: of the pages titled as that statement (readers.pdf.statements),
    the one holding most of its standard rows (at least three); the first such page on a tie."""
    found: dict[str, int] = {}
    for kind, pages in titled.items():
        if kind not in ROWS:
            continue
        counts = [(row_count(page_texts[p - 1], kind), -p) for p in pages if 1 <= p <= len(page_texts)]
        best = max(counts, default=(0, 0))
        if best[0] >= 3:
            found[kind] = -best[1]
    return found


def row_lift(unit_texts: Sequence[str], unit_pages: Sequence[int], primary: Mapping[str, int],
             needs: Mapping[str, set[str]]) -> Scores:
    """Per unit: 1.0 when it is on a needed statement's primary page and holds one of the needed rows."""
    lift = np.zeros(len(unit_texts))
    wanted = {primary[kind]: [ROWS[kind][row] for row in rows] for kind, rows in needs.items() if kind in primary}
    for u, (text, page) in enumerate(zip(unit_texts, unit_pages, strict=True)):
        patterns = wanted.get(page)
        if patterns and any(re.match(p, line.strip(), re.IGNORECASE) for line in text.split("\n") for p in patterns):
            lift[u] = 1.0
    return lift


HEAD_ROWS = 6
"""A statement's heading shown with its rows: its title, the company, the period and the column years
(what says which column is the year asked), at most this many lines before its first standard row."""
HEAD_CHARS = 320


def statement_lines(page_text: str, kind: str, rows: set[str]) -> list[tuple[int, int]]:
    """The character spans (in ``page_text``) a read needs of one statement page: its heading (the lines
    before its first figure or standard row, at most :data:`HEAD_ROWS` lines within its first :data:`HEAD_CHARS`
    characters; a running "Table of Contents" line left out) and every line that starts with one of
    ``rows`` (:data:`ROWS` names); lines with only blank lines between them are one span. [] when the page
    holds none of the rows (a heading alone answers nothing)."""
    spans: list[tuple[int, int]] = []
    at, heading, shown = 0, True, 0
    for line in page_text.split("\n"):
        text, end = line.strip(), at + len(line)
        heading = heading and not _starts_row(text, ROWS[kind].values()) and not _FIGURE.search(text)
        wanted = _starts_row(text, [ROWS[kind][row] for row in rows])
        if text and (wanted or (heading and shown < HEAD_ROWS and end <= HEAD_CHARS
                                and not _TITLES["contents"].fullmatch(text))):
            spans.append((at, end))
            shown += not wanted
        at = end + 1
    if not rows_in([page_text[a:b] for a, b in spans], kind) & rows:
        return []
    return _merged(page_text, spans)


_FIGURE = re.compile(r"\d,\d{3}|\d\.\d|\$\s*\(?\d")
"""A statement's figures (thousands separators, decimals, dollar amounts): where its heading has ended."""


def _starts_row(text: str, patterns: Iterable[str]) -> bool:
    return bool(text) and any(re.match(p, text, re.IGNORECASE) for p in patterns)


def _merged(text: str, spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Spans with only whitespace between them joined into one."""
    out: list[tuple[int, int]] = []
    for a, b in spans:
        if out and not text[out[-1][1] : a].strip():
            out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def statement_needs(question: str, known: Mapping[str, Any]) -> list[tuple[int, str, set[str]]]:
    """(primary page, statement kind, row names) the read's metrics are computed from, per statement the
    filing has a primary page for; [] for a read the statements cannot answer (:func:`promisable`)."""
    if not promisable(question):
        return []
    primary: Mapping[str, int] = known["primary"]
    return [(primary[kind], kind, rows) for kind, rows in needed_rows(question).items() if kind in primary]


STRUCTURE_KEY = "structure"
"""Where :func:`structure_of` keeps a filing's page analysis in its parsed data (plain dicts and lists)."""


def structure_of(data: MutableMapping[str, Any], page_texts: Callable[[], Sequence[str]],
                 titled: Mapping[str, Sequence[int]]) -> dict[str, Any]:
    """``{"boilerplate": kind -> pages, "primary": statement kind -> page}`` of the artifact whose parsed
    data is ``data``, analysed on the first read that needs it (``page_texts()``: its pages' texts) and kept."""
    known = data.get(STRUCTURE_KEY)
    if not isinstance(known, dict):
        texts = page_texts()
        known = {"boilerplate": boilerplate_pages(texts), "primary": primary_statements(texts, titled)}
        data[STRUCTURE_KEY] = known
    return known


def unit_adjustment(question: str, known: Mapping[str, Any], unit_pages: Offsets,
                    unit_text: Callable[[int], str]) -> tuple[Scores, Scores] | None:
    """(scale, lift) per unit for one read: DEMOTE on boilerplate pages it does not ask for, and 1.0 lift
    on the statement rows its metrics need (``unit_text(u)``: the text of unit u, read only for units on a
    needed statement's page); None when neither applies."""
    scale = demotion(unit_pages, demoted_pages(known["boilerplate"], question))
    needs = needed_rows(question)
    primary: Mapping[str, int] = known["primary"]
    pages = {primary[kind] for kind in needs if kind in primary}
    lift = np.zeros(len(unit_pages))
    on = np.flatnonzero(np.isin(unit_pages, sorted(pages))) if pages else np.zeros(0, dtype=np.int64)
    if len(on):
        lift[on] = row_lift([unit_text(int(u)) for u in on], unit_pages[on].tolist(), primary, needs)
    if not lift.any() and bool((scale == 1.0).all()):
        return None
    return scale, lift


def adjusted(raw: Scores, scale: Scores, lift: Scores) -> Scores:
    """A slot's raw scores demoted by ``scale`` and lifted by ``lift`` x ROW_LIFT x its best score (a slot
    that scores nothing stays at nothing: a read's metric only ranks rows for a slot that found text)."""
    top = float(raw.max()) if len(raw) else 0.0
    result: Scores = raw * scale + ROW_LIFT * top * lift
    return result
