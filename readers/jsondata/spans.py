"""Where each JSON value lies in the minified full view, and the units BM25 searches.

The full view is ``orjson.dumps(document)``: no spaces, keys in source order.
A value's span is found without a Python pass over the whole tree: the
children of a container are serialised one by one with orjson (C speed), so
their lengths give their offsets, and a path is resolved level by level
(children offsets are cached per container). A member of an object spans
``"key":value``; an array element or the root spans its value.

Units for intent reads are found top-down: a value whose span is at most
:data:`UNIT_CAP` characters is one unit (small consecutive siblings are
grouped), a larger container is opened and a longer leaf (a long string) is
cut into pieces of at most UNIT_CAP, each anchored by the leaf's path.
Anchors are JSONPath: a unit is ``$.items[3].id``; a passage of several siblings is ``$.items[3:6]`` or
``$.a['x','y']``, which the JSONPath library resolves back to the same spans.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

from readers.base import ReaderError
from readers.kit.lines import UNIT_CAP, split

Part = str | int
Parts = tuple[Part, ...]
Span = tuple[int, int, int]
"""(member start, value start, value end): member start == value start except for object members."""

MIN_GROUP = 100
"""Consecutive small siblings are grouped into one unit until it holds this many characters."""
MAX_UNITS = 400_000
WORK_FACTOR = 12
"""Characters serialised while finding units, as a multiple of the full view; past it containers stay whole."""
SPAN_WORK = 400_000_000
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ESCAPES = {"\\": "\\\\", "'": "\\'", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def quote(name: str) -> str:
    """A JSONPath single-quoted name (RFC 9535 escapes)."""
    out = []
    for char in name:
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif ord(char) < 0x20:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return "'" + "".join(out) + "'"


def step(part: Part) -> str:
    if isinstance(part, int):
        return f"[{part}]"
    return f".{part}" if _IDENT.fullmatch(part) else f"[{quote(part)}]"


def path_label(parts: Parts) -> str:
    """``$.items[3].id`` (dotted where the name allows it, else ``['a b']``)."""
    return "$" + "".join(step(p) for p in parts)


@dataclass(frozen=True)
class Unit:
    start: int
    end: int
    first: Parts
    last: Parts


class Tree:
    """A parsed document and its minified full view, with lazily computed spans."""

    def __init__(self, value: Any, full_view: str) -> None:
        self.value = value
        self.text = full_view
        self.ascii = full_view.isascii()
        self._children: dict[Parts, dict[Part, Span]] = {}

    def length(self, value: Any) -> int:
        data = orjson.dumps(value)
        return len(data) if self.ascii else len(data.decode())

    def children(self, parts: Parts, value: Any, start: int) -> dict[Part, Span]:
        """Spans of the children of the container at ``parts`` (whose value starts at ``start``)."""
        cached = self._children.get(parts)
        if cached is not None:
            return cached
        spans: dict[Part, Span] = {}
        pos = start + 1
        if isinstance(value, dict):
            for key, child in value.items():
                value_start = pos + self.length(key) + 1
                spans[key] = (pos, value_start, value_start + self.length(child))
                pos = spans[key][2] + 1
        else:
            for index, child in enumerate(value):
                spans[index] = (pos, pos, pos + self.length(child))
                pos = spans[index][2] + 1
        if len(self._children) < 4096:
            self._children[parts] = spans
        return spans

    def resolve(self, parts: Parts) -> tuple[Any, Span] | None:
        """The value at ``parts`` and its span; None when the path is not in the document."""
        value, span = self.value, (0, 0, len(self.text))
        work = 0
        for depth, part in enumerate(parts):
            if not isinstance(value, (dict, list)) or isinstance(part, bool):
                return None
            if isinstance(value, dict) != isinstance(part, str):
                return None
            work += span[2] - span[1]
            if work > SPAN_WORK:
                raise ReaderError("this path is too deep in too large a document to locate",
                                  hint="ask a shorter path, or use @path= for the values alone")
            spans = self.children(parts[:depth], value, span[1])
            if part not in spans:
                return None
            span = spans[part]
            value = value[part]  # type: ignore[index]
        return value, span

    def units(self) -> list[Unit]:
        """Units in document order (see the module docstring)."""
        out: list[Unit] = []
        budget = WORK_FACTOR * len(self.text) + 1_000_000
        stack: list[tuple[Parts, Any, Span]] = [((), self.value, (0, 0, len(self.text)))]
        while stack:
            parts, value, span = stack.pop()
            big = span[2] - span[1] > UNIT_CAP
            if not big or not isinstance(value, (dict, list)) or not value or budget <= 0 or len(out) > MAX_UNITS:
                out.extend(Unit(s, e, parts, parts) for s, e in split(self.text, span[0], span[2]))
                continue
            budget -= span[2] - span[1]
            stack.extend(reversed(self._open(parts, value, span)))
        return _grouped(out)

    def _open(self, parts: Parts, value: Any, span: Span) -> list[tuple[Parts, Any, Span]]:
        spans = self.children(parts, value, span[1])
        return [((*parts, part), value[part], child) for part, child in spans.items()]


def _grouped(units: list[Unit]) -> list[Unit]:
    """Consecutive small siblings (same parent, separated by one comma) merged up to MIN_GROUP chars."""
    out: list[Unit] = []
    for unit in units:
        last = out[-1] if out else None
        if (
            last is not None
            and last.end - last.start < MIN_GROUP
            and unit.end - unit.start < MIN_GROUP
            and unit.start == last.end + 1
            and len(unit.first) == len(last.last) > 0
            and unit.first[:-1] == last.last[:-1]
        ):
            out[-1] = Unit(last.start, unit.end, last.first, unit.last)
        else:
            out.append(unit)
    return out


def run_label(tree: Tree, first: Parts, last: Parts) -> str:
    """A JSONPath whose matches cover everything from ``first`` to ``last`` (document order)."""
    if first == last:
        return path_label(first)
    common = 0
    while common < min(len(first), len(last)) and first[common] == last[common]:
        common += 1
    parent = first[:common]
    if common >= min(len(first), len(last)):
        return path_label(parent)
    a, b = first[common], last[common]
    found = tree.resolve(parent)
    container = found[0] if found else None
    if isinstance(a, int) and isinstance(b, int):
        return path_label(parent) + f"[{a}:{b + 1}]"
    if isinstance(container, dict):
        keys = list(container)
        names = keys[keys.index(a) : keys.index(b) + 1] if a in container and b in container else []
        if 0 < len(names) <= 12:
            return path_label(parent) + "[" + ",".join(quote(str(n)) for n in names) + "]"
    return path_label(parent)
