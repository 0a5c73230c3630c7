"""A toy Reader for ``.toy`` files: what adding a Reader takes, and all it takes (tests/test_toy_reader.py).

This one file plus one registration (``TOY`` in tests/test_toy_reader.py, given to
``readers.registry.register`` at run time; in the tree it would be one line of ``_REGISTRATIONS``)
make SparseFS serve ``.toy`` files end to end: the registry picks it, the store persists its parses
(``Verses`` is declared in ``persists``), the selector files it under text, the guard and the
bounded runner read its registration. Nothing else in ``sparsefs/`` or ``readers/`` names it.

A ``.toy`` file is verses separated by blank lines. The full view is the text itself; verse 3 is
anchored ``v3`` (a range ``v3-5``); an intent gets the verses that share the most words with each
slot (lexical matching).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from readers import base

_VERSE = re.compile(r"[^\n]*\S[^\n]*(?:\n[^\n]*\S[^\n]*)*")
_WORD = re.compile(r"\w{3,}")
_ANCHOR = re.compile(r"v(\d{1,9})(?:-v?(\d{1,9}))?")
_HINT = "read it with @raw"


@dataclass
class Verses:
    """Where each verse starts and ends in the full view (stored with the parse)."""

    starts: list[int]
    ends: list[int]


class ToyReader(base.Reader):
    """Verses separated by blank lines."""

    name = "toy"
    extensions = frozenset({".toy"})
    actions = frozenset({"intent", "collect", "refine", "verify", "focus", "scout", "full", "raw"})
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

    def locate(
        self, parsed: base.Parsed, intent: base.ReadIntent, max_chars: int, exclude: Sequence[tuple[int, int]] = (),
        k: int | None = None,
    ) -> base.Batch:
        verses = parsed.data["verses"]
        ranked = _ranked(parsed.full_view, verses, intent.slots, exclude)
        items: list[base.EvidenceItem] = []
        used = 0
        for score, slot, i in ranked:
            text = parsed.full_view[verses.starts[i] : verses.ends[i]]
            if (items and used + len(text) > max_chars) or (k is not None and len(items) >= k):
                break
            if all(item.anchor.label != f"v{i + 1}" for item in items):
                items.append(_item(parsed, i, float(score), (slot,)))
                used += len(text)
        coverage = tuple(
            base.SlotCoverage(slot, "matched", tuple(it.anchor.label for it in items if n in it.slots))
            if any(n in it.slots for it in items) else base.SlotCoverage(slot, "unresolved")
            for n, slot in enumerate(intent.slots)
        )
        scope = base.Scope(len(verses.starts), "verses", "lexical", len(parsed.full_view))
        return base.Batch(tuple(items), scope, coverage)

    def focus(self, parsed: base.Parsed, anchor: str) -> base.Batch:
        verses = parsed.data["verses"]
        match = _ANCHOR.fullmatch(anchor.strip())
        first = int(match.group(1)) if match else 0
        last = int(match.group(2) or first) if match else 0
        if not 1 <= first <= last <= len(verses.starts):
            raise base.BadAnchor(f"no verse {anchor!r} here (v1-v{len(verses.starts)})", hint="ask @scout")
        items = tuple(_item(parsed, i, 0.0, ()) for i in range(first - 1, last))
        return base.Batch(items, base.Scope(last - first + 1, "verses", "focus", len(parsed.full_view)))


def _ranked(
    text: str, verses: Verses, slots: Sequence[str], exclude: Sequence[tuple[int, int]]
) -> list[tuple[int, int, int]]:
    """(words shared, slot, verse) for every verse that shares a word with a slot, best first."""
    found = []
    for n, slot in enumerate(slots):
        wanted = set(_WORD.findall(slot.lower()))
        for i, (s, e) in enumerate(zip(verses.starts, verses.ends, strict=True)):
            if any(s < xe and xs < e for xs, xe in exclude):
                continue
            score = len(wanted & set(_WORD.findall(text[s:e].lower())))
            if score:
                found.append((score, n, i))
    return sorted(found, key=lambda t: (-t[0], t[2]))


def _item(parsed: base.Parsed, i: int, score: float, slots: tuple[int, ...]) -> base.EvidenceItem:
    verses = parsed.data["verses"]
    start, end = verses.starts[i], verses.ends[i]
    line = parsed.full_view.count("\n", 0, start) + 1
    anchor = base.Anchor(f"v{i + 1}", start, end, line, line + parsed.full_view.count("\n", start, end))
    return base.EvidenceItem(anchor, parsed.full_view[start:end], score, slots)
