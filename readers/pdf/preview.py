"""The PDF Object Preview (@scout): pages, text layer, size per page, outline.

Always within ``max_chars``: lines are added in order of importance (the
summary line, the pages without a text layer, characters per page, the
outline, the first lines of text) while they fit; a list that does not fit
whole ends with a ``… N more`` line.
"""

from __future__ import annotations

from collections.abc import Sequence

from readers.kit.bounded import BoundedLines, shorten
from readers.pdf.anchors import PageMap

CHAR_GROUPS = 20
OUTLINE_SHARE = 0.6
FIRST_LINES = 8
LINE_CHARS = 140


def page_ranges(pages: Sequence[int], limit: int) -> str:
    """'p3, p5-9' for sorted page numbers, cut to about ``limit`` chars with '…'."""
    runs: list[list[int]] = []
    for p in pages:
        if runs and runs[-1][1] == p - 1:
            runs[-1][1] = p
        else:
            runs.append([p, p])
    parts = [f"p{a}" if a == b else f"p{a}-{b}" for a, b in runs]
    out = ""
    for part in parts:
        if len(out) + len(part) + 2 > limit:
            return out + ", …"
        out = f"{out}, {part}" if out else part
    return out


def _k(n: int) -> str:
    return f"{n / 1000:.1f}K" if n >= 1000 else str(n)


def preview(pages: PageMap, title: str, outline: str, repaired: bool, max_chars: int) -> str:
    if max_chars <= 0:
        return ""
    out = BoundedLines(max_chars)
    chars = [int(e - s) for s, e in zip(pages.text_starts.tolist(), pages.text_ends.tolist(), strict=True)]
    head = f"PDF: {pages.pages:,} pages, {sum(chars):,} chars of text"
    head += f'; title "{title}"' if title else ""
    out.add(head + ("; damaged file, repaired on reading" if repaired else ""))
    empty = [p for p, n in enumerate(chars, 1) if n == 0]
    if empty:
        why = "damaged, or scanned" if repaired else "scanned"
        out.add(f"no text layer ({why}; not OCR'd) on {len(empty)} pages: {page_ranges(empty, 200)}")
    else:
        out.add("every page has a text layer")
    out.add("chars per page: " + _per_page(chars))
    _outline(out, pages, outline, int(out.room() * OUTLINE_SHARE))
    _first_lines(out, pages)
    return out.text()


def _per_page(chars: Sequence[int]) -> str:
    if len(chars) <= CHAR_GROUPS:
        return " ".join(f"p{p}:{_k(n)}" for p, n in enumerate(chars, 1))
    size = -(-len(chars) // CHAR_GROUPS)
    groups = []
    for lo in range(0, len(chars), size):
        part = chars[lo : lo + size]
        groups.append(f"p{lo + 1}-{lo + len(part)}:{_k(min(part))}-{_k(max(part))}")
    return " ".join(groups) + " (min-max per page)"


def _outline(out: BoundedLines, pages: PageMap, source: str, budget: int) -> None:
    headings = pages.headings
    if not headings:
        out.add(f"outline: none found ({source})")
        return
    if not out.add(f"outline ({source}, {len(headings)} headings; @focus=#<title>):"):
        return
    floor = out.room() - budget
    for shown, h in enumerate(headings):
        line = f"{'  ' * h.level}p{h.page} {h.title}"[:LINE_CHARS]
        rest = len(headings) - shown
        more = f"  … {rest} more"
        if out.room() - len(line) - 1 < len(more) + 1 + max(0, floor) or not out.add(line):
            out.add(more)
            return


def _first_lines(out: BoundedLines, pages: PageMap) -> None:
    text_pages = [p for p in range(1, pages.pages + 1) if pages.text_starts[p - 1] < pages.text_ends[p - 1]]
    if not text_pages:
        return
    page = text_pages[0]
    start, end = int(pages.text_starts[page - 1]), int(pages.text_ends[page - 1])
    if not out.add(f"first lines of p{page}:"):
        return
    lines = [line for line in pages.view[start:end].split("\n", 2 * FIRST_LINES)[: 2 * FIRST_LINES] if line]
    for line in lines[:FIRST_LINES]:
        if not out.add("  " + shorten(line, LINE_CHARS)):
            return
