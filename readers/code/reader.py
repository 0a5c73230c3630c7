"""The Code Reader: source files, read through their symbols.

Full view: the decoded UTF-8 text, exactly. On top of the Text Reader's
machinery (line groups, every location method, passage selection, line anchors) it adds a
symbol index (:mod:`readers.code.symbols`: ``ast`` for Python, a masked-regex
heuristic elsewhere, :mod:`readers.code.heuristic`) used four ways:

- units never straddle a symbol's first or last line, so a passage does not
  start in one function and end in the next;
- a unit holding a definition is indexed with the symbol's name split into
  words (``parse_where``, ``parseWhere`` -> ``parse where``), and an intent
  naming a symbol exactly boosts its definition above every mention;
- passages carry their innermost enclosing symbol as ``heading``;
- anchors ``#name``, ``#Class.method``, ``#name:2`` (the second of that name)
  and ``#name (L10-40)`` focus a whole definition, decorators and docstring
  included, labelled ``#Class.method (L10-40)``; ``L10-40`` focuses lines.
  ``&scope=`` takes the same anchors.
"""

from __future__ import annotations

import codecs
import dataclasses
import difflib
import re
from bisect import bisect_right
from collections.abc import Sequence
from itertools import pairwise

import numpy as np

from readers import text as textreader
from readers.base import (
    Anchor,
    ArtifactSource,
    BadAnchor,
    Batch,
    CostProfile,
    EvidenceItem,
    Parsed,
    ReadIntent,
    Scope,
    UnsupportedArtifact,
)
from readers.code.heuristic import INTERPRETERS, LANGUAGES, language_of
from readers.code.outline import preview_text
from readers.code.symbols import Symbol, SymbolIndex, index_symbols
from readers.kit.anchors import line_span, segmentation_of, segmented
from readers.kit.source import read_within
from readers.retrieval.bm25index import Scores, content_tokens
from readers.retrieval.locate import Adjustment, UnitView
from readers.retrieval.methods import METHODS
from readers.retrieval.segment import Heading, Segmentation, segment, strip_span

_SYMBOL_ANCHOR = re.compile(
    r"#\s*(?P<name>[^\s:()]+)(?::(?P<nth>\d{1,9}))?\s*(?:\(\s*L(?P<a>\d{1,12})(?:-L?(?P<b>\d{1,12}))?\s*\))?"
)
_WORD = re.compile(r"[A-Za-z_$][\w$]*")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_BOOST = 1.5
"""An exactly named symbol's definition gains this many times the slot's best score..."""
_PLAIN_BOOST = 0.5
"""...or this many when the name is a plain lower-case word (``parse``, ``run``)."""
_IDENTIFIER = re.compile(r"[_.$\d]|[a-z][A-Z]|^[A-Z]")


class CodeReader(textreader.TextReader):
    """Source code in common languages (by extension, or a shebang naming a known interpreter)."""

    name = "code"
    extensions = frozenset(LANGUAGES)
    # symbol boosts apply whatever the method. Not lexical (its whole words miss compound identifiers:
    # formatPrice holds no word "price") nor region (tuned on meetings): the selector's choices for them were
    # calibrated on prose, and a small code file keeps coming back whole.
    methods = frozenset(METHODS) - {"lexical", "region"}
    magic = (b"#!",)
    cost = CostProfile(parse_ms_per_mb=900.0, per_call_chars=140, full_view_ratio=1.0)

    def accepts(self, name: str, head: bytes) -> bool:
        if not super().accepts(name, head):
            return False
        return language_of(name, codecs.decode(head[:256], "utf-8", "ignore")) is not None

    def parse(self, source: ArtifactSource) -> Parsed:
        data = read_within(source, self.max_bytes, "Code", textreader.TOO_LARGE_HINT)
        text = textreader.decode_utf8(data)
        language = language_of(source.name, text[:256])
        if language is None:
            known = ", ".join(sorted(INTERPRETERS))
            raise UnsupportedArtifact(
                f"{source.name} is not a source file this Reader knows (no known extension or #! {known})",
                hint="read it with @intent=... through the text Reader, or with @raw",
            )
        index = index_symbols(text, language)
        seg = _segmentation(text, index.symbols)
        texts = [text[s:e] for s, e in seg.units]
        defs = _definition_units(seg, index.symbols)
        for unit, symbols in defs.items():
            texts[unit] += " " + " ".join(_name_words(s.qualname) for s in symbols)
        return Parsed(
            full_view=text,
            kind="code",
            data={
                **segmented(seg, texts),
                "language": language,
                "flags": textreader.decode_flags(data, text),
                "symbols": index,
                "firsts": [s.first for s in index.symbols],
                "by_name": _by_name(index.symbols, defs),
            },
        )

    # -- locate: the pipeline's hooks (symbol names count as a slot's words; a named definition is lifted) --

    def units(self, parsed: Parsed, scope: str | None) -> UnitView:
        return _view(parsed, scope, self.unit_word(parsed))

    def slot_terms(self, parsed: Parsed, slot: str) -> frozenset[str]:
        return content_tokens(slot) | _named(parsed, slot)

    def adjustment(self, parsed: Parsed, view: UnitView, intent: ReadIntent) -> Adjustment:
        slots = intent.slots or (intent.text,)
        return Adjustment(raw=lambda j, scores: _boosted(parsed, scores, slots[j], view.first))

    def anchor(self, parsed: Parsed, view: UnitView, run: Sequence[int]) -> Anchor:
        return _with_symbol(parsed, super().anchor(parsed, view, run))

    def flags(self, parsed: Parsed, view: UnitView) -> tuple[str, ...]:
        return _index(parsed).flags

    def focus(self, parsed: Parsed, anchor: str) -> Batch:
        spec = anchor.strip()
        if not spec.startswith("#"):
            batch = super().focus(parsed, spec)
            items = tuple(dataclasses.replace(i, anchor=_with_symbol(parsed, i.anchor)) for i in batch.items)
            return dataclasses.replace(batch, items=items)
        symbol, flags = resolve(parsed, spec, "@focus=")
        start, end = _symbol_span(parsed, symbol)
        label = f"#{symbol.qualname} (L{symbol.first}-{symbol.last})"
        item = EvidenceItem(
            Anchor(label, start, end, symbol.first, symbol.last, symbol.qualname), parsed.full_view[start:end]
        )
        scope = Scope(symbol.last - symbol.first + 1, "lines", "focus", end - start, note=f"{symbol.kind} {label}")
        return Batch((item,), scope, flags=flags + _index(parsed).flags)

    def preview(self, parsed: Parsed, max_chars: int) -> str:
        seg = segmentation_of(parsed)
        return preview_text(parsed.full_view, seg.line_starts, parsed.data["language"], _index(parsed), max_chars)


