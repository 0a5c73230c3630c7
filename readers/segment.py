"""Segmentation of a text full view into lines, markdown headings and units.

A *unit* is a sentence (prose) or a group of lines (source code, data, logs),
at most :data:`UNIT_CAP` characters, given as ``[start, end)`` offsets into the
full view. Units never overlap, are in document order, and start and end on a
non-whitespace character, so any run of consecutive units sliced from the
full view is a faithful passage that never cuts a sentence.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

UNIT_CAP = 400
"""Longest unit, in characters, before it is split on line breaks or spaces."""

_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_ATX_OPEN = re.compile(r" {0,3}(#{1,6})(?:[ \t]|\r?$)")
_LIST_ITEM = re.compile(r"[ \t]*(?:[-*+]|\d{1,9}[.)])[ \t]+\S")
_TABLE_ROW = re.compile(r"[ \t]*\|")
_BOUNDARY = re.compile(r"(?<![.!?])[.!?]+[\"'\u201d\u2019)\]]*\s+")  # lookbehind: linear on '....'

_PROSE_KINDS = frozenset({"prose", "item", "heading"})
_BREAK_BEFORE = frozenset({"blank", "heading", "item", "fence_open"})
_BREAK_AFTER = frozenset({"heading", "fence_close"})
_OPENERS = frozenset("\"'\u201c\u2018([")
_ABBREVIATIONS = frozenset(
    [
        "al",
        "e.g",
        "eg",
        "i.e",
        "ie",
        "fig",
        "figs",
        "dr",
        "mr",
        "mrs",
        "ms",
        "prof",
        "vs",
        "no",
        "nos",
        "vol",
        "st",
        "jr",
        "sr",
        "eq",
        "ref",
        "refs",
        "approx",
        "ca",
        "cf",
        "ed",
        "eds",
        "inc",
        "ltd",
        "co",
        "corp",
        "dept",
        "est",
        "sec",
        "p",
        "pp",
    ]
)


@dataclass(frozen=True, slots=True)
class Heading:
    """An ATX markdown heading: level 1-6, title, 1-based line, offset of its line."""

    level: int
    title: str
    line: int
    char_start: int


@dataclass(frozen=True, slots=True)
class Segmentation:
    """Line starts, headings and units of one full view."""

    line_starts: tuple[int, ...]
    headings: tuple[Heading, ...]
    units: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class _Block:
    """A span of whole lines segmented one way: prose sentences or line groups."""

    start: int
    end: int
    prose: bool


def line_starts(text: str) -> tuple[int, ...]:
    """Offsets where each line begins; lines end at '\\n' only (like sed, grep)."""
    if not text:
        return ()
    starts = [0]
    starts.extend(m.end() for m in re.finditer("\n", text))
    if starts[-1] == len(text):
        starts.pop()
    return tuple(starts)


def segment(text: str, prose: bool, markdown: bool) -> Segmentation:
    """Segment ``text``; ``prose`` splits sentences, ``markdown`` finds headings."""
    starts = line_starts(text)
    spans = _line_spans(text, starts)
    headings: list[Heading] = []
    blocks = list(_blocks(text, spans, prose, markdown, headings))
    units: list[tuple[int, int]] = []
    for block in blocks:
        raw = _sentences(text, block) if block.prose else _line_groups(text, block)
        for start, end in raw:
            units.extend(_cap(text, start, end))
    return Segmentation(starts, tuple(headings), tuple(units))


def _line_spans(text: str, starts: tuple[int, ...]) -> list[tuple[int, int]]:
    """[start, end) of each line, without its '\\n'."""
    ends = [s - 1 for s in starts[1:]]
    if starts:
        ends.append(len(text) - 1 if text.endswith("\n") else len(text))
    return list(zip(starts, ends, strict=True))


def _blocks(
    text: str,
    spans: list[tuple[int, int]],
    prose: bool,
    markdown: bool,
    headings: list[Heading],
) -> Iterator[_Block]:
    """Group lines into blocks; blank lines, headings, list items and fences break them."""
    fence: str | None = None
    current: _Block | None = None
    for number, (start, end) in enumerate(spans, 1):
        kind, fence = _classify(text[start:end], fence, prose, markdown)
        if kind == "heading":
            headings.append(_heading(text[start:end], number, start))
        is_prose = kind in _PROSE_KINDS
        if current is not None and (kind in _BREAK_BEFORE or current.prose != is_prose):
            yield current
            current = None
        if kind == "blank":
            continue
        current = _Block(start, end, is_prose) if current is None else _Block(current.start, end, current.prose)
        if kind in _BREAK_AFTER:
            yield current
            current = None
    if current is not None:
        yield current


def _classify(line: str, fence: str | None, prose: bool, markdown: bool) -> tuple[str, str | None]:
    """Kind of a line and the fence still open after it."""
    if markdown:
        match = _FENCE.match(line)
        marker = match.group(1) if match else ""
        if marker and fence is None:
            return "fence_open", marker
        if marker and fence and marker[0] == fence[0] and len(marker) >= len(fence):
            return "fence_close", None
        if fence is not None:
            return ("blank" if not line.strip() else "code"), fence
    if not line.strip():
        return "blank", fence
    if not prose:
        return "code", fence
    if markdown and _ATX_OPEN.match(line):
        return "heading", fence
    if _LIST_ITEM.match(line):
        return "item", fence
    if _TABLE_ROW.match(line):
        return "code", fence
    return "prose", fence


def _heading(line: str, number: int, start: int) -> Heading:
    """Level and title of an ATX heading line (closing '#' sequence removed)."""
    match = _ATX_OPEN.match(line)
    assert match is not None
    title = line[match.end(1) :].strip()
    bare = title.rstrip("#")
    if not bare or bare[-1] in " \t":
        title = bare.rstrip()
    return Heading(len(match.group(1)), title, number, start)


def _sentences(text: str, block: _Block) -> Iterator[tuple[int, int]]:
    """Sentence spans of a prose block: '.!?' + whitespace + uppercase/digit/quote."""
    begin = block.start
    for match in _BOUNDARY.finditer(text, block.start, block.end):
        nxt = match.end()
        if nxt >= block.end or not _starts_sentence(text[nxt]):
            continue
        if _is_abbreviation(text, begin, match.start()):
            continue
        yield from _strip(text, begin, nxt)
        begin = nxt
    yield from _strip(text, begin, block.end)


def _starts_sentence(char: str) -> bool:
    return char.isupper() or char.isdigit() or char in _OPENERS


def _is_abbreviation(text: str, begin: int, dot: int) -> bool:
    """True when the word ending at ``dot`` is a known abbreviation or an initial."""
    if text[dot] != ".":
        return False
    floor = max(begin, dot - 12)
    word_start = max(text.rfind(" ", floor, dot), text.rfind("\n", floor, dot), floor - 1) + 1
    word = text[word_start:dot].lstrip("(\"'[").lower()
    if len(word) == 1 and word.isalpha():
        return True
    return word in _ABBREVIATIONS


def _line_groups(text: str, block: _Block) -> Iterator[tuple[int, int]]:
    """Greedy groups of whole lines, each at most UNIT_CAP chars when lines allow."""
    begin = block.start
    last_end = block.start
    pos = block.start
    while pos <= block.end:
        nl = text.find("\n", pos, block.end)
        line_end = block.end if nl < 0 else nl
        if line_end - begin > UNIT_CAP and last_end > begin:
            yield from _strip(text, begin, last_end)
            begin = pos
        last_end = line_end
        pos = line_end + 1
    yield from _strip(text, begin, block.end)


def _cap(text: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    """Split a span longer than UNIT_CAP on line breaks, then on whitespace."""
    if end - start <= UNIT_CAP:
        yield start, end
        return
    if "\n" in text[start:end]:
        for s, e in _line_groups(text, _Block(start, end, False)):
            yield from _cap_words(text, s, e)
        return
    yield from _cap_words(text, start, end)


def _cap_words(text: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    """Split a long single-line span into near-equal pieces at whitespace."""
    while end - start > UNIT_CAP:
        parts = -(-(end - start) // UNIT_CAP)
        cut = _word_cut(text, start, start + (end - start) // parts)
        yield from _strip(text, start, cut)
        start = cut
    yield from _strip(text, start, end)


def _word_cut(text: str, start: int, target: int) -> int:
    """A space near ``target`` (before it, else after it within UNIT_CAP), else a hard cut."""
    limit = start + UNIT_CAP
    before = text.rfind(" ", start + (target - start) // 2, target + 1)
    if before > start:
        return before
    after = text.find(" ", target, limit)
    return after if after > start else limit


def _strip(text: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    """The span without leading/trailing whitespace; nothing when it is blank."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    if start < end:
        yield start, end
