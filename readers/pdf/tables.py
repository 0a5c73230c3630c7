"""Tables of a PDF page as TSV, for intents that ask for a table.

pymupdf's ``find_tables`` finds the grid (line strategy; its layout model is
switched off: ten times slower and no better on filings). Cells are filled
from the page's words (a word belongs to the column holding its centre, the
narrowest cell of a column giving its edges, so merged cells do not shift
figures) because the text ``Table.extract`` returns loses spaces and
misplaces commas on some producers (wkhtmltopdf filings: ``34229\\n,`` for
``34,229``). Lines just above the table that reach past its first column
(the years over the figures of a financial statement) become header rows.
Empty rows and columns are dropped; tabs and newlines in a cell become spaces.
A grid whose column edges cut through running text is a boxed paragraph, not a
table: it is dropped, and when that leaves the page without tables the
detection is run again gated by pymupdf 2's layout model (0.6 s a page).

TSV is not a slice of the full view, so a table is an *exact* result: an
empty span at the start of its page's text, labelled ``p12:table1``
(see ``readers.base.Anchor``). Detection costs 50-150 ms a page, so it only
runs on the few best-scoring pages of a read and is cached per page.
"""

from __future__ import annotations

import inspect
import re
from bisect import bisect_right
from collections.abc import Sequence
from itertools import pairwise
from typing import Any

import pymupdf as _pymupdf

from readers.pdf.extract import MUPDF_ERRORS, MUPDF_LOCK, TEXT_FLAGS, open_pdf

pymupdf: Any = _pymupdf  # pymupdf's functions are untyped: keep mypy --strict quiet in one place

TABLE_WORDS = re.compile(r"\b(?:tables?|tabular|rows?|columns?|spreadsheet|tsv|csv)\b", re.IGNORECASE)
MAX_TABLES_PER_PAGE = 20
HEADER_BAND = 45.0
"""Points above a table searched for its column headings (years over the figures)."""
COLUMN_GAP = 15.0
"""Points between two words of a heading line that mark separate columns."""
PROSE_CUTS = 0.25
"""A "table" whose column edges cut more than this many words per row is running text."""

_HAS_LAYOUT = "use_layout" in inspect.signature(pymupdf.table.find_tables).parameters
_FAST: dict[str, Any] = {"use_layout": False} if _HAS_LAYOUT else {}
_LAYOUT: dict[str, Any] | None = {"use_layout": True} if _HAS_LAYOUT else None
Word = tuple[float, float, float, float, str]


def wants_tables(intent: str) -> bool:
    """True when the intent asks for a table."""
    return TABLE_WORDS.search(intent) is not None


def page_tables(data: bytes, page: int) -> list[str]:
    """TSV of each table found on 1-based ``page`` (tables without text dropped)."""
    with MUPDF_LOCK:
        return _page_tables(data, page)


def _page_tables(data: bytes, page: int) -> list[str]:
    doc = open_pdf(data)
    try:
        fitz_page = doc.load_page(page - 1)
        words: list[Word] = [tuple(w[:5]) for w in fitz_page.get_text("words", flags=TEXT_FLAGS)]
        tables, rejected = _detect(fitz_page, words, _FAST)
        if not tables and rejected and _LAYOUT is not None:
            tables, _ = _detect(fitz_page, words, _LAYOUT)
    except MUPDF_ERRORS:  # table detection is best effort: a page it chokes on has no tables
        tables = []
    finally:
        doc.close()
        pymupdf.TOOLS.reset_mupdf_warnings()
    return tables


def _detect(page: Any, words: Sequence[Word], kwargs: dict[str, Any]) -> tuple[list[str], int]:
    """(TSV of the tables found, how many were rejected as running text)."""
    tables, rejected = [], 0
    for table in page.find_tables(**kwargs).tables[:MAX_TABLES_PER_PAGE]:
        grid, cuts = _grid(table, words)
        if cuts > max(2, PROSE_CUTS * len(grid)):
            rejected += 1
        elif tsv := _tsv(grid):
            tables.append(tsv)
    return tables, rejected


def _grid(table: Any, words: Sequence[Word]) -> tuple[list[list[str]], int]:
    """Header lines just above the table, then its rows; a word goes to the column holding
    its centre. Also counts the words a column edge separates from their neighbour by less
    than a space (text running across columns: a paragraph, not a table)."""
    columns = _columns(table)
    if not columns:
        return [], 0
    x0, y0, x1, _ = table.bbox
    inside = [w for w in words if x0 <= (w[0] + w[2]) / 2 <= x1]
    band = [w for w in inside if y0 - HEADER_BAND <= (w[1] + w[3]) / 2 < y0]
    grid: list[list[str]] = []
    for line in reversed(_text_lines(band)):  # nearest the table first; stop at running text
        cells, cuts = _row(line, columns)
        if cuts or not any(cells[1:]) or not _has_column_gap(line):
            break
        grid.insert(0, cells)
    total = 0
    for row in table.rows:
        top, bottom = row.bbox[1], row.bbox[3]
        cells, cuts = _row([w for w in inside if top <= (w[1] + w[3]) / 2 < bottom], columns)
        grid.append(cells)
        total += cuts
    return grid, total


def _has_column_gap(line: Sequence[Word]) -> bool:
    ordered = sorted(line, key=lambda w: w[0])
    return any(b[0] - a[2] > COLUMN_GAP for a, b in pairwise(ordered))


def _columns(table: Any) -> list[float]:
    """Left edge of each column: the narrowest cell of that column (merged cells span several)."""
    widths: dict[int, tuple[float, float]] = {}
    for row in table.rows:
        for c, cell in enumerate(row.cells):
            if cell is not None and (c not in widths or cell[2] - cell[0] < widths[c][1] - widths[c][0]):
                widths[c] = (cell[0], cell[2])
    return sorted(x0 for x0, _ in widths.values())


def _text_lines(words: Sequence[Word]) -> list[list[Word]]:
    """Words grouped into lines by their vertical centre (within 2 pt), top to bottom."""
    lines: list[list[Word]] = []
    for w in sorted(words, key=lambda w: ((w[1] + w[3]) / 2, w[0])):
        centre = (w[1] + w[3]) / 2
        if lines and abs(centre - (lines[-1][0][1] + lines[-1][0][3]) / 2) <= 2:
            lines[-1].append(w)
        else:
            lines.append([w])
    return lines


def _row(words: Sequence[Word], columns: list[float]) -> tuple[list[str], int]:
    """Cell texts of one row, and how many words a column edge cuts from their neighbour."""
    cells: list[list[str]] = [[] for _ in columns]
    cuts, previous, previous_column = 0, None, -1
    for w in sorted(words, key=lambda w: ((w[1] + w[3]) / 2 // 3, w[0])):
        column = max(0, bisect_right(columns, (w[0] + w[2]) / 2) - 1)
        same_line = previous is not None and abs((w[1] + w[3]) - (previous[1] + previous[3])) / 2 <= 2
        if same_line and previous is not None and column != previous_column and w[0] - previous[2] < 3:
            cuts += 1
        cells[column].append(w[4])
        previous, previous_column = w, column
    return [" ".join(" ".join(c).split()) for c in cells], cuts


def _tsv(rows: list[list[str]]) -> str:
    """Rows as TSV without empty rows and columns."""
    rows = [r for r in rows if any(r)]
    if not rows:
        return ""
    width = max(len(r) for r in rows)
    rows = [r + [""] * (width - len(r)) for r in rows]
    keep = [c for c in range(width) if any(r[c] for r in rows)]
    return "\n".join("\t".join(r[c] for c in keep) for r in rows)
