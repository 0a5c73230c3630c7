"""The Text Reader: plain text, markdown, source code, configs and logs.

Full view: the decoded UTF-8 text, exactly (newlines untouched). Evidence is
located over sentence units (line groups for code and data) by the intent's
location method (``readers.retrieval.methods``: lexical, BM25 smoothed with the
neighbours' scores, the default, hybrid, region), the next unit taken along,
and adjacent picks merged into passages that are exact slices of the full view.
``&scope=`` (``L10-400`` or ``#Heading``) restricts the units searched.

Bounded work: files over :attr:`TextReader.max_bytes` (32 MiB) are refused with
a hint; parsing is linear in the size (see ``readers.retrieval.segment``).
"""

from __future__ import annotations

import codecs
import functools
from bisect import bisect_right
from collections.abc import Sequence

import numpy as np

from readers.base import (
    Anchor,
    ArtifactSource,
    ArtifactTooLarge,
    Batch,
    CostProfile,
    EvidenceItem,
    Parsed,
    Scope,
    UnsupportedArtifact,
)
from readers.kit.anchors import anchor_span, segmentation_of, widen_lines
from readers.kit.bounded import BoundedLines, shorten
from readers.retrieval.bm25index import Offsets, UnitIndex
from readers.retrieval.locate import RankingReader, UnitView
from readers.retrieval.segment import Heading, Positions, Segmentation, bisect, segment, strip_span

_MARKDOWN = frozenset({".md", ".markdown"})
_CODE = frozenset({".py", ".js", ".ts", ".c", ".h", ".go", ".rs", ".java", ".sh", ".css"})
_CONFIG = frozenset({".yaml", ".yml", ".toml", ".ini", ".cfg"})
_DATA = frozenset({".csv", ".json", ".jsonl", ".xml", ".html"})
LONG_LINE_SLACK = 600
"""A passage whose lines hold this many more characters than it (and twice its length) is anchored by
characters, ``c1201-1650``: a line anchor there would hand a focus the whole long line."""
TOO_LARGE_HINT = "too large to index; read parts with @raw (head -c, tail -c) or search it with grep"
_METHOD = "bm25+neighbours"


def kind_of(name: str, text: str) -> str:
    """markdown | text | code | config | data | log, from the name (and a shebang)."""
    ext = extension_of(name)
    if ext in _MARKDOWN:
        return "markdown"
    if ext == ".log":
        return "log"
    if ext in _CODE or (ext == "" and text.startswith("#!")):
        return "code"
    if ext in _CONFIG:
        return "config"
    if ext in _DATA:
        return "data"
    return "text"


def extension_of(name: str) -> str:
    base = name.rsplit("/", 1)[-1]
    dot = base.rfind(".")
    return base[dot:].lower() if dot > 0 else ""


