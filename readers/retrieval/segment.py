"""Segmentation of a text full view into lines, markdown headings and units.

A *unit* is a sentence (prose) or a group of lines (source code, data, logs),
at most :data:`UNIT_CAP` characters, given as ``[start, end)`` offsets into the
full view. Units never overlap, are in document order, and start and end on a
non-whitespace character, so any run of consecutive units sliced from the
full view is a faithful passage that never cuts a sentence.

Bounded work: lines are found and classified with numpy; Python only visits
the lines that can change the structure (blank-line runs, possible headings,
list items, tables, fences) and the units it emits. A sentence shorter than
:data:`MIN_UNIT` joins its neighbour in the same block, so a file of tiny
lines makes line groups of a few hundred characters, not one unit per line.
A file with more than :data:`MAX_EVENTS` structural lines is segmented
*coarsely* (greedy line groups, headings found at line starts), and past
:data:`MAX_UNITS` units or :data:`MAX_HEADINGS` headings the grouping gets
coarser rather than failing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

UNIT_CAP = 400
"""Longest unit, in characters, before it is split on line breaks or spaces."""

MIN_UNIT = 80
"""A sentence shorter than this joins the next one (the last one of a block, the previous one)."""

MAX_UNITS = 400_000
"""Past this many units, neighbours are merged (up to UNIT_CAP chars) until fewer remain."""

MAX_HEADINGS = 5_000
"""Headings kept: the shallowest levels that fit (deeper ones are dropped first)."""

MAX_EVENTS = 250_000
"""Structural lines visited one by one; past this the file is segmented coarsely."""

MAX_REJECTS = 16
"""Sentence-boundary candidates rejected (abbreviations...) before a unit is cut anyway."""

MAX_SENTENCE = 16 * UNIT_CAP
"""How far a sentence end is looked for; a longer sentence is cut (then split by _cap)."""

Positions = npt.NDArray[np.int32]
"""Character offsets and line indexes (int32: a Reader never holds 2**31 characters)."""
Codes = npt.NDArray[np.uint32] | npt.NDArray[np.uint8]

_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_ATX_OPEN = re.compile(r" {0,3}(#{1,6})(?:[ \t]|\r?$)")
_LIST_ITEM = re.compile(r"[ \t]*(?:[-*+]|\d{1,9}[.)])[ \t]+\S")
_TABLE_ROW = re.compile(r"[ \t]*\|")
_BOUNDARY = re.compile(r"(?<![.!?])[.!?]+[\"'\u201d\u2019)\]]*\s++(?![a-z])")  # lookbehind: linear on '....'
_NONSPACE = re.compile(r"\S")

_PROSE_KINDS = frozenset({"prose", "item", "heading"})
_BREAK_BEFORE = frozenset({"blank", "heading", "item", "fence_open"})
_BREAK_AFTER = frozenset({"heading", "fence_close"})
_OPENERS = frozenset("\"'\u201c\u2018([")
_ABBREVIATIONS = frozenset(
    [
        *("al", "e.g", "eg", "i.e", "ie", "fig", "figs", "dr", "mr", "mrs", "ms", "prof", "vs", "no", "nos"),
        *("vol", "st", "jr", "sr", "eq", "ref", "refs", "approx", "ca", "cf", "ed", "eds", "inc", "ltd", "co"),
        *("corp", "dept", "est", "sec", "p", "pp"),
    ]
)
_SPACES = np.array([c for c in range(0x3001) if chr(c).isspace()], dtype=np.uint32)
_MARKDOWN_MARKS = "#`~ "
_PROSE_MARKS = "-*+|0123456789 \t"
_PLAIN, _BLANK, _MARKED = 0, 1, 2
_CHUNK = 1 << 22  # characters per numpy pass, to keep temporaries small


@dataclass(frozen=True, slots=True)
class Heading:
    """An ATX markdown heading: level 1-6, title, 1-based line, offset of its line."""

    level: int
    title: str
    line: int
    char_start: int


@dataclass(frozen=True, slots=True, eq=False)
class Segmentation:
    """Line starts, headings and units of one full view.

    ``coarse`` when the file had too much structure to follow line by line (its
    units are then line groups); ``headings_dropped`` counts headings past
    :data:`MAX_HEADINGS`.
    """

    line_starts: Positions
    headings: tuple[Heading, ...]
    units: tuple[tuple[int, int], ...]
    coarse: bool = False
    headings_dropped: int = 0


@dataclass(frozen=True, slots=True, eq=False)
class _Lines:
    """The text's lines: starts, ends (before the '\\n'), blank flags, first characters."""

    text: str
    starts: Positions
    ends: Positions
    blank: npt.NDArray[np.bool_]
    first: Codes


def line_starts(text: str) -> Positions:
    """Positions where each line begins; lines end at '\\n' only (like sed, grep)."""
    return _lines(text).starts


