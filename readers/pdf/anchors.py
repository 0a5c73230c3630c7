"""Anchors of the PDF Reader: where a label points in the full view, and back.

Grammar (case-insensitive; the same for ``@focus=`` and ``&scope=``)::

    p12            page 12, its marker line included
    p12-14         pages 12 to 14 (``p12-p14`` too)
    p12:L3-9       lines 3..9 of page 12's text (``p12:L3`` one line)
    p12:table1     the first table find_tables sees on page 12 (focus only)
    L120-180       lines of the whole full view, as ``@full`` numbers them
    #Heading text  the section under a heading, to the next one of the same
                   or a higher level (exact title, else a title prefix)

Passages located by an intent read are labelled ``p12:L3-9`` (a passage never
crosses a page); line numbers count from the page's first text line.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

import numpy as np

from readers.base import BadAnchor
from readers.pdf.headings import PdfHeading
from readers.retrieval.segment import Positions, bisect

PAGE = re.compile(r"p(\d{1,6})(?:-p?(\d{1,6}))?", re.IGNORECASE)
PAGE_LINES = re.compile(r"p(\d{1,6}):L(\d{1,9})(?:-L?(\d{1,9}))?", re.IGNORECASE)
TABLE = re.compile(r"p(\d{1,6}):table(\d{1,4})", re.IGNORECASE)
VIEW_LINES = re.compile(r"L(\d{1,12})(?:-L?(\d{1,12}))?", re.IGNORECASE)


@dataclass(frozen=True, eq=False)
class PageMap:
    """Where pages and lines are in the full view (arrays indexed by page - 1)."""

    view: str
    marker_starts: Positions
    text_starts: Positions
    text_ends: Positions
    line_starts: Positions
    headings: tuple[PdfHeading, ...]

    @property
    def pages(self) -> int:
        return len(self.marker_starts)

    def page_of(self, offset: int) -> int:
        """1-based page holding ``offset``."""
        return max(1, bisect(self.marker_starts, offset))

    def line_of(self, offset: int) -> int:
        """1-based line of the full view holding ``offset``."""
        return max(1, bisect(self.line_starts, offset))

    def first_line(self, page: int) -> int:
        """Full-view line number of the page's first text line."""
        return self.line_of(int(self.text_starts[page - 1]))

    def page_lines(self, page: int) -> int:
        """How many text lines the page has."""
        start, end = int(self.text_starts[page - 1]), int(self.text_ends[page - 1])
        return 0 if start == end else self.line_of(end - 1) - self.line_of(start) + 1

    def label(self, start: int, end: int) -> str:
        """``p12:L3-9`` for a span inside one page's text."""
        page = self.page_of(start)
        first = self.line_of(start) - self.first_line(page) + 1
        last = self.line_of(max(start, end - 1)) - self.first_line(page) + 1
        return f"p{page}:L{first}" if first == last else f"p{page}:L{first}-{last}"

    def heading_above(self, offset: int) -> PdfHeading | None:
        starts = [h.char_start for h in self.headings]
        at = int(np.searchsorted(np.asarray(starts, dtype=np.int64), offset, side="right"))
        return self.headings[at - 1] if at else None


def resolve(pages: PageMap, anchor: str, how: str) -> tuple[int, int]:
    """[start, end) of an anchor (not a table); ``how`` ('@focus=', '&scope=') shapes hints."""
    spec = anchor.strip()
    what = "scope" if how.startswith("&") else "anchor"
    if spec.startswith("#"):
        return _heading_span(pages, spec.lstrip("#").strip(), how)
    if match := PAGE_LINES.fullmatch(spec):
        return _page_lines(pages, int(match.group(1)), int(match.group(2)), match.group(3), how)
    if match := PAGE.fullmatch(spec):
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) else first
        _check_pages(pages, first, last, spec, how)
        return int(pages.marker_starts[first - 1]), int(pages.text_ends[last - 1])
    if match := VIEW_LINES.fullmatch(spec):
        return _view_lines(pages, int(match.group(1)), int(match.group(2) or match.group(1)), spec, how)
    raise BadAnchor(f"unknown {what} {spec!r} for a PDF", hint=_page_hint(pages, how))


def _page_hint(pages: PageMap, how: str) -> str:
    return f"the PDF has {pages.pages} pages; try {how}p1, {how}p1-{min(3, pages.pages)} or {how}p1:L1-20"


def _check_pages(pages: PageMap, first: int, last: int, spec: str, how: str) -> None:
    if not 1 <= first <= last <= pages.pages:
        raise BadAnchor(f"pages {spec!r} are outside p1-{pages.pages}", hint=_page_hint(pages, how))


def _page_lines(pages: PageMap, page: int, first: int, last_text: str | None, how: str) -> tuple[int, int]:
    last = int(last_text) if last_text else first
    _check_pages(pages, page, page, f"p{page}", how)
    count = pages.page_lines(page)
    if not 1 <= first <= last <= count:
        hint = f"page {page} has {count} text lines; try {how}p{page}" + (f":L1-{count}" if count else "")
        raise BadAnchor(f"lines {first}-{last} are outside page {page}'s lines 1-{count}", hint=hint)
    top = pages.first_line(page)
    return _lines_span(pages, top + first - 1, top + last - 1)


def _view_lines(pages: PageMap, first: int, last: int, spec: str, how: str) -> tuple[int, int]:
    count = len(pages.line_starts)
    if not 1 <= first <= last <= count:
        raise BadAnchor(f"line range {spec!r} is outside lines 1-{count}", hint=f"try {how}L1-{count} or {how}p1")
    return _lines_span(pages, first, last)


def _lines_span(pages: PageMap, first: int, last: int) -> tuple[int, int]:
    """Full-view lines first..last (1-based), without the last line's newline."""
    starts = pages.line_starts
    end = int(starts[last]) - 1 if last < len(starts) else len(pages.view)
    return int(starts[first - 1]), end


def _heading_span(pages: PageMap, title: str, how: str) -> tuple[int, int]:
    headings = pages.headings
    wanted = title.casefold()
    matches = [h for h in headings if h.title.casefold() == wanted] or [
        h for h in headings if wanted and h.title.casefold().startswith(wanted)
    ]
    if not matches:
        titles = [h.title for h in headings]
        close = difflib.get_close_matches(title, titles, n=3, cutoff=0.0)
        hint = "closest headings: " + ", ".join(f"#{t}" for t in close) if close else _page_hint(pages, how)
        raise BadAnchor(f"no heading matches {title!r}", hint=hint)
    found = matches[0]
    at = headings.index(found)
    nxt = next((h for h in headings[at + 1 :] if h.level <= found.level and h.char_start > found.char_start), None)
    end = nxt.char_start if nxt else len(pages.view)
    view = pages.view
    while end > found.char_start and view[end - 1].isspace():
        end -= 1
    return found.char_start, max(end, found.char_start + 1)
