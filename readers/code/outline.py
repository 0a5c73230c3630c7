"""The Code Reader's Object Preview (@scout): what the file defines, bounded.

A summary line (language, lines, chars, symbol counts), index flags, the
module docstring's first line, the imports, then the symbols with their
signatures and line ranges. When the whole nested outline does not fit, the
top-level symbols come first, each class with its member count, so a
5,000-line file still shows its shape; members are then one ``@focus=#Class``
away.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from readers.code.symbols import Symbol, SymbolIndex
from readers.kit.bounded import BoundedLines, clip
from readers.retrieval.segment import Positions
from readers.text import first_lines

OUTLINE_LINES = 400
"""Outline lines built before fitting (the budget keeps far fewer)."""

LINE_CHARS = 160


def preview_text(text: str, line_starts: Positions, language: str, index: SymbolIndex, max_chars: int) -> str:
    """The bounded preview of a source file."""
    if max_chars <= 0:
        return ""
    out = BoundedLines(max_chars)
    symbols = index.symbols
    out.add(_summary(text, len(line_starts), language, index))
    for flag in index.flags:
        out.add(f"note: {flag}"[:LINE_CHARS])
    if index.docstring:
        out.add(f'docstring: "{_first_line(index.docstring)}"'[:LINE_CHARS])
    if index.imports:
        out.add(_imports_line(index.imports))
    if symbols:
        _outline(out, symbols)
    else:
        first_lines(out, text, line_starts)
    return out.text()


def _summary(text: str, lines: int, language: str, index: SymbolIndex) -> str:
    kinds = Counter(s.kind for s in index.symbols)
    parts = ", ".join(f"{n:,} {kind}{'es' if kind == 'class' else 's'}" for kind, n in kinds.most_common(4))
    found = f"{len(index.symbols):,} symbols ({parts}) by {index.method}" if index.symbols else "no symbols found"
    return f"{language} source: {lines:,} lines, {len(text):,} chars, {found}"


def _first_line(docstring: str) -> str:
    return docstring.strip().split("\n", 1)[0].strip()


def _imports_line(imports: Sequence[str]) -> str:
    shown: list[str] = []
    size = 0
    for name in imports:
        if size + len(name) > 200:
            break
        shown.append(name)
        size += len(name) + 2
    more = f" … {len(imports) - len(shown)} more" if len(shown) < len(imports) else ""
    return f"imports ({len(imports)}): " + ", ".join(shown) + more


def _outline(out: BoundedLines, symbols: Sequence[Symbol]) -> None:
    """Nested outline if it fits, else top-level symbols with member counts."""
    members = Counter(s.parent for s in symbols if s.parent is not None)
    nested = [_line(s, i, members) for i, s in enumerate(symbols[:OUTLINE_LINES])]
    if len(symbols) <= OUTLINE_LINES and sum(len(line) + 1 for line in nested) + 12 <= out.room():
        out.add("symbols (@focus=#name):")
        for line in nested:
            out.add(line)
        return
    top = [i for i, s in enumerate(symbols) if s.parent is None]
    out.add(f"top-level symbols ({len(top):,} of {len(symbols):,}; @focus=#Name for one, its members included):")
    lines = (_line(symbols[i], i, members) for i in top)
    out.add_list(lines, len(top), lambda n: f"  … {n:,} more top-level symbols (@focus=L<a>-<b> to read a part)", 75)


def _line(symbol: Symbol, at: int, members: Counter[int]) -> str:
    count = members.get(at, 0)
    extra = f"  [{count} members]" if count and symbol.parent is None else ""
    deco = " ".join(symbol.decorators) + " " if symbol.decorators else ""
    line = f"{'  ' * symbol.depth}L{symbol.first}-{symbol.last} {deco}{symbol.signature}{extra}"
    return clip(line, LINE_CHARS)
