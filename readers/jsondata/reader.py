"""The JSON Reader: a document as minified JSON, with JSONPath anchors and lookups.

Full view: ``orjson.dumps(document)`` (no whitespace, keys in source order),
the cheapest faithful rendering; its length is L. Anchors are JSONPath
(RFC 9535, via python-jsonpath): ``$.items[3].id``, ``$.items[3:6]``,
``$['a b']``; ``@focus=`` returns every match as an exact slice of the full
view (an object member with its key, ``"id":3``). Intent reads rank units
(values up to 400 characters, small siblings grouped, see
:mod:`readers.jsondata.spans`), each indexed with the key names above it, by
any location method (:mod:`readers.retrieval.locate`).
Exact operations: ``path`` (a head item, then one item per match anchored by
its concrete path), ``count``, ``distinct`` and ``sum/mean/min/max`` over a
JSONPath's matches (one item: a head line, then the result lines). They take
no options: the filter goes inside the JSONPath (``$.items[?@.size>100]``),
and ``where``/``by``/``rows``/``since``/``until``/``cols``/``sheet`` are refused.

Bounds: orjson refuses nesting deeper than 1024 levels and the full view
cannot serialise more than 254, so deeper documents are refused at once with
a hint; JSONPath evaluation is bounded in matches and time.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson

from readers.base import (
    Anchor,
    ArtifactSource,
    BadAnchor,
    Batch,
    CostProfile,
    EvidenceItem,
    Parsed,
    ReaderError,
    Scope,
    UnsupportedArtifact,
)
from readers.jsondata import query as json_query
from readers.jsondata.shape import shape
from readers.jsondata.spans import Tree, Unit, path_label, run_label
from readers.kit import lines as log_lines
from readers.kit.bounded import BoundedLines, clip, shorten
from readers.kit.source import read_within
from readers.ops import Operation, format_number, reduce_numbers, require_options
from readers.retrieval.bm25index import UnitIndex
from readers.retrieval.locate import RankingReader, UnitView

_RAW_HINT = "read the original bytes with @raw"
_FOCUS_ITEMS = 200
_BIG_INT = re.compile(rb"[:\[,]\s*-?\d{20,}(?![\d.eE])")
"""An integer token of 20+ digits: orjson reads those past 64 bits as floats."""
_METHOD = "bm25+neighbours"
_FILTER_HINT = ("a JSON document takes its filter inside the JSONPath (no &where=, &by=, &rows=, &since=, "
                "&until=, &cols=, &sheet=): e.g. @count=$.items[?@.state=='open'] or @path=$.items[?@.size>100].name")
_LARGE_HINT = "narrow it with &scope=$.some.part (see @scout), or use the exact @path= / @count="


class JsonReader(RankingReader):
    """One JSON document: shape, JSONPath focus and lookups, BM25 over values."""

    name = "json"
    extensions = frozenset({".json", ".geojson"})
    operations = frozenset({"path", "count", "distinct", "sum", "mean", "min", "max"})
    cost = CostProfile(parse_ms_per_mb=70.0, per_call_chars=120, full_view_ratio=0.8)

    def accepts(self, name: str, head: bytes) -> bool:
        return b"\x00" not in head

    def parse(self, source: ArtifactSource) -> Parsed:
        data = read_within(source, self.max_bytes, "JSON", _RAW_HINT).removeprefix(b"\xef\xbb\xbf")
        value = load(data)
        try:
            full = orjson.dumps(value).decode()
        except orjson.JSONEncodeError as err:
            raise UnsupportedArtifact(f"cannot render this JSON: {err} (nested deeper than 254 levels?)",
                                      hint=_RAW_HINT + " (head -c to see the start)") from None
        lossy = _BIG_INT.search(data) is not None
        return Parsed(full, "json", {"tree": Tree(value, full), "lossy_numbers": lossy})

    def preview(self, parsed: Parsed, max_chars: int) -> str:
        if max_chars <= 0:
            return ""
        tree = _tree(parsed)
        out = BoundedLines(max_chars, cut_from=log_lines.CUT_FROM)
        out.add(f"json: {len(parsed.full_view):,} chars minified; top level {json_query_kind(tree.value)}")
        if parsed.data.get("lossy_numbers"):
            out.add("note: integers beyond 64 bits are shown as floats (rounded); @raw has the exact digits")
        for line in shape(tree.value):
            if not out.add(shorten(line, 160)):
                break
        out.add("ask: @path=$.a[*].b | @focus=$.a[0] | @count=$.a[*] | @intent=...")
        return out.text()

    # -- locate: the pipeline's hooks (readers.retrieval.locate) ---------------

    def units(self, parsed: Parsed, scope: str | None) -> UnitView:
        """Values (see readers.jsondata.spans), all or those inside the matches of a JSONPath scope; each
        view has its own index (``ids``: the units' numbers, for labels and the dense cache)."""
        units, starts, ends = _units(parsed)
        ids = np.arange(len(units))
        key, note, chars = "", "", len(parsed.full_view)
        if scope:
            ids = np.flatnonzero(_inside(parsed, scope, starts, ends))
            key, note = scope.strip(), f"scope {scope.strip()}"
            chars = int((ends[ids] - starts[ids]).sum())

        def index() -> UnitIndex:
            return log_lines.cached_index(parsed, key, chars, lambda: _texts(parsed, units, ids), _LARGE_HINT)

        span = (int(starts[ids[0]]), int(ends[ids[-1]])) if len(ids) else (0, 0)
        scope_ = Scope(len(ids), "values", _METHOD, chars, note)
        return UnitView(starts[ids], ends[ids], 0, scope_, index, ids, span=span, empty="no-values")

    def runs(self, parsed: Parsed, view: UnitView, run: list[int]) -> list[list[int]]:
        """Cut where the chosen values are not neighbours in the document (a scope with several matches)."""
        assert view.ids is not None
        return _split([run], view.ids)

    def anchor(self, parsed: Parsed, view: UnitView, run: Sequence[int]) -> Anchor:
        assert view.ids is not None
        units = _units(parsed)[0]
        label = run_label(_tree(parsed), units[view.ids[run[0]]].first, units[view.ids[run[-1]]].last)
        return Anchor(label, int(view.starts[run[0]]), int(view.ends[run[-1]]))

    def focus(self, parsed: Parsed, anchor: str) -> Batch:
        tree = _tree(parsed)
        result = json_query.evaluate(tree, anchor, error=BadAnchor, limit=_FOCUS_ITEMS + 1)
        spans = sorted({m.span for m in result.matches if m.span is not None})
        if not spans:
            raise json_query.bad_anchor(anchor, tree)
        items = []
        for match in result.matches[:_FOCUS_ITEMS]:
            if match.span is not None:
                start, end = match.span[0], match.span[2]
                label = path_label(match.parts)
                items.append(EvidenceItem(Anchor(label, start, end), parsed.full_view[start:end]))
        flags = ("results-truncated",) if len(result.matches) > len(items) or not result.complete else ()
        chars = sum(len(i.text) for i in items)
        return Batch(tuple(items), Scope(len(items), "values", "focus", chars), flags=flags)

    def operate(self, parsed: Parsed, operation: Operation, max_chars: int) -> Batch:
        if operation.name not in self.operations:
            return super().operate(parsed, operation, max_chars)
        require_options(operation, frozenset(), "json", hint=_FILTER_HINT)
        tree = _tree(parsed)
        target = operation.target or ("$[*]" if isinstance(tree.value, (dict, list)) else "$")
        result = json_query.evaluate(tree, target, spans=False)
        note = f"{target}" + ("" if result.complete else f"; stopped after {len(result.matches):,} matches")
        name, n, label = operation.name, len(result.matches), json_query.normalise(target)
        head = f"{n:,} matches of {target}"
        if name == "path":
            return _results(parsed, label, head, json_query.path_lines(result), n, note, max_chars)
        lines: list[str] = []
        if name == "distinct":
            lines = json_query.distinct_lines(result)
        elif name != "count":
            values = json_query.numbers(result)
            head += f"; {len(values):,} numeric"
            lines = ["no numeric value"]
            if values:
                lines = [f"{name}({target}) = {format_number(reduce_numbers(name, values))}"]
        return log_lines.results_batch(parsed, head, lines, (n, "values"), note, max_chars, label)


def json_query_kind(value: Any) -> str:
    if isinstance(value, dict):
        return f"object with {len(value):,} keys"
    if isinstance(value, list):
        return f"list of {len(value):,} items"
    return type(value).__name__


def load(data: bytes) -> Any:
    """orjson.loads with errors a reader can act on (where, and what to ask instead)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as err:
        message = str(err).splitlines()[0]
        if "depth" in message or "recursion" in message.lower():
            raise UnsupportedArtifact(f"JSON nested too deeply: {message}", hint=_RAW_HINT) from None
        hint = f"{_RAW_HINT} around line {err.lineno}"
        if ("trailing" in message or "after document" in message) and data.lstrip()[:1] == b"{":
            hint = "this looks like JSON Lines (one record a line); name it .jsonl, or " + _RAW_HINT
        raise ReaderError(f"invalid JSON at line {err.lineno}, column {err.colno}: {message}", hint=hint) from None


def _tree(parsed: Parsed) -> Tree:
    tree = parsed.data["tree"]
    assert isinstance(tree, Tree)
    return tree


def _units(parsed: Parsed) -> tuple[list[Unit], np.ndarray, np.ndarray]:
    if "units" not in parsed.data:
        units = _tree(parsed).units()
        starts = np.array([u.start for u in units], np.int64)
        ends = np.array([u.end for u in units], np.int64)
        parsed.data["units"] = (units, starts, ends)
    found: tuple[list[Unit], np.ndarray, np.ndarray] = parsed.data["units"]
    return found


def _texts(parsed: Parsed, units: list[Unit], ids: np.ndarray) -> list[str]:
    """What BM25 indexes per unit: the key names above it, then its slice."""
    text = parsed.full_view
    out = []
    for i in ids.tolist():
        unit = units[i]
        out.append(" ".join(p for p in unit.first[:-1] if isinstance(p, str)) + " " + text[unit.start : unit.end])
    return out


def _split(runs: list[list[int]], ids: np.ndarray) -> list[list[int]]:
    """Runs cut where the picked units are not neighbours in the document (a scope with several matches)."""
    out: list[list[int]] = []
    for run in runs:
        out.append([run[0]])
        for u in run[1:]:
            if ids[u] == ids[out[-1][-1]] + 1:
                out[-1].append(u)
            else:
                out.append([u])
    return out


def _inside(parsed: Parsed, scope: str, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Units inside one of the scope's matches."""
    result = json_query.evaluate(_tree(parsed), scope, error=BadAnchor)
    mask = np.zeros(len(starts), dtype=np.bool_)
    for match in result.matches:
        if match.span is not None:
            mask |= (starts >= match.span[0]) & (ends <= match.span[2])
    if not result.matches:
        raise json_query.bad_anchor(scope, _tree(parsed))
    return mask


def _results(
    parsed: Parsed, label: str, head: str, lines: list[tuple[str, str]], total: int, note: str, max_chars: int
) -> Batch:
    """Head then (anchor, result line) pairs, cut at whole lines within ``max_chars``; a first long line is cut."""
    items = [EvidenceItem(Anchor(label, 0, 0), head[: max(1, max_chars)])]
    used = len(items[0].text)
    for where, line in lines:
        room = max_chars - used - 1
        if len(line) > room:
            if len(items) == 1 and room > 40:
                items.append(EvidenceItem(Anchor(where, 0, 0), clip(line, room)))
            break
        items.append(EvidenceItem(Anchor(where, 0, 0), line))
        used += len(line) + 1
    shown = len(items) - 1
    flags = ("results-truncated",) if shown < len(lines) or (shown and items[-1].text.endswith("…")) else ()
    more = f"; showing {shown:,} of {len(lines):,} results" if flags else ""
    return Batch(tuple(items), Scope(total, "values", "exact", len(parsed.full_view), note + more), flags=flags)