# -- parsing helpers -------------------------------------------------------------


def _index(parsed: Parsed) -> SymbolIndex:
    index = parsed.data["symbols"]
    assert isinstance(index, SymbolIndex)
    return index


def _segmentation(text: str, symbols: Sequence[Symbol]) -> Segmentation:
    """Line groups (as for any code), cut where a symbol begins or ends; symbols as headings."""
    seg = segment(text, prose=False, markdown=False)
    starts = seg.line_starts
    n = len(starts)
    cuts = sorted({int(starts[s.first - 1]) for s in symbols} | {int(starts[s.last]) for s in symbols if s.last < n})
    units: list[tuple[int, int]] = []
    for start, end in seg.units:
        at = bisect_right(cuts, start)
        while at < len(cuts) and cuts[at] < end:
            piece = strip_span(text, start, cuts[at])
            if piece[0] < piece[1]:
                units.append(piece)
            start, at = cuts[at], at + 1
        piece = strip_span(text, start, end)
        if piece[0] < piece[1]:
            units.append(piece)
    headings = tuple(Heading(min(6, s.depth + 1), s.qualname, s.first, int(starts[s.first - 1])) for s in symbols)
    return Segmentation(starts, headings, tuple(units), seg.coarse, 0)


def _definition_units(seg: Segmentation, symbols: Sequence[Symbol]) -> dict[int, list[Symbol]]:
    """Index of the unit holding each symbol's definition line -> those symbols."""
    ends = np.fromiter((e for _, e in seg.units), np.int64, len(seg.units))
    found: dict[int, list[Symbol]] = {}
    for s in symbols:
        offset = int(seg.line_starts[s.line - 1])
        unit = int(np.searchsorted(ends, offset, side="right"))
        if unit < len(seg.units):
            found.setdefault(unit, []).append(s)
    return found


def _by_name(symbols: Sequence[Symbol], defs: dict[int, list[Symbol]]) -> dict[str, list[int]]:
    """Lower-cased name and qualname -> units holding such a definition."""
    names: dict[str, list[int]] = {}
    for unit, found in defs.items():
        for s in found:
            for key in {s.name.lower(), s.qualname.lower()}:
                names.setdefault(key, []).append(unit)
    return names


def _name_words(name: str) -> str:
    """``Parser.parse_where`` -> ``Parser parse where``; ``parseWhereClause`` -> ``parse Where Clause``."""
    return " ".join(_CAMEL.findall(name))


# -- locate helpers --------------------------------------------------------------


def _named(parsed: Parsed, slot: str) -> frozenset[str]:
    """Symbol names the slot spells out (content even when not English words)."""
    by_name: dict[str, list[int]] = parsed.data["by_name"]
    return frozenset(w.lower() for w in _words(slot) if w.lower() in by_name)


def _words(slot: str) -> list[str]:
    words = _WORD.findall(slot)
    pairs = [".".join(pair) for pair in pairwise(words)]
    return list(dict.fromkeys(words + pairs + re.findall(r"[\w$.]+", slot)))


