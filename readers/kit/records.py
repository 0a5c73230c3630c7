"""Exact operations over line records (log entries, JSONL lines), shared by both Readers.

A Reader describes its records with a :class:`RecordTable` (how many, their
line ranges, their text, a field getter, a timestamp); :func:`operate` then
answers, over ALL records:

- ``filter[=REGEX]`` - the count of matching records and the first ones, as
  exact slices of the full view anchored ``L<n>`` (``k`` bounds how many);
- ``count[=REGEX]`` - how many match, or with ``by=field`` the count per value;
- ``distinct=field`` - the distinct values with their counts;
- ``sum|mean|min|max=field`` - over the numeric values of matching records.

Options: every one takes ``where`` (readers.ops conditions on fields),
``since``/``until`` (inclusive, ISO-like prefixes ``2015-05-17T10:05``; a
record's timestamp is normalised to ``YYYY-MM-DDTHH:MM:SS``) and ``rows``
(a 1-based range of records/entries in file order, not of lines); ``count``
and ``sum|mean|min|max`` also take ``by=field`` (the result per value of the
field, largest first, at most k). Any other option (``cols``, ``sheet``, ``by``
on ``filter``/``distinct``) is refused with BadOperation rather than ignored.
REGEX is a case-insensitive regular expression searched in the record's text
(like ``grep -i -E``), with the time budget of :class:`readers.ops.PatternClock`.
Sums are :func:`readers.ops.safe_fsum` (an overflow is said, never raised).
"""

from __future__ import annotations

import datetime
import math
import re
from abc import ABC, abstractmethod
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from readers.base import Anchor, Batch, Parsed
from readers.kit import lines as log_lines
from readers.kit.anchors import widen_lines
from readers.ops import (
    BadOperation,
    Operation,
    PatternClock,
    as_number,
    compile_pattern,
    format_number,
    matches,
    reduce_numbers,
    require_options,
)
from readers.retrieval.locate import RankingReader, UnitView

Value = str | float | int | None
Getter = Callable[[int], Value]
OPERATIONS = frozenset({"filter", "count", "distinct", "sum", "mean", "min", "max"})
_COMMON = frozenset({"where", "since", "until", "rows"})
_GROUPED = frozenset({"count", "sum", "mean", "min", "max"})
DEFAULT_K = 20
_REGEX_HINT = "write @filter=<regex>, e.g. @filter=timeout|refused (case-insensitive)"
_TIME_BOUND = re.compile(r"\d{4}(?:-\d\d(?:-\d\d(?:[T ]\d\d(?::\d\d(?::\d\d(?:\.\d+)?)?)?)?)?)?")
_TIME_HINT = "write &since=/&until= as an ISO-like prefix: 2015-05-17, 2015-05-17T10:05 or 2015-05-17T10:05:03"


class RecordTable(ABC):
    """The records of one parsed file, as the exact operations see them."""

    unit: str = "records"
    reader: str = "log"
    skipped: int = 0  # lines that are not records (bad JSONL lines): operations never see them

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def lines(self, i: int) -> log_lines.Record:
        """(first, last) line numbers of record ``i`` (1-based, inclusive)."""

    @abstractmethod
    def text(self, i: int) -> str:
        """What a REGEX is searched in."""

    @abstractmethod
    def getter(self, name: str) -> Getter:
        """Field accessor; BadOperation (naming the known fields) when there is no such field."""

    @abstractmethod
    def time(self, i: int) -> str | None:
        """Normalised timestamp ``YYYY-MM-DDTHH:MM:SS...`` or None."""

    def time_field(self) -> str | None:
        """Name of the timestamp field, None when records carry no time."""
        return "time"


