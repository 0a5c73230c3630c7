"""Text anchors: line ranges (``L10-40``), character ranges (``c1201-1650``) and headings (``#Install``).

Shared by the Readers whose full view is text segmented by ``readers.retrieval.segment`` (text,
markdown, code, HTML): an anchor resolves to the [start, end) span it names, for ``@focus=`` and
``&scope=``, or raises BadAnchor with a hint that says what the file has.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

from readers.base import BadAnchor, Parsed
from readers.retrieval.segment import MAX_HEADINGS, Heading, Segmentation

_LINE_ANCHOR = re.compile(r"L(\d{1,12})(?:-L?(\d{1,12}))?", re.IGNORECASE)
_CHAR_ANCHOR = re.compile(r"c(\d{1,12})-(\d{1,12})", re.IGNORECASE)


def segmentation_of(parsed: Parsed) -> Segmentation:
    seg = parsed.data["segmentation"]
    assert isinstance(seg, Segmentation)
    return seg


def anchor_span(parsed: Parsed, anchor: str, how: str) -> tuple[int, int]:
    """[start, end) of ``L10-400`` or ``#Heading`` (hints say ``how`` to ask, e.g. '@focus=')."""
    spec = anchor.strip()
    if spec.startswith("#"):
        return _heading_span(parsed, spec.lstrip("#").strip(), how)
    if _CHAR_ANCHOR.fullmatch(spec):
        return char_span(parsed, spec, how)
    return line_span(parsed, spec, how)


def char_span(parsed: Parsed, spec: str, how: str) -> tuple[int, int]:
    """[start, end) of characters a..b of the full view (1-based, inclusive), as ``c1201-1650``."""
    match = _CHAR_ANCHOR.fullmatch(spec)
    assert match is not None
    first, last, n = int(match.group(1)), int(match.group(2)), len(parsed.full_view)
    if not 1 <= first <= last <= n:
        raise BadAnchor(f"character range {spec!r} is outside characters 1-{n}", hint=f"try {how}c1-{min(n, 2000)}")
    return first - 1, last


def line_span(parsed: Parsed, spec: str, how: str) -> tuple[int, int]:
    """[start, end) of lines a..b (end excludes the last line's newline)."""
    starts = segmentation_of(parsed).line_starts
    n = len(starts)
    hint = f"file has {n} lines; try {how}L1-{n}" if n else "the file is empty; read it with @full"
    what = "scope" if how.startswith("&") else "anchor"
    match = _LINE_ANCHOR.fullmatch(spec)
    if not match:
        raise BadAnchor(f"unknown {what} {spec!r} for a text file", hint=hint)
    first = int(match.group(1))
    last = int(match.group(2)) if match.group(2) else first
    if not 1 <= first <= last <= n:
        raise BadAnchor(f"line range {spec!r} is outside lines 1-{n}", hint=hint)
    text = parsed.full_view
    end = int(starts[last]) - 1 if last < n else len(text)
    if last == n and text.endswith("\n"):
        end -= 1
    start = int(starts[first - 1])
    if end > start and text[end - 1] == "\r":  # CRLF: the anchor ends with the line's text
        end -= 1
    return start, end


def _heading_span(parsed: Parsed, title: str, how: str) -> tuple[int, int]:
    """The section under a heading: to the next heading of the same or higher level."""
    headings = segmentation_of(parsed).headings
    found = _find_heading(headings, title)
    if found is None:
        raise BadAnchor(f"no heading matches {title!r}", hint=_heading_hint(parsed, title, how))
    at = headings.index(found)
    nxt = next((h for h in headings[at + 1 :] if h.level <= found.level), None)
    end = nxt.char_start if nxt else len(parsed.full_view)
    text = parsed.full_view
    while end > found.char_start and text[end - 1].isspace():
        end -= 1
    return found.char_start, end


def _find_heading(headings: Sequence[Heading], title: str) -> Heading | None:
    wanted = title.casefold()
    if not wanted:
        return None
    exact = [h for h in headings if h.title.casefold() == wanted]
    prefix = [h for h in headings if h.title.casefold().startswith(wanted)]
    matches = exact or prefix
    return matches[0] if matches else None


def _heading_hint(parsed: Parsed, title: str, how: str) -> str:
    seg = segmentation_of(parsed)
    titles = [h.title for h in seg.headings]
    n = len(seg.line_starts)
    if not titles:
        return f"this file has no markdown headings; it has {n} lines, try {how}L1-{n}"
    close = difflib.get_close_matches(title, titles, n=3, cutoff=0.0)
    hint = "closest headings: " + ", ".join(f"#{t}" for t in close)
    if seg.headings_dropped:
        hint += f" (past {MAX_HEADINGS:,} headings the deepest levels are not indexed; try {how}L1-{n})"
    return hint