def bisect(values: Positions, value: int) -> int:
    """How many of the sorted ``values`` are <= ``value`` (O(log n): no int64 copy of them)."""
    return int(values.searchsorted(np.int32(min(value, 2**31 - 1)), side="right"))


def segment(text: str, prose: bool, markdown: bool) -> Segmentation:
    """Segment ``text``; ``prose`` splits sentences, ``markdown`` finds headings."""
    lines = _lines(text)
    events = _events(lines, prose, markdown)
    if events is None:
        units = list(_line_groups(lines, 0, len(text)))
        headings, dropped = _coarse_headings(lines) if markdown else ((), 0)
    else:
        builder = _Builder(lines, prose, markdown)
        builder.run(*events)
        units = builder.units
        headings, dropped = _cap_headings(builder.headings)
    return Segmentation(lines.starts, headings, tuple(_coarsen(units)), events is None, dropped)


# -- lines -------------------------------------------------------------------------


def _lines(text: str) -> _Lines:
    if len(text) >= 2**31:
        raise ValueError("text too long to segment")
    codes = _codes(text)
    n = len(codes)
    if not n:
        empty = np.zeros(0, np.int32)
        return _Lines(text, empty, empty, np.zeros(0, np.bool_), codes)
    parts = [np.zeros(1, np.int32)]
    for lo in range(0, n, _CHUNK):
        parts.append((np.flatnonzero(codes[lo : lo + _CHUNK] == 10) + lo + 1).astype(np.int32))
    starts = np.concatenate(parts)
    del parts
    if starts[-1] == n:
        starts = starts[:-1]
    ends = np.empty_like(starts)
    ends[:-1] = starts[1:] - 1
    ends[-1] = n - 1 if codes[-1] == 10 else n
    blank = np.empty(len(starts), dtype=np.bool_)
    first = np.empty(len(starts), dtype=codes.dtype)
    for a in range(0, len(starts), _CHUNK):  # in chunks of lines: numpy indexes with int64
        lo, hi = int(starts[a]), (int(starts[a + _CHUNK]) if a + _CHUNK < len(starts) else n)
        local = starts[a : a + _CHUNK].astype(np.intp) - lo
        part = codes[lo:hi]
        blank[a : a + _CHUNK] = ~np.logical_or.reduceat(_nonspace_mask(part), local)
        first[a : a + _CHUNK] = part[local]
    return _Lines(text, starts, ends, blank, first)


def _codes(text: str) -> Codes:
    """The code point of each character (bytes when the text is ASCII)."""
    if text.isascii():
        return np.frombuffer(text.encode("ascii"), np.uint8)
    return np.frombuffer(text.encode("utf-32-le"), np.uint32)


def _nonspace_mask(codes: Codes) -> npt.NDArray[np.bool_]:
    """True where the character is not whitespace (as str.isspace)."""
    space = (codes == 32) | ((codes >= 9) & (codes <= 13)) | ((codes >= 28) & (codes <= 31))
    if codes.dtype != np.uint8:
        wide = np.flatnonzero(codes >= 0x85)
        space[wide] = np.isin(codes[wide], _SPACES)
    mask: npt.NDArray[np.bool_] = ~space
    return mask


def _events(lines: _Lines, prose: bool, markdown: bool) -> tuple[Positions, npt.NDArray[np.int8]] | None:
    """Lines Python must visit (first of a blank or plain run, every marked line) and
    their categories; None when there are more than MAX_EVENTS."""
    category = lines.blank.astype(np.int8)  # _PLAIN 0, _BLANK 1
    marked = np.zeros(len(category), dtype=np.bool_)
    for mark in set((_MARKDOWN_MARKS if markdown else "") + (_PROSE_MARKS if prose else "")):
        marked |= lines.first == ord(mark)
    category[marked & ~lines.blank] = _MARKED
    del marked
    event = np.append(True, category[1:] != category[:-1]) if len(category) else np.zeros(0, np.bool_)
    event |= category == _MARKED
    if np.count_nonzero(event) > MAX_EVENTS:
        return None
    at = np.flatnonzero(event).astype(np.int32)
    return at, category[at]


# -- blocks ------------------------------------------------------------------------