class TextReader(RankingReader):
    """Plain text, markdown and source files; any UTF-8 file without NUL bytes."""

    name = "text"
    # no extensions: the registry's fallback, for any UTF-8 file no other Reader takes
    max_bytes = 32 * 1024 * 1024
    cost = CostProfile(parse_ms_per_mb=120.0, per_call_chars=160, full_view_ratio=1.0)  # 3.7 MiB of qmsum: 0.45 s

    # -- detection and parsing -------------------------------------------------

    def accepts(self, name: str, head: bytes) -> bool:
        """True for UTF-8 text without NUL bytes (a cut multibyte char at the end is fine)."""
        return mostly_utf8(head)

    def parse(self, source: ArtifactSource) -> Parsed:
        if source.size > self.max_bytes:
            message = f"{source.size:,} bytes is over the Text Reader's {self.max_bytes:,}-byte bound"
            raise ArtifactTooLarge(message, hint=TOO_LARGE_HINT)
        data = source.read_bytes(self.max_bytes)
        text = decode_utf8(data)
        kind = kind_of(source.name, text)
        seg = segment(
            text,
            prose=kind in ("markdown", "text"),
            markdown=kind in ("markdown", "text"),
        )
        index = UnitIndex([text[s:e] for s, e in seg.units])
        return Parsed(
            full_view=text,
            kind=kind,
            data={
                "segmentation": seg,
                "unit_starts": np.fromiter((s for s, _ in seg.units), np.int64, len(seg.units)),
                "unit_ends": np.fromiter((e for _, e in seg.units), np.int64, len(seg.units)),
                "index": index,
                "flags": decode_flags(data, text),
            },
        )

    # -- locate: the pipeline's hooks (readers.retrieval.locate) ---------------

    def units(self, parsed: Parsed, scope: str | None) -> UnitView:
        """Sentences (line groups for code and data), all or those inside ``&scope=`` (clipped to it)."""
        return scoped_view(parsed, scope, self.unit_word(parsed))

    def anchor(self, parsed: Parsed, view: UnitView, run: Sequence[int]) -> Anchor:
        return line_anchor(parsed, int(view.starts[run[0]]), int(view.ends[run[-1]]))

    def unit_word(self, parsed: Parsed) -> str:
        """What the scope calls a unit."""
        prose = parsed.kind in ("markdown", "text") and not segmentation_of(parsed).coarse
        return "sentences" if prose else "line groups"

    def widen(self, parsed: Parsed, anchor: str) -> list[str]:
        return widen_lines(anchor, len(segmentation_of(parsed).line_starts), len(parsed.full_view))

    # -- focus -----------------------------------------------------------------

    def focus(self, parsed: Parsed, anchor: str) -> Batch:
        start, end = anchor_span(parsed, anchor, "@focus=")
        found = line_anchor(parsed, start, end)
        lines = (found.line_end or 0) - (found.line_start or 0) + 1
        return Batch((EvidenceItem(found, parsed.full_view[start:end]),), Scope(lines, "lines", "focus", end - start))

    # -- preview ---------------------------------------------------------------

    def preview(self, parsed: Parsed, max_chars: int) -> str:
        if max_chars <= 0:
            return ""
        out = BoundedLines(max_chars)
        seg = segmentation_of(parsed)
        text = parsed.full_view
        out.add(
            f"{parsed.kind} file: {len(text):,} chars, {len(seg.line_starts):,} lines, "
            f"{len(seg.units):,} {self.unit_word(parsed)}"
        )
        outline = BoundedLines(out.room() * 3 // 5 if len(seg.line_starts) else out.room())  # leave room for lines
        outline_lines(outline, seg.headings, seg.headings_dropped)
        out.extend(outline)
        first_lines(out, text, seg.line_starts)
        return out.text()


# -- parsing helpers -------------------------------------------------------------


INVALID_BYTES_PER_MILLE = 1
"""A file with at most 1 invalid UTF-8 byte per 1,000 is text with a few stray bytes (a log
line from a broken client, a mis-saved comment), not binary: those bytes read as U+FFFD."""


def decode_utf8(data: bytes) -> str:
    """UTF-8 text; a few invalid bytes (see INVALID_BYTES_PER_MILLE) become U+FFFD."""
    hint = "read it with @raw"
    if b"\x00" in data:
        raise UnsupportedArtifact("binary or non-UTF-8 file", hint=hint)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("utf-8", "replace")
    if invalid_bytes(data, text) > len(data) * INVALID_BYTES_PER_MILLE // 1000:
        raise UnsupportedArtifact("binary or non-UTF-8 file", hint=hint)
    return text


def invalid_bytes(data: bytes, text: str) -> int:
    """How many U+FFFD in ``text`` stand for invalid bytes of ``data`` (not genuine ones)."""
    return text.count("\ufffd") - data.count("\ufffd".encode())


def decode_flags(data: bytes, text: str) -> tuple[str, ...]:
    """Flags every pack of this artifact carries, e.g. for stray invalid bytes."""
    n = invalid_bytes(data, text) if "\ufffd" in text else 0
    return (f"invalid-utf8: {n:,} bytes read as U+FFFD (@raw has them)",) if n else ()


def mostly_utf8(head: bytes) -> bool:
    """The head decodes as UTF-8 but for a cut character at its end or a few stray bytes."""
    if b"\x00" in head:
        return False
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        stray = invalid_bytes(head, head.decode("utf-8", "replace"))
        return stray <= len(head) * INVALID_BYTES_PER_MILLE // 1000
    return True




def unit_index_of(parsed: Parsed) -> UnitIndex:
    index = parsed.data["index"]
    assert isinstance(index, UnitIndex)
    return index


# -- scope -----------------------------------------------------------------------


def scoped_view(parsed: Parsed, spec: str | None, unit: str) -> UnitView:
    """The units a locate may pick from: all of them, or those inside ``&scope=`` (``L10-400``,
    ``#Heading``), the edge units clipped to it."""
    starts, ends = parsed.data["unit_starts"], parsed.data["unit_ends"]
    index = functools.partial(unit_index_of, parsed)
    if spec is None:
        scope = Scope(len(starts), unit, _METHOD, len(parsed.full_view))
        return UnitView(starts, ends, 0, scope, index, span=(0, len(parsed.full_view)))
    lo, hi = anchor_span(parsed, spec, "&scope=")
    first = int(np.searchsorted(ends, lo, side="right"))
    last = int(np.searchsorted(starts, hi, side="left"))
    starts, ends = starts[first:last].copy(), ends[first:last].copy()
    if len(starts):
        first, starts, ends = _clip(parsed.full_view, starts, ends, lo, hi, first)
    scope = Scope(len(starts), unit, _METHOD, hi - lo, note=f"scope {spec.strip()}")
    return UnitView(starts, ends, first, scope, index, span=(lo, hi))


def _clip(text: str, starts: Offsets, ends: Offsets, lo: int, hi: int, first: int) -> tuple[int, Offsets, Offsets]:
    """Cut the edge units to [lo, hi) (stripped); drop one left blank."""
    starts[0], ends[-1] = max(int(starts[0]), lo), min(int(ends[-1]), hi)
    starts[0], ends[0] = strip_span(text, int(starts[0]), int(ends[0]))
    starts[-1], ends[-1] = strip_span(text, int(starts[-1]), int(ends[-1]))
    if starts[-1] >= ends[-1]:
        starts, ends = starts[:-1], ends[:-1]
    if len(starts) and starts[0] >= ends[0]:
        starts, ends, first = starts[1:], ends[1:], first + 1
    return first, starts, ends


# -- anchors ---------------------------------------------------------------------


def line_anchor(parsed: Parsed, start: int, end: int) -> Anchor:
    """``L12-14`` for [start, end), with the heading above; ``c1201-1650`` inside long lines."""
    seg = segmentation_of(parsed)
    first = line_of(seg, start)
    last = line_of(seg, max(start, end - 1))
    label = f"L{first}" if first == last else f"L{first}-{last}"
    if _lines_chars(parsed, seg, first, last) > max(2 * (end - start), end - start + LONG_LINE_SLACK):
        label = f"c{start + 1}-{end}"
    heading = _heading_above(seg.headings, first)
    return Anchor(label, start, end, first, last, heading.title if heading else None)


def _lines_chars(parsed: Parsed, seg: Segmentation, first: int, last: int) -> int:
    """Characters of lines first..last (1-based), newlines included."""
    starts = seg.line_starts
    end = int(starts[last]) if last < len(starts) else len(parsed.full_view)
    return end - int(starts[first - 1])


def line_of(seg: Segmentation, offset: int) -> int:
    """1-based line number holding character ``offset``."""
    return max(1, bisect(seg.line_starts, offset))


def _heading_above(headings: Sequence[Heading], line: int) -> Heading | None:
    lines = [h.line for h in headings]
    at = bisect_right(lines, line)
    return headings[at - 1] if at else None


# -- preview helpers -------------------------------------------------------------

PREVIEW_HEADINGS = 40
PREVIEW_LINES = 12
PREVIEW_LINE_CHARS = 160


def outline_lines(out: BoundedLines, headings: Sequence[Heading], dropped: int = 0) -> None:
    """The headings with their line anchors, as many as fit: where to @focus= without reading the file."""
    if not headings:
        return
    more = f", {dropped:,} more not indexed" if dropped else ""
    out.add(f"headings ({len(headings)}{more}):")
    lines = (f"{'  ' * h.level}L{h.line} {'#' * h.level} {h.title}"[:PREVIEW_LINE_CHARS]
             for h in headings[:PREVIEW_HEADINGS])
    out.add_list(lines, len(headings), lambda n: f"  … {n} more headings")


def first_lines(out: BoundedLines, text: str, starts: Positions) -> None:
    """The first lines, numbered, each shortened: what the file looks like when its outline says little."""
    if not len(starts) or not out.add("first lines:"):
        return
    for number, start in enumerate(starts[:PREVIEW_LINES].tolist(), 1):
        end = text.find("\n", start)
        line = text[start : end if end >= 0 else len(text)].rstrip("\r")
        if not out.add(f"{number:>4}| {shorten(line, PREVIEW_LINE_CHARS)}"):
            return
    if len(starts) > PREVIEW_LINES:
        first, n = PREVIEW_LINES + 1, len(starts)
        out.add(f"   … {n - PREVIEW_LINES:,} more lines (@focus=L{first}-{n})")
