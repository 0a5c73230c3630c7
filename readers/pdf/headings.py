"""Headings of a PDF: from its outline (bookmarks), else from font sizes.

Outline entries are placed at the first occurrence of their title in their
page's text (at the page's start when the title is not printed there).
Without an outline, a heading is a short line whose font is at least
:data:`SIZE_RATIO` times the body size (the size that sets the most
characters) and whose size is rare (at most :data:`RARE_SHARE` of the
characters: a second body font is not a heading font). Consecutive heading
lines of one size are one heading; a title printed on more than
:data:`RUNNING_PAGES` pages is a running header, not a heading. Levels rank
the heading sizes, largest first. Bold lines that look like section titles
(``PART II``, ``Item 7.``, ``Note 5``, ``3.2 Results``, ``Abstract``) are headings too,
whatever their size; a bare bold section number joins the bold line after it. A section number has at
most two digits a part: a bold year over a table's columns (``2027 After 2027``) is not a section.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

MAX_HEADINGS = 2_000
SIZE_RATIO = 1.15
RARE_SHARE = 0.1
RUNNING_PAGES = 3
MAX_TITLE = 120
_TITLE_WORDS = 8


@dataclass(frozen=True, slots=True)
class PdfHeading:
    """A heading: level (1 = top), title, 1-based page, offset of its text in the full view."""

    level: int
    title: str
    page: int
    char_start: int


@dataclass(frozen=True, slots=True)
class FontLine:
    """One text line of a page: its offset in the full view and its largest font size."""

    page: int
    offset: int
    text: str
    size: float
    bold: bool = False


def toc_headings(
    toc: Sequence[tuple[int, str, int]], view: str, starts: Sequence[int], ends: Sequence[int]
) -> tuple[PdfHeading, ...]:
    """Outline entries that point at a page of the document, in view order."""
    found: list[PdfHeading] = []
    for level, title, page in toc[:MAX_HEADINGS]:
        clean = " ".join(title.split())[:MAX_TITLE]
        if not clean or not 1 <= page <= len(starts):
            continue
        at = _title_offset(view, clean, starts[page - 1], ends[page - 1])
        found.append(PdfHeading(max(1, min(level, 6)), clean, page, at))
    return tuple(sorted(found, key=lambda h: h.char_start))


def _title_offset(view: str, title: str, start: int, end: int) -> int:
    words = title.split()[:_TITLE_WORDS]
    pattern = r"\s*".join(re.escape(w) for w in words)
    match = re.compile(pattern, re.IGNORECASE).search(view, start, end)
    return match.start() if match else start


_SECTION = re.compile(
    r"(?:PART\s+[IVX]+\b|ITEM\s+\d+[A-Z]?\.|NOTE\s+\d{1,2}\b|(\d{1,2}(?:\.\d{1,2}){0,3})\.?\s+[A-Z]"
    r"|(?:abstract|references|introduction|conclusions?|acknowledge?ments|appendix)\b)",
    re.IGNORECASE,
)
_NUMBER = re.compile(r"\d+(?:\.\d+){0,3}\.?")


def font_headings(lines: Sequence[FontLine]) -> tuple[PdfHeading, ...]:
    """Headings found by font size and bold section titles (see the module docstring)."""
    sizes = _heading_sizes(lines)
    by_size = _merge(line for line in lines if round(line.size, 1) in sizes and _plausible(line.text))
    rank = {size: min(6, level) for level, size in enumerate(sorted(sizes, reverse=True), 1)}
    found = {line.offset: PdfHeading(rank[round(line.size, 1)], line.text, line.page, line.offset) for line in by_size}
    for line in _bold_sections(lines):
        found.setdefault(line.offset, PdfHeading(_section_level(line.text), line.text, line.page, line.offset))
    pages: defaultdict[str, set[int]] = defaultdict(set)
    for h in found.values():
        pages[h.title.casefold()].add(h.page)
    headings = sorted(
        (h for h in found.values() if len(pages[h.title.casefold()]) <= RUNNING_PAGES), key=lambda h: h.char_start
    )
    if len(headings) > MAX_HEADINGS:
        headings = sorted(sorted(headings, key=lambda h: h.level)[:MAX_HEADINGS], key=lambda h: h.char_start)
    return tuple(headings)


def _heading_sizes(lines: Sequence[FontLine]) -> set[float]:
    chars: Counter[float] = Counter()
    for line in lines:
        chars[round(line.size, 1)] += len(line.text)
    if not chars:
        return set()
    body = chars.most_common(1)[0][0]
    total = sum(chars.values())
    return {size for size, n in chars.items() if size >= body * SIZE_RATIO and n <= RARE_SHARE * total}


def _bold_sections(lines: Sequence[FontLine]) -> list[FontLine]:
    bold = (line for line in lines if line.bold and len(line.text) <= MAX_TITLE)
    return [line for line in _merge(bold, numbers_only=True) if _SECTION.match(line.text)]


def _section_level(title: str) -> int:
    """PART 1, Item 2; a numbered section: 1 + its dots (3.2 -> 2); a named one 1."""
    if title[:4].upper() == "ITEM":
        return 2
    match = _SECTION.match(title)
    number = match.group(1) if match else None
    return min(6, 1 + number.count(".")) if number else 1


def _plausible(text: str) -> bool:
    return 2 <= len(text) <= MAX_TITLE and any(c.isalpha() for c in text)


def _merge(lines: Iterable[FontLine], numbers_only: bool = False) -> list[FontLine]:
    """Consecutive lines of one size (a title set on two lines) joined into one; with
    ``numbers_only``, only a bare section number and the line after it."""
    merged: list[FontLine] = []
    for line in lines:
        last = merged[-1] if merged else None
        gap = line.offset - (last.offset + len(last.text)) if last is not None else 0
        adjacent = last is not None and last.page == line.page and gap in (1, 2)  # a newline, or a blank line
        joins = last is not None and (_NUMBER.fullmatch(last.text) if numbers_only else last.size == line.size)
        if last is not None and adjacent and joins and len(last.text) + len(line.text) < MAX_TITLE:
            merged[-1] = FontLine(last.page, last.offset, f"{last.text} {line.text}", last.size, last.bold)
        else:
            merged.append(line)
    return merged