class _Builder:
    """Blocks of lines, split into units as each block closes."""

    def __init__(self, lines: _Lines, prose: bool, markdown: bool) -> None:
        self.lines, self.prose, self.markdown = lines, prose, markdown
        self.units: list[tuple[int, int]] = []
        self.headings: list[Heading] = []
        self.block: tuple[int, int, bool] | None = None

    def run(self, at: Positions, category: npt.NDArray[np.int8]) -> None:
        """Visit each event line; a plain event stands for its whole run of plain lines."""
        text, fence = self.lines.text, None
        if not len(at):
            return
        last = np.append(at[1:], len(self.lines.starts)) - 1
        starts = self.lines.starts[at].tolist()
        line_ends = self.lines.ends[at].tolist()
        run_ends = self.lines.ends[last].tolist()
        for k, (line, cat) in enumerate(zip(at.tolist(), category.tolist(), strict=True)):
            if cat == _BLANK:
                self.close()
            elif cat == _PLAIN:
                self.feed("prose" if self.prose and fence is None else "code", starts[k], run_ends[k])
            else:
                start, end = starts[k], line_ends[k]
                kind, fence = _classify(text[start:end], fence, self.prose, self.markdown)
                if kind == "heading":
                    self.headings.append(_heading(text[start:end], line + 1, start))
                self.feed(kind, start, end)
        self.close()

    def feed(self, kind: str, start: int, end: int) -> None:
        """Add lines of one kind; blank lines, headings, list items and fences break blocks."""
        is_prose = kind in _PROSE_KINDS
        if self.block is not None and (kind in _BREAK_BEFORE or self.block[2] != is_prose):
            self.close()
        self.block = (start, end, is_prose) if self.block is None else (self.block[0], end, self.block[2])
        if kind in _BREAK_AFTER:
            self.close()

    def close(self) -> None:
        if self.block is not None:
            start, end, is_prose = self.block
            self.units.extend(_sentences(self.lines, start, end) if is_prose else _line_groups(self.lines, start, end))
            self.block = None


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


# -- headings ----------------------------------------------------------------------


def _heading(line: str, number: int, start: int) -> Heading:
    """Level and title of an ATX heading line (closing '#' sequence removed)."""
    match = _ATX_OPEN.match(line)
    assert match is not None
    title = line[match.end(1) :].strip()
    bare = title.rstrip("#")
    if not bare or bare[-1] in " \t":
        title = bare.rstrip()
    return Heading(len(match.group(1)), title, number, start)


def _cap_headings(headings: list[Heading]) -> tuple[tuple[Heading, ...], int]:
    """At most MAX_HEADINGS: the shallowest levels that fit, else the first level-1 ones."""
    if len(headings) <= MAX_HEADINGS:
        return tuple(headings), 0
    deepest = _deepest_level(np.array([h.level for h in headings]))
    kept = [h for h in headings if h.level <= deepest][:MAX_HEADINGS]
    return tuple(kept), len(headings) - len(kept)


def _deepest_level(levels: npt.NDArray[np.int64]) -> int:
    """The deepest level L such that headings of level <= L fit in MAX_HEADINGS, or the
    shallowest level present when even that one does not fit."""
    counts = np.bincount(levels, minlength=7)[1:7]
    fits = np.flatnonzero(np.cumsum(counts) <= MAX_HEADINGS)
    deepest = int(fits[-1]) + 1 if len(fits) else 0
    shallowest = int(np.flatnonzero(counts)[0]) + 1 if counts.any() else 1
    return max(deepest, shallowest)


def _coarse_headings(lines: _Lines) -> tuple[tuple[Heading, ...], int]:
    """Headings of a coarsely segmented file: '#' lines at column 0 (fences not followed)."""
    text, starts = lines.text, lines.starts
    at = np.flatnonzero(lines.first == ord("#"))
    if not len(at):
        return (), 0
    codes = _codes(text)
    level = np.ones(len(at), dtype=np.int64)
    run = np.ones(len(at), dtype=np.bool_)
    for k in range(1, 7):
        pos = np.minimum(starts[at] + k, len(codes) - 1)
        run &= (starts[at] + k < len(codes)) & (codes[pos] == ord("#"))
        level += run
    after = starts[at] + level
    nxt = codes[np.minimum(after, len(codes) - 1)]
    crlf = (nxt == 13) & ((after + 1 >= len(codes)) | (codes[np.minimum(after + 1, len(codes) - 1)] == 10))
    ok = (level <= 6) & ((after >= len(codes)) | np.isin(nxt, [9, 10, 32]) | crlf)
    at, level = at[ok], level[ok]
    keep = np.flatnonzero(level <= _deepest_level(level))[:MAX_HEADINGS]
    ends = lines.ends
    found = (_heading(text[starts[i] : ends[i]], i + 1, int(starts[i])) for i in at[keep].tolist())
    return tuple(found), len(at) - len(keep)


# -- units -------------------------------------------------------------------------


def _sentences(lines: _Lines, start: int, end: int) -> list[tuple[int, int]]:
    """Units of a prose block: sentences ('.!?' + whitespace + uppercase/digit/quote),
    a short one joined to its neighbour, a long one split by _cap."""
    text, units = lines.text, list[tuple[int, int]]()
    begin = _lstrip(text, start, end)
    while begin < end:
        nxt = _boundary(text, begin, end)
        pieces = list(_cap(lines, begin, nxt))
        if nxt >= end and len(pieces) == 1 and units and _joins_previous(units[-1], pieces[0]):
            pieces = [(units.pop()[0], pieces[0][1])]
        units.extend(pieces)
        begin = _lstrip(text, nxt, end)
    return units


