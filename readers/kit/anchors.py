"""Text anchors: line ranges (``L10-40``), character ranges (``c1201-1650``) and headings (``#Install``).

Shared by the Readers whose full view is text segmented by ``readers.retrieval.segment`` (text,
markdown, code, HTML): an anchor resolves to the [start, end) span it names, for ``@focus=`` and
``&scope=``, or raises BadAnchor with a hint that says what the file has. The line-range parsing
and spans are also the record Readers' (:mod:`readers.kit.lines`), and :func:`segmented` is what
the segmented Readers keep of a parse.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from readers.base import BadAnchor, Parsed
from readers.retrieval.bm25index import UnitIndex
from readers.retrieval.segment import MAX_HEADINGS, Heading, Positions, Segmentation

LINE_ANCHOR = re.compile(r"L(\d{1,12})(?:-L?(\d{1,12}))?", re.IGNORECASE)
_CHAR_ANCHOR = re.compile(r"c(\d{1,12})-(\d{1,12})", re.IGNORECASE)


def segmentation_of(parsed: Parsed) -> Segmentation:
    seg = parsed.data["segmentation"]
    assert isinstance(seg, Segmentation)
    return seg


def segmented(seg: Segmentation, texts: list[str]) -> dict[str, Any]:
    """What a Reader whose full view is segmented text keeps for its anchors and its locate: the
    segmentation, the units' offsets, and the index of ``texts`` (what each unit is searched as)."""
    n = len(seg.units)
    return {
        "segmentation": seg,
        "unit_starts": np.fromiter((s for s, _ in seg.units), np.int64, n),
        "unit_ends": np.fromiter((e for _, e in seg.units), np.int64, n),
        "index": UnitIndex(texts),
    }


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
    first, last = line_range(spec, n, f"unknown {what} {spec!r} for a text file", hint)
    return lines_span(parsed.full_view, starts, first, last)


def line_range(spec: str, n: int, unknown: str, hint: str) -> tuple[int, int]:
    """(first, last) of ``L12`` / ``L12-40`` / ``L12-L40`` within lines 1..n; BadAnchor (``unknown`` for
    what is no line range at all) with ``hint`` otherwise."""
    match = LINE_ANCHOR.fullmatch(spec.strip())
    if not match:
        raise BadAnchor(unknown, hint=hint)
    first = int(match.group(1))
    last = int(match.group(2)) if match.group(2) else first
    if not 1 <= first <= last <= n:
        raise BadAnchor(f"line range {spec!r} is outside lines 1-{n:,}", hint=hint)
    return first, last


def lines_span(text: str, starts: Positions, first: int, last: int) -> tuple[int, int]:
    """[start, end) of lines first..last (1-based) of ``text``: the end excludes the last line's newline
    and, for CRLF, its CR, so the anchor ends with the line's text."""
    n = len(starts)
    start = int(starts[first - 1])
    end = int(starts[last]) - 1 if last < n else len(text)
    if last == n and text.endswith("\n"):
        end -= 1
    if end > start and text[end - 1] == "\r":
        end -= 1
    return start, max(start, end)


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


# -- widening (Reader.widen) ----------------------------------------------------------------

CONTEXT_LINES = (10, 4, 1)
"""Lines of context a widened line range adds on each side, widest first."""
CONTEXT_CHARS = 400
"""Characters of context a widened character range adds on each side."""


def widen_lines(anchor: str, lines: int, chars: int, prefix: str = "") -> list[str]:
    """``L12-14`` widened by :data:`CONTEXT_LINES` within lines 1..``lines``, widest first; ``c1201-1650`` by
    :data:`CONTEXT_CHARS` within characters 1..``chars``; each written after ``prefix`` (``p12:``), never
    the anchor itself. Anything else has no widening here."""
    spec = anchor.strip()
    line = LINE_ANCHOR.fullmatch(spec)
    if line:
        first, last = int(line.group(1)), int(line.group(2) or line.group(1))
        wider = [f"L{max(1, first - n)}-{min(max(lines, last), last + n)}" for n in CONTEXT_LINES]
        return [prefix + w for w in dict.fromkeys(wider) if w != spec]
    span = _CHAR_ANCHOR.fullmatch(spec)
    if span:
        first, last = int(span.group(1)), int(span.group(2))
        around = f"c{max(1, first - CONTEXT_CHARS)}-{min(max(chars, last), last + CONTEXT_CHARS)}"
        return [prefix + around] if around != spec else []
    return []
