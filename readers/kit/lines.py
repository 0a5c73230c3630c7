"""Line-record machinery shared by the log and JSON Lines Readers.

Both serve a full view whose lines are the source's lines (same numbering), so
every anchor is a line range ``L120`` / ``L120-130``. This module holds what
they share: line spans, line anchors, the line units intent reads rank (one unit
per non-blank line; :class:`readers.kit.records.RecordReader` hands them to the
pipeline of :mod:`readers.retrieval.locate`), and the shaping of exact results
(counts, matching records) into bounded batches.

A *record* is a run of lines ``(first, last)`` (1-based, inclusive): one line
for JSONL and access logs, a line and its continuation lines (a stack trace)
for application logs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np

from readers.base import (
    Anchor,
    ArtifactTooLarge,
    Batch,
    EvidenceItem,
    Parsed,
    Scope,
)
from readers.kit.anchors import line_range, lines_span
from readers.kit.bounded import BoundedLines, clip, shorten
from readers.retrieval.bm25index import Offsets, UnitIndex
from readers.retrieval.locate import UnitView
from readers.retrieval.segment import Positions, line_starts

UNIT_CAP = 400
"""Longest unit; a longer line is cut into pieces (each still anchored by its line)."""
INDEX_LIMIT = 16 * 1024 * 1024
"""Most characters one BM25 index covers (~3 s to build on the reference machine)."""
MAX_UNITS = 400_000
"""Past this many non-blank lines, consecutive lines are grouped into one unit."""
CUT_FROM = 40
"""A record preview clips a line too long for the room left while this many characters are left
(``BoundedLines(..., cut_from=CUT_FROM)``): a long record still shows its start."""
RESULTS_TRUNCATED = "results-truncated"
METHOD = "bm25+neighbours"

Record = tuple[int, int]


def starts_of(text: str) -> Positions:
    return line_starts(text)


def line_count(parsed: Parsed) -> int:
    return len(_starts(parsed))


def _starts(parsed: Parsed) -> Positions:
    starts = parsed.data["line_starts"]
    assert isinstance(starts, np.ndarray)
    return starts


def span(parsed: Parsed, first: int, last: int) -> tuple[int, int]:
    """[start, end) of lines first..last (1-based), without the final newline / CR."""
    return lines_span(parsed.full_view, _starts(parsed), first, last)


def line_text(parsed: Parsed, number: int) -> str:
    start, end = span(parsed, number, number)
    return parsed.full_view[start:end]


def label(first: int, last: int) -> str:
    return f"L{first}" if first == last else f"L{first}-{last}"


def parse_anchor(parsed: Parsed, spec: str, how: str = "@focus=") -> Record:
    """``L12`` / ``L12-40`` -> (12, 40); BadAnchor with the valid range otherwise."""
    n = line_count(parsed)
    hint = f"anchors are line ranges; this file has {n:,} lines: try {how}L1-{min(n, 50)}"
    return line_range(spec, n, f"unknown anchor {spec!r}", hint)


def item(parsed: Parsed, first: int, last: int, score: float = 0.0, slots: tuple[int, ...] = ()) -> EvidenceItem:
    start, end = span(parsed, first, last)
    anchor = Anchor(label(first, last), start, end, first, last)
    return EvidenceItem(anchor, parsed.full_view[start:end], score, slots)


def focus(parsed: Parsed, anchor: str) -> Batch:
    first, last = parse_anchor(parsed, anchor)
    found = item(parsed, first, last)
    return Batch((found,), Scope(last - first + 1, "lines", "focus", len(found.text)))


# -- intent reads ------------------------------------------------------------------


def _units(parsed: Parsed) -> tuple[Offsets, Offsets]:
    """Unit starts and ends, found on first use.

    One unit per non-blank line; a line over UNIT_CAP characters (a big JSON
    record) is cut after a ',' or space into pieces of at most UNIT_CAP; past
    MAX_UNITS lines, consecutive lines are grouped.
    """
    if "units" not in parsed.data:
        text = parsed.full_view
        spans = [span(parsed, i, i) for i in range(1, line_count(parsed) + 1)]
        spans = [(s, e) for s, e in spans if e > s and not text[s:e].isspace()]
        group = max(1, -(-len(spans) // MAX_UNITS))
        pieces: list[tuple[int, int]] = []
        for c in range(0, len(spans), group):
            start, end = spans[c][0], spans[min(c + group, len(spans)) - 1][1]
            pieces.extend(split(text, start, end) if group == 1 else [(start, end)])
        unit_starts = np.array([s for s, _ in pieces], np.int64)
        unit_ends = np.array([e for _, e in pieces], np.int64)
        parsed.data["units"] = (unit_starts, unit_ends)
    units: tuple[Offsets, Offsets] = parsed.data["units"]
    return units


def cached_index(parsed: Parsed, key: str, chars: int, texts: Callable[[], list[str]], hint: str) -> UnitIndex:
    """The BM25 index of a view (all units: key ''; a scope: its spec), built once and kept (4 at most).

    Refused over INDEX_LIMIT characters: indexing costs about 0.2 s per MB.
    """
    cache: dict[str, UnitIndex] = parsed.data.setdefault("indexes", {})
    if key not in cache:
        if chars > INDEX_LIMIT:
            raise ArtifactTooLarge(
                f"{chars:,} characters are too many to search by intent at once (limit {INDEX_LIMIT:,})", hint=hint
            )
        if len(cache) >= 4:
            cache.pop(next(k for k in cache if k))
        cache[key] = UnitIndex(texts())
    return cache[key]


def split(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """[start, end) cut after a ',' or a space into pieces of at most UNIT_CAP characters."""
    out = []
    while end - start > UNIT_CAP:
        lo, hi = start + UNIT_CAP // 2, start + UNIT_CAP
        cut = max(text.rfind(",", lo, hi), text.rfind(" ", lo, hi))
        cut = cut + 1 if cut > start else start + UNIT_CAP
        out.append((start, cut))
        start = cut
    out.append((start, end))
    return out


def line_view(parsed: Parsed, scope: str | None) -> UnitView:
    """Line units, all or those inside ``&scope=L<a>-<b>`` (a scope has its own index, not its own units:
    ``ids`` keep the units' numbers for the dense cache)."""
    starts, ends = _units(parsed)
    first, key, note, chars = 0, "", "", len(parsed.full_view)
    lo, hi = 0, len(parsed.full_view)
    if scope:
        lo, hi = span(parsed, *parse_anchor(parsed, scope, "&scope="))
        inside = (starts >= lo) & (ends <= hi)
        first = int(np.argmax(inside)) if inside.any() else 0
        starts, ends = starts[inside], ends[inside]
        key, note, chars = scope.strip(), f"scope {scope.strip()}", hi - lo
    text = parsed.full_view
    hint = "narrow it with &scope=L<a>-<b>, or use the exact @filter=<regex> / @count"

    def index() -> UnitIndex:
        return cached_index(parsed, key, chars, lambda: [text[s:e] for s, e in zip(starts, ends, strict=True)], hint)

    ids = np.arange(first, first + len(starts), dtype=np.int64)
    scope_ = Scope(len(starts), "lines", METHOD, chars, note)
    return UnitView(starts, ends, 0, scope_, index, ids, span=(lo, hi), empty="no-lines")


def passage_anchor(parsed: Parsed, start: int, end: int) -> Anchor:
    """The lines holding [start, end), anchored ``L<a>-<b>`` (the span stays the exact slice)."""
    first, last = _line_of(parsed, start), _line_of(parsed, end - 1)
    return Anchor(label(first, last), start, end, first, last)


def _line_of(parsed: Parsed, offset: int) -> int:
    return int(np.searchsorted(_starts(parsed), offset, side="right"))


# -- exact results -----------------------------------------------------------------


def records_batch(
    parsed: Parsed, records: Sequence[Record], total: int, scanned: tuple[int, str], note: str, max_chars: int,
    k: int | None,
) -> Batch:
    """``total`` matching records (the first ones given): a count line, then exact slices.

    A record longer than the room left is shown by its first line only if that
    fits; k bounds the records shown.
    """
    head = f"{total:,} matching of {scanned[0]:,} {scanned[1]}" + (f" ({note})" if note else "")
    head = clip(head, max_chars)
    items = [_result(head, parsed)]
    room = max_chars - len(head)
    limit = len(records) if k is None else min(k, len(records))
    cut = False
    for first, last in records[:limit]:
        found = item(parsed, first, last)
        if len(found.text) > room and last > first:
            found = item(parsed, first, first)
        if len(found.text) > room and len(items) == 1 and room >= 80:
            found, cut = _prefix(found, room), True
        if len(found.text) > room or not found.text:
            break
        items.append(found)
        room -= len(found.text) + 1
    shown = len(items) - 1
    flags = (RESULTS_TRUNCATED,) if (shown < total and limit) or cut else ()
    more = "" if not flags else f"; showing the first {shown:,} of {total:,}" + (" (the last one cut)" if cut else "")
    return Batch(tuple(items), Scope(*scanned, "exact", len(parsed.full_view), note + more), flags=flags)


def _prefix(found: EvidenceItem, room: int) -> EvidenceItem:
    """The first ``room`` characters of a record too long to show whole (still an exact slice)."""
    a = found.anchor
    cut = Anchor(a.label, a.char_start, a.char_start + room, a.line_start, a.line_start)
    return EvidenceItem(cut, found.text[:room], found.score, found.slots)


def _result(text: str, parsed: Parsed) -> EvidenceItem:
    """An exact result: empty span, labelled with the whole file it was computed from."""
    return EvidenceItem(Anchor(label(1, max(1, line_count(parsed))), 0, 0), text)


def results_batch(
    parsed: Parsed, head: str, lines: Sequence[str], scanned: tuple[int, str], note: str, max_chars: int,
    label: str | None = None,
) -> Batch:
    """One result: a head line then result lines (count per group, aggregates), cut at whole lines;
    labelled ``label`` (a JSONPath), else by the whole file's lines it was computed from."""
    out = BoundedLines(max(max_chars, 1))
    out.add(head)
    for text in lines:
        if not out.add(text):
            break
    count = len(out.lines) - 1
    flags = (RESULTS_TRUNCATED,) if count < len(lines) else ()
    more = f"; showing {count:,} of {len(lines):,} results" if flags else ""
    item = _result(out.text(), parsed) if label is None else EvidenceItem(Anchor(label, 0, 0), out.text())
    return Batch((item,), Scope(*scanned, "exact", len(parsed.full_view), note + more), flags=flags)


def count_lines(counts: Counter[str], what: str, total: int, missing: int) -> tuple[str, list[str]]:
    """The head (``n records by what``) and ``value<TAB>count`` lines, most frequent first."""
    head = f"{total:,} by {what}: {len(counts):,} distinct values"
    if missing:
        head += f", {missing:,} without {what}"
    return head, [f"{value}\t{n:,}" for value, n in counts.most_common()]


def sample_lines(out: BoundedLines, parsed: Parsed, numbers: Sequence[int], width: int = 160) -> None:
    """``L<n>| text`` for each line number while they fit."""
    for number in numbers:
        if not out.add(f"L{number}| {shorten(line_text(parsed, number), width)}"):
            return