def _joins_previous(previous: tuple[int, int], last: tuple[int, int]) -> bool:
    return last[1] - last[0] < MIN_UNIT and last[1] - previous[0] <= UNIT_CAP


def _boundary(text: str, begin: int, end: int) -> int:
    """Start of the sentence after the one at ``begin`` (at least MIN_UNIT chars on), or ``end``.

    Bounded: a sentence is looked for within MAX_SENTENCE chars, and after MAX_REJECTS
    rejected candidates (abbreviations, initials) the unit ends at the last one.
    """
    limit = min(end, begin + MAX_SENTENCE)
    for rejects, match in enumerate(_BOUNDARY.finditer(text, min(limit, begin + MIN_UNIT - 1), limit), 1):
        nxt = match.end()
        if nxt >= end:
            return end
        if _starts_sentence(text[nxt]) and not _is_abbreviation(text, begin, match.start()):
            return nxt
        if rejects >= MAX_REJECTS:
            return max(nxt, _soft_end(text, begin, min(end, begin + UNIT_CAP)))
    return end if limit >= end else _soft_end(text, limit - UNIT_CAP, limit)


def _soft_end(text: str, begin: int, limit: int) -> int:
    """The last space or line break in (begin + MIN_UNIT, limit), else ``limit``."""
    cut = max(text.rfind(" ", begin + MIN_UNIT, limit), text.rfind("\n", begin + MIN_UNIT, limit))
    return cut if cut > begin else limit


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


def _line_groups(lines: _Lines, start: int, end: int) -> Iterator[tuple[int, int]]:
    """Greedy groups of whole lines of [start, end), each at most UNIT_CAP chars when lines
    allow (a longer line is split at spaces)."""
    text, starts, ends = lines.text, lines.starts, lines.ends
    begin = _lstrip(text, start, end)
    while begin < end:
        line = bisect(starts, begin) - 1
        last = bisect(ends, begin + UNIT_CAP) - 1
        cut = min(end, int(ends[max(line, last)]))
        yield from _cap_words(text, begin, _rstrip(text, begin, cut))
        begin = _lstrip(text, cut, end)


def _cap(lines: _Lines, start: int, end: int) -> Iterator[tuple[int, int]]:
    """The span, stripped; one longer than UNIT_CAP split on line breaks, then on whitespace."""
    text = lines.text
    start, end = _lstrip(text, start, end), _rstrip(text, start, end)
    if end - start <= UNIT_CAP:
        if start < end:
            yield start, end
        return
    if text.find("\n", start, end) >= 0:
        yield from _line_groups(lines, start, end)
        return
    yield from _cap_words(text, start, end)


def _cap_words(text: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    """Split a long single-line span into near-equal pieces at whitespace."""
    while end - start > UNIT_CAP:
        parts = -(-(end - start) // UNIT_CAP)
        cut = _word_cut(text, start, start + (end - start) // parts)
        yield start, _rstrip(text, start, cut)
        start = _lstrip(text, cut, end)
    if start < end:
        yield start, end


def _word_cut(text: str, start: int, target: int) -> int:
    """A space near ``target`` (before it, else after it within UNIT_CAP), else a hard cut."""
    limit = start + UNIT_CAP
    before = text.rfind(" ", start + (target - start) // 2, target + 1)
    if before > start:
        return before
    after = text.find(" ", target, limit)
    return after if after > start else limit


def strip_span(text: str, start: int, end: int) -> tuple[int, int]:
    """[start, end) without leading and trailing whitespace (empty when blank)."""
    start = _lstrip(text, start, end)
    return start, max(start, _rstrip(text, start, end))


def _lstrip(text: str, start: int, end: int) -> int:
    """First non-whitespace offset in [start, end), else ``end``."""
    match = _NONSPACE.search(text, start, end)
    return match.start() if match else end


def _rstrip(text: str, start: int, end: int) -> int:
    """Offset just past the last non-whitespace char in [start, end), else ``start``."""
    while end > start:
        low = max(start, end - 256)
        kept = text[low:end].rstrip()
        if kept:
            return low + len(kept)
        end = low
    return start


def _coarsen(units: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Merge neighbours (up to UNIT_CAP chars) until at most MAX_UNITS remain."""
    while len(units) > MAX_UNITS:
        merged = [units[0]]
        for start, end in units[1:]:
            if end - merged[-1][0] <= UNIT_CAP:
                merged[-1] = (merged[-1][0], end)
            else:
                merged.append((start, end))
        if len(merged) == len(units):
            break
        units = merged
    return units