def _boosted(parsed: Parsed, scores: Scores, slot: str, first: int = 0) -> Scores:
    """Unit scores (of the units from ``first`` on) with the definitions of exactly named symbols raised
    above every other unit, whatever the location method scored."""
    by_name: dict[str, list[int]] = parsed.data["by_name"]
    weights: dict[int, float] = {}
    for word in _words(slot):
        weight = _BOOST if _IDENTIFIER.search(word) else _PLAIN_BOOST
        for u in by_name.get(word.lower(), ()):
            if 0 <= u - first < len(scores):
                weights[u - first] = max(weights.get(u - first, 0.0), weight)
    top = max(float(scores.max()) if len(scores) else 0.0, 1.0)
    for u, weight in weights.items():
        scores[u] = max(scores[u], 0.0) + weight * top
    return scores


def _with_symbol(parsed: Parsed, anchor: Anchor) -> Anchor:
    """The anchor with its innermost enclosing symbol as heading (None at module level)."""
    symbol = enclosing(parsed, anchor.line_start or 1)
    return dataclasses.replace(anchor, heading=symbol.qualname if symbol else None)


def enclosing(parsed: Parsed, line: int) -> Symbol | None:
    """The innermost symbol whose lines hold ``line``."""
    symbols = _index(parsed).symbols
    at: int | None = bisect_right(parsed.data["firsts"], line) - 1
    while at is not None and at >= 0:
        if symbols[at].last >= line:
            return symbols[at]
        at = symbols[at].parent
    return None


def _view(parsed: Parsed, spec: str | None, unit: str) -> UnitView:
    """The Text Reader's scope view; a ``#symbol`` scope is its line range."""
    if spec is None or not spec.strip().startswith("#"):
        return textreader.scoped_view(parsed, spec, unit)
    symbol, _ = resolve(parsed, spec.strip(), "&scope=")
    view = textreader.scoped_view(parsed, f"L{symbol.first}-{symbol.last}", unit)
    scope = dataclasses.replace(view.scope, note=f"scope #{symbol.qualname} (L{symbol.first}-{symbol.last})")
    return dataclasses.replace(view, scope=scope)


# -- symbol anchors --------------------------------------------------------------


def resolve(parsed: Parsed, spec: str, how: str) -> tuple[Symbol, tuple[str, ...]]:
    """The symbol a ``#name[:n][ (La-b)]`` anchor names, and a flag when the name is shared."""
    match = _SYMBOL_ANCHOR.fullmatch(spec)
    symbols = _index(parsed).symbols
    if not match:
        raise BadAnchor(f"malformed symbol anchor {spec!r}", hint=_symbol_hint(symbols, spec.lstrip("# "), how))
    name = match.group("name")
    found = _named_symbols(symbols, name)
    if not found:
        raise BadAnchor(f"no symbol is named {name!r}", hint=_symbol_hint(symbols, name, how))
    if match.group("a"):
        a = int(match.group("a"))
        b = int(match.group("b") or a)
        exact = [s for s in found if (s.first, s.last) == (a, b)] or [s for s in found if s.first <= a <= s.last]
        found = exact or found
    nth = int(match.group("nth") or 1)
    if not 1 <= nth <= len(found):
        raise BadAnchor(f"{len(found)} symbol(s) named {name!r}, not {nth}", hint=f"try {how}#{name}:1")
    flags: tuple[str, ...] = ()
    if len(found) > 1 and not match.group("a"):
        others = ", ".join(f"#{name}:{i} (L{s.first}-{s.last})" for i, s in enumerate(found[:5], 1))
        flags = (f"{len(found)} symbols named {name}: {others}",)
    return found[nth - 1], flags


def _named_symbols(symbols: Sequence[Symbol], name: str) -> list[Symbol]:
    """Symbols whose qualname, else name, else either case-insensitively, is ``name``."""
    folded = name.casefold()
    found = [s for s in symbols if s.qualname == name]
    found = found or [s for s in symbols if s.name == name or s.qualname.endswith("." + name)]
    return found or [s for s in symbols if folded in (s.qualname.casefold(), s.name.casefold())]


def _symbol_hint(symbols: Sequence[Symbol], name: str, how: str) -> str:
    if not symbols:
        return f"this file has no symbols found; ask {how}L10-40 for lines, or @scout"
    names = list(dict.fromkeys(s.qualname for s in symbols))
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.0) if len(names) < 20_000 else names[:3]
    return "closest symbols: " + ", ".join(f"{how}#{c}" for c in close) + f"; or {how}L10-40 for lines"


def _symbol_span(parsed: Parsed, symbol: Symbol) -> tuple[int, int]:
    seg = segmentation_of(parsed)
    n = len(seg.line_starts)
    first, last = min(symbol.first, n), min(max(symbol.last, symbol.first), n)
    return line_span(parsed, f"L{first}-{last}", "@focus=")
