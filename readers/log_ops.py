"""Exact operations over line records (log entries, JSONL lines), shared by both Readers.

A Reader describes its records with a :class:`RecordTable` (how many, their
line ranges, their text, a field getter, a timestamp); :func:`operate` then
answers, over ALL records:

- ``filter[=REGEX]`` - the count of matching records and the first ones, as
  exact slices of the full view anchored ``L<n>`` (``k`` bounds how many);
- ``count[=REGEX]`` - how many match, or with ``by=field`` the count per value;
- ``distinct=field`` - the distinct values with their counts;
- ``sum|mean|min|max=field`` - over the numeric values of matching records.

Every one takes ``where`` (readers.ops conditions on fields) and
``since``/``until`` (inclusive, ISO-like prefixes ``2015-05-17T10:05``; a
record's timestamp is normalised to ``YYYY-MM-DDTHH:MM:SS``). REGEX is a
case-insensitive regular expression searched in the record's text (like
``grep -i -E``).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Iterator

from readers import log_lines
from readers.base import Batch, Parsed
from readers.ops import BadOperation, Operation, as_number, format_number, matches

Value = str | float | int | None
Getter = Callable[[int], Value]
OPERATIONS = frozenset({"filter", "count", "distinct", "sum", "mean", "min", "max"})
_TIME_BOUND = re.compile(r"\d{4}(?:-\d\d(?:-\d\d(?:[T ]\d\d(?::\d\d(?::\d\d(?:\.\d+)?)?)?)?)?)?")
_TIME_HINT = "write &since=/&until= as an ISO-like prefix: 2015-05-17, 2015-05-17T10:05 or 2015-05-17T10:05:03"


class RecordTable(ABC):
    """The records of one parsed file, as the exact operations see them."""

    unit: str = "records"

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
    keep = _predicate(table, operation)
    name = operation.name
    note = _note(operation, table)
    if name == "filter" or (name == "count" and operation.by is None):
        return _filter(parsed, table, keep, note, max_chars, operation.k if name == "filter" else 0)
    if name == "count" or name == "distinct":
        field = operation.by if name == "count" else operation.target
        assert field is not None
        return _group(parsed, table, keep, field, note, max_chars)
    assert operation.target is not None
    return _aggregate(parsed, table, keep, name, operation.target, note, max_chars)


def _note(operation: Operation, table: RecordTable) -> str:
    parts = [f"{table.unit}: all"]
    if operation.target and operation.name in ("filter", "count"):
        parts.append(f"text ~ /{operation.target}/i")
    described = operation.describe_filter()
    if described:
        parts.append(described)
    return "; ".join(parts)


def _predicate(table: RecordTable, operation: Operation) -> Callable[[int], bool]:
    """Record index -> does it pass the regex, where, since and until?"""
    pattern = _regex(operation.target) if operation.name in ("filter", "count") and operation.target else None
    conditions = [(c, table.getter(c.field)) for c in operation.where]
    since, until = _bound(operation.since), _bound(operation.until)
    if (since or until) and table.time_field() is None:
        raise BadOperation("these records have no timestamp to bound", hint="filter with &where= on a field instead")

    def keep(i: int) -> bool:
        if since or until:
            stamp = table.time(i)
            if stamp is None or (since and stamp[: len(since)] < since) or (until and stamp[: len(until)] > until):
                return False
        if any(not matches(c, get(i)) for c, get in conditions):
            return False
        return pattern is None or pattern.search(table.text(i)) is not None

    return keep


def _regex(text: str) -> re.Pattern[str]:
    try:
        return re.compile(text, re.IGNORECASE)
    except re.error as err:
        hint = "write @filter=<regex>, e.g. @filter=timeout|refused"
        raise BadOperation(f"bad regular expression {text!r}: {err}", hint=hint) from None


def _bound(text: str | None) -> str | None:
    if text is None:
        return None
    text = text.strip()
    if not _TIME_BOUND.fullmatch(text):
        raise BadOperation(f"cannot read the time {text!r}", hint=_TIME_HINT)
    return text.replace(" ", "T")


def _matching(table: RecordTable, keep: Callable[[int], bool]) -> Iterator[int]:
    return (i for i in range(len(table)) if keep(i))


def _filter(
    parsed: Parsed, table: RecordTable, keep: Callable[[int], bool], note: str, max_chars: int, k: int | None
) -> Batch:
    shown: list[log_lines.Record] = []
    total = 0
    cap = max_chars // 2 + 1 if k is None else min(k, max_chars // 2 + 1)
    for i in _matching(table, keep):
        total += 1
        if len(shown) < cap:
            shown.append(table.lines(i))
    return log_lines.records_batch(parsed, shown, total, (len(table), table.unit), note, max_chars, k)


def _group(
    parsed: Parsed, table: RecordTable, keep: Callable[[int], bool], field: str, note: str, max_chars: int
) -> Batch:
    get = table.getter(field)
    counts: Counter[str] = Counter()
    missing = total = 0
    for i in _matching(table, keep):
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
    parsed: Parsed, table: RecordTable, keep: Callable[[int], bool], name: str, field: str, note: str, max_chars: int
) -> Batch:
    get = table.getter(field)
    numbers: list[float] = []
    total = 0
    for i in _matching(table, keep):
        total += 1
        number = _number(get(i))
        if number is not None:
            numbers.append(number)
    head = f"{name} of {field} over {len(numbers):,} numeric values ({total:,} matching {table.unit})"
    if not numbers:
        return log_lines.results_batch(parsed, head, ["no numeric value"], (len(table), table.unit), note, max_chars)
    result = {"sum": sum(numbers), "mean": sum(numbers) / len(numbers), "min": min(numbers), "max": max(numbers)}[name]
    answer = [f"{name} = {format_number(result)}"]
    return log_lines.results_batch(parsed, head, answer, (len(table), table.unit), note, max_chars)


def _number(value: Value) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    return as_number(value)

