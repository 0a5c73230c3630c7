"""A toy Reader for ``.toy`` files: what adding a Reader takes, and all it takes
(tests/unit/readers/test_toy_reader.py).

This one file plus one registration (``TOY`` in tests/unit/readers/test_toy_reader.py, given to
``readers.registry.register`` at run time; in the tree it would be one line of ``_REGISTRATIONS``)
make SparseFS serve ``.toy`` files end to end: the registry picks it, the store persists its parses
(``Verses`` is declared in ``persists``), the selector files it under text, the guard and the
bounded runner read its registration. Nothing else in ``sparsefs/`` or ``readers/`` names it.

A ``.toy`` file is verses separated by blank lines. The full view is the text itself; verse 3 is
anchored ``v3`` (a range ``v3-5``). It is a ranking Reader (``readers.retrieval.locate``): it says what
its units are (the verses, or those of ``&scope=v3-9``) and how a run of them is anchored, and the shared
pipeline does the rest: every location method (it declares only ``lexical``), the budget, exclusion,
and coverage judged by the calibrated judge, which never promises "matched" for a family it was not
calibrated on (``toy``): the toy's best is "candidate".
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from readers import base
from readers.retrieval.bm25index import UnitIndex
from readers.retrieval.locate import RankingReader, UnitView

_VERSE = re.compile(r"[^\n]*\S[^\n]*(?:\n[^\n]*\S[^\n]*)*")
_ANCHOR = re.compile(r"v(\d{1,9})(?:-v?(\d{1,9}))?")
_HINT = "read it with @raw"


@dataclass
class Verses:
    """Where each verse starts and ends in the full view (stored with the parse)."""

    starts: list[int]
    ends: list[int]


class ToyReader(RankingReader):
    """Verses separated by blank lines."""

    name = "toy"
    extensions = frozenset({".toy"})
    methods = frozenset({"lexical"})
    max_bytes = 1 << 20
    cost = base.CostProfile(parse_ms_per_mb=5.0)

    def accepts(self, name: str, head: bytes) -> bool:
        return b"\0" not in head

    def parse(self, source: base.ArtifactSource) -> base.Parsed:
        try:
            text = source.read_bytes(self.max_bytes).decode("utf-8")
        except UnicodeDecodeError:
            raise base.UnsupportedArtifact("a .toy file is UTF-8 text", hint=_HINT) from None
        spans = [(m.start(), m.end()) for m in _VERSE.finditer(text)]
        if "\0" in text or not spans:
            raise base.UnsupportedArtifact("no verses here", hint=_HINT)
        return base.Parsed(text, "toy", {"verses": Verses([s for s, _ in spans], [e for _, e in spans])})

    def preview(self, parsed: base.Parsed, max_chars: int) -> str:
        verses = parsed.data["verses"]
        text = f"{len(verses.starts)} verses\n" + parsed.full_view[: verses.ends[min(2, len(verses.ends) - 1)]]
        return text[:max_chars]

    def units(self, parsed: base.Parsed, scope: str | None) -> UnitView:
        verses = parsed.data["verses"]
        first, last = _verses(scope, len(verses.starts), "&scope=") if scope else (1, len(verses.starts))
        starts = np.asarray(verses.starts[first - 1 : last], dtype=np.int64)
        ends = np.asarray(verses.ends[first - 1 : last], dtype=np.int64)
        found = base.Scope(last - first + 1, "verses", "lexical", int(ends[-1] - starts[0]))
        return UnitView(starts, ends, first - 1, found, lambda: _index(parsed), span=(int(starts[0]), int(ends[-1])))

    def anchor(self, parsed: base.Parsed, view: UnitView, run: Sequence[int]) -> base.Anchor:
        first, last = view.first + run[0], view.first + run[-1]
        return _anchor(parsed, first, last)

    def focus(self, parsed: base.Parsed, anchor: str) -> base.Batch:
        first, last = _verses(anchor, len(parsed.data["verses"].starts), "@focus=")
        found = _anchor(parsed, first - 1, last - 1)
        item = base.EvidenceItem(found, parsed.full_view[found.char_start : found.char_end])
        return base.Batch((item,), base.Scope(last - first + 1, "verses", "focus", len(item.text)))


def _verses(spec: str, n: int, how: str) -> tuple[int, int]:
    """(first, last), 1-based, of ``v3`` / ``v3-5``; BadAnchor otherwise."""
    match = _ANCHOR.fullmatch(spec.strip())
    first = int(match.group(1)) if match else 0
    last = int(match.group(2) or first) if match else 0
    if not 1 <= first <= last <= n:
        raise base.BadAnchor(f"no verse {spec!r} here (v1-v{n})", hint=f"ask {how}v1-{min(n, 3)} or @scout")
    return first, last


def _anchor(parsed: base.Parsed, first: int, last: int) -> base.Anchor:
    """Verses first..last (0-based) as ``v3`` / ``v3-5``."""
    verses = parsed.data["verses"]
    start, end = verses.starts[first], verses.ends[last]
    line = parsed.full_view.count("\n", 0, start) + 1
    label = f"v{first + 1}" + (f"-{last + 1}" if last > first else "")
    return base.Anchor(label, start, end, line, line + parsed.full_view.count("\n", start, end))


def _index(parsed: base.Parsed) -> UnitIndex:
    """What the pipeline scores: one BM25 document per verse, built on the first intent read."""
    verses = parsed.data["verses"]
    if "index" not in parsed.data:
        pairs = zip(verses.starts, verses.ends, strict=True)
        parsed.data["index"] = UnitIndex([parsed.full_view[start:end] for start, end in pairs])
    index: UnitIndex = parsed.data["index"]
    return index