def operate(parsed: Parsed, table: RecordTable, operation: Operation, max_chars: int) -> Batch:
    name = operation.name
    allowed = _COMMON | {"by"} if name in _GROUPED else _COMMON
    require_options(operation, allowed, table.reader)
    keep = _predicate(table, operation)
    note = _note(operation, table)
    if name == "filter" or (name == "count" and operation.by is None):
        return _filter(parsed, table, keep, note, max_chars, operation.k if name == "filter" else 0)
    if name == "count" or name == "distinct":
        field = operation.by if name == "count" else operation.target
        assert field is not None
        return _group(parsed, table, keep, field, note, max_chars)
    assert operation.target is not None
    if operation.by is not None:
        return _aggregate_by(parsed, table, keep, operation, note, max_chars)
    return _aggregate(parsed, table, keep, name, operation.target, note, max_chars)


def _note(operation: Operation, table: RecordTable) -> str:
    parts = [f"{table.unit}: all"] if operation.rows is None else []
    if operation.target and operation.name in ("filter", "count"):
        parts.append(f"text ~ /{operation.target}/i")
    described = operation.describe_filter(table.unit)
    if described:
        parts.append(described)
    if table.skipped:
        lines = "line that is not a record was" if table.skipped == 1 else "lines that are not records were"
        parts.append(f"{table.skipped:,} {lines} not searched (grep them, or @focus=L<n>)")
    return "; ".join(parts)


@dataclass(frozen=True)
class Chosen:
    """The records in range (``span``) and the test each must pass (``test``)."""

    span: range
    test: Callable[[int], bool]

    def __iter__(self) -> Iterator[int]:
        return (i for i in self.span if self.test(i))


def _predicate(table: RecordTable, operation: Operation) -> Chosen:
    """Record index -> does it pass the rows, regex, where, since and until?"""
    target = operation.target if operation.name in ("filter", "count") else None
    pattern = compile_pattern(target, _REGEX_HINT) if target else None
    conditions = [(c, table.getter(c.field)) for c in operation.where]
    since, until = _bound(operation.since), _bound(operation.until)
    if (since or until) and table.time_field() is None:
        raise BadOperation("these records have no timestamp to bound", hint="filter with &where= on a field instead")
    first, last = _range(table, operation)
    clock = PatternClock()

    def keep(i: int) -> bool:
        if since or until:
            stamp = table.time(i)
            if stamp is None or (since and stamp[: len(since)] < since) or (until and stamp[: len(until)] > until):
                return False
        if any(not matches(c, get(i), clock) for c, get in conditions):
            return False
        return pattern is None or clock.search(pattern, table.text(i))

    return Chosen(range(first, last + 1), keep)


def _range(table: RecordTable, operation: Operation) -> tuple[int, int]:
    """The 0-based inclusive record range of ``rows`` (all records without it)."""
    if operation.rows is None:
        return 0, len(table) - 1
    first, last = operation.rows
    if first > len(table):
        raise BadOperation(
            f"{table.unit} {first}-{last} are past the {len(table):,} {table.unit} of this file",
            hint=f"use &rows= within 1-{len(table)} (counted in {table.unit}, not lines)",
        )
    return first - 1, min(last, len(table)) - 1


def _bound(text: str | None) -> str | None:
    if text is None:
        return None
    text = text.strip()
    if not _TIME_BOUND.fullmatch(text) or not _real_time(text):
        raise BadOperation(f"cannot read the time {text!r}", hint=_TIME_HINT)
    return text.replace(" ", "T")


def _real_time(prefix: str) -> bool:
    """The prefix names a real moment: month 1-12, a day that month has, 24 h, 60 min/s."""
    parts = [int(p) for p in re.split(r"[-T :.]", prefix)[:6]]
    parts += [1, 1][: max(0, 3 - len(parts))]
    year, month, day, *clock = parts
    try:
        datetime.date(year, month, day)
    except ValueError:
        return False
    return all(v < limit for v, limit in zip(clock, (24, 60, 60), strict=False))


def _filter(
    parsed: Parsed, table: RecordTable, keep: Chosen, note: str, max_chars: int, k: int | None
) -> Batch:
    shown: list[log_lines.Record] = []
    total = 0
    cap = max_chars // 2 + 1 if k is None else min(k, max_chars // 2 + 1)
    for i in keep:
        total += 1
        if len(shown) < cap:
            shown.append(table.lines(i))
    return log_lines.records_batch(parsed, shown, total, (len(table), table.unit), note, max_chars, k)


def _group(
    parsed: Parsed, table: RecordTable, keep: Chosen, field: str, note: str, max_chars: int
) -> Batch:
    get = table.getter(field)
    counts: Counter[str] = Counter()
    missing = total = 0
    for i in keep:
        total += 1
        value = get(i)
        if value is None:
            missing += 1
        else:
            counts[_shown(value)] += 1
    head, lines = log_lines.count_lines(counts, field, total, missing)
    return log_lines.results_batch(parsed, head, lines, (len(table), table.unit), note, max_chars)


def _shown(value: str | float | int) -> str:
    if isinstance(value, float):
        return format_number(value).replace(",", "")
    return str(value)[:200]


def _aggregate(
    parsed: Parsed, table: RecordTable, keep: Chosen, name: str, field: str, note: str, max_chars: int
) -> Batch:
    get = table.getter(field)
    numbers: list[float] = []
    total = 0
    for i in keep:
        total += 1
        number = _number(get(i))
        if number is not None:
            numbers.append(number)
    head = f"{name} of {field} over {len(numbers):,} numeric values ({total:,} matching {table.unit})"
    if not numbers:
        return log_lines.results_batch(parsed, head, ["no numeric value"], (len(table), table.unit), note, max_chars)
    answer = [f"{name}({field}) = {format_number(reduce_numbers(name, numbers))}"]
    return log_lines.results_batch(parsed, head, answer, (len(table), table.unit), note, max_chars)


def _aggregate_by(
    parsed: Parsed, table: RecordTable, keep: Chosen, operation: Operation, note: str, max_chars: int
) -> Batch:
    """The aggregate per value of ``by``, largest first, at most k groups shown."""
    name, field, by = operation.name, operation.target or "", operation.by or ""
    get, group = table.getter(field), table.getter(by)
    groups: defaultdict[str, list[float]] = defaultdict(list)
    total = missing = 0
    for i in keep:
        total += 1
        key = group(i)
        number = _number(get(i))
        if key is None:
            missing += 1
        elif number is not None:
            groups[_shown(key)].append(number)
    results = sorted(((reduce_numbers(name, v), k) for k, v in groups.items()), key=lambda r: (-_order(r[0]), r[1]))
    k = max(1, operation.k or DEFAULT_K)
    head = (f"{name} of {field} by {by}: {len(results):,} groups over {total:,} matching {table.unit}"
            + (f", {missing:,} without {by}" if missing else "") + f"; top {min(k, len(results))} by value:")
    lines = [f"{key}\t{format_number(value)}" for value, key in results[:k]]
    return log_lines.results_batch(parsed, head, lines, (len(table), table.unit), note, max_chars)


def _order(value: float) -> float:
    return -math.inf if math.isnan(value) else value


def _number(value: Value) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    return as_number(value)


class RecordReader(RankingReader):
    """What the line-record Readers (JSONL, logs) share: line anchors, intent reads over line units (the
    pipeline of readers.retrieval.locate, every location method), and the exact operations of this module."""

    operations = OPERATIONS

    def table(self, parsed: Parsed) -> RecordTable:
        """The records of a parsed artifact."""
        raise NotImplementedError

    def units(self, parsed: Parsed, scope: str | None) -> UnitView:
        return log_lines.line_view(parsed, scope)

    def anchor(self, parsed: Parsed, view: UnitView, run: Sequence[int]) -> Anchor:
        return log_lines.passage_anchor(parsed, int(view.starts[run[0]]), int(view.ends[run[-1]]))

    def widen(self, parsed: Parsed, anchor: str) -> list[str]:
        return widen_lines(anchor, log_lines.line_count(parsed), len(parsed.full_view))

    def focus(self, parsed: Parsed, anchor: str) -> Batch:
        return log_lines.focus(parsed, anchor)

    def operate(self, parsed: Parsed, operation: Operation, max_chars: int) -> Batch:
        if operation.name not in self.operations:
            return super().operate(parsed, operation, max_chars)
        return operate(parsed, self.table(parsed), operation, max_chars)
