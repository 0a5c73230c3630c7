"""Exact operations over all records of an artifact (pure: no I/O, stdlib only).

An exact operation is answered from every record (table rows, JSON array
items, log lines), never from a sample, and exposes only its result, how many
records were processed and the provenance. The request forms are::

    data.csv@sum=revenue&where=region:EU          one aggregate
    data.csv@mean=price&by=region                 the aggregate per group
    data.csv@count&where=year>=2020,status~^ok    rows matching a filter
    data.csv@distinct=region                      distinct values with counts
    data.csv@rows=1-50&cols=region,revenue        a projection (rows, columns)
    book.xlsx@max=Total&sheet=Sales               on one sheet
    dump.json@path=$.items[*].id                  a JSONPath lookup
    app.log@filter=timeout&where=level:ERROR&since=2023-05-01T10:00   matching lines, with counts

``where`` holds conditions separated by ``,``; a value may be double-quoted to
contain ``,``. Operators: ``:`` or ``=`` (equal; numbers compare as numbers,
text case-insensitively), ``!=``, ``>``, ``>=``, ``<``, ``<=`` and ``~``
(case-insensitive regular-expression search). ``since``/``until`` bound a
timestamp field (logs, JSONL) inclusively; ``rows`` is a 1-based inclusive
range of data rows (``20`` or ``20-80``).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from readers.base import ReaderError

Comparison = Literal["=", "!=", ">", ">=", "<", "<="]
Operator = Literal["=", "!=", ">", ">=", "<", "<=", "~"]

AGGREGATES: frozenset[str] = frozenset({"sum", "mean", "min", "max", "count", "distinct"})
OPERATIONS: frozenset[str] = AGGREGATES | frozenset({"rows", "path", "filter"})
NEEDS_TARGET: frozenset[str] = frozenset({"sum", "mean", "min", "max", "distinct", "path"})
TAKES_TARGET: frozenset[str] = NEEDS_TARGET | frozenset({"count", "rows", "filter"})
OPERATION_OPTIONS: frozenset[str] = frozenset({"where", "by", "cols", "rows", "sheet", "since", "until"})
MAX_CONDITIONS = 16
_CONDITION = re.compile(r'\s*([^:=<>!~]+?)\s*(!=|>=|<=|:|=|>|<|~)\s*("(?:[^"\\]|\\.)*"|[^,]*)\s*(?:,|$)')
_ROWS = re.compile(r"\s*(\d{1,12})\s*(?:-\s*(\d{1,12})\s*)?")
_ORDERING = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}
_WHERE_HINT = 'write &where=column:value, several as a,b (operators : != > >= < <= ~regex; quote "a, b")'


class BadOperation(ReaderError):
    """An exact operation that is malformed or names a column/key that does not exist."""


@dataclass(frozen=True)
class Condition:
    """One filter condition: ``field op value``."""

    field: str
    op: Operator
    value: str

    def describe(self) -> str:
        return f"{self.field} {self.op} {self.value}"


@dataclass(frozen=True)
class Operation:
    """One exact operation, as the protocol hands it to a Reader's ``operate``.

    ``target`` is the column / field / key path / pattern the operation is about
    (None for a plain ``count`` or ``filter``); ``by`` groups an aggregate.
    """

    name: str
    target: str | None = None
    where: tuple[Condition, ...] = ()
    by: str | None = None
    cols: tuple[str, ...] = ()
    rows: tuple[int, int] | None = None
    sheet: str | None = None
    since: str | None = None
    until: str | None = None
    k: int | None = None

    def describe_filter(self) -> str:
        """The filter in words, for provenance ('' when there is none)."""
        parts = [c.describe() for c in self.where]
        if self.since:
            parts.append(f"time >= {self.since}")
        if self.until:
            parts.append(f"time <= {self.until}")
        if self.rows:
            parts.append(f"rows {self.rows[0]}-{self.rows[1]}")
        return " and ".join(parts)


def parse_where(text: str) -> tuple[Condition, ...]:
    """``region:EU, year>=2020`` -> conditions; BadOperation when malformed."""
    conditions: list[Condition] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        match = _CONDITION.match(text, pos)
        if match is None or match.end() == pos:
            raise BadOperation(f"cannot read the filter {text[pos:pos + 40]!r}", hint=_WHERE_HINT)
        field, op, value = match.group(1).strip(), match.group(2), _unquote(match.group(3).strip())
        conditions.append(Condition(field, "=" if op == ":" else op, value))  # type: ignore[arg-type]
        pos = match.end()
    if len(conditions) > MAX_CONDITIONS:
        raise BadOperation(f"{len(conditions)} conditions; at most {MAX_CONDITIONS}", hint=_WHERE_HINT)
    for condition in conditions:
        _check_regex(condition)
    return tuple(conditions)


def parse_rows(text: str) -> tuple[int, int]:
    """``20`` or ``20-80`` (1-based, inclusive) -> (first, last)."""
    match = _ROWS.fullmatch(text)
    if match is None:
        raise BadOperation(f"bad rows={text!r}", hint="write &rows=20 or &rows=20-80 (1-based data rows)")
    first = int(match.group(1))
    last = int(match.group(2)) if match.group(2) else first
    if first < 1 or last < first:
        raise BadOperation(f"bad rows={text!r}", hint="rows count from 1 and the range must not run backwards")
    return first, last


def parse_cols(text: str) -> tuple[str, ...]:
    cols = tuple(c.strip() for c in text.split(",") if c.strip())
    if not cols:
        raise BadOperation("empty cols=", hint="write &cols=name,other (names or #3 for the third column)")
    return cols


def build_operation(name: str, target: str | None, options: Mapping[str, str], k: int | None) -> Operation:
    """The Operation for a parsed request; BadOperation explains what is wrong."""
    if name not in OPERATIONS:
        raise BadOperation(f"@{name} is not an exact operation", hint="operations: " + ", ".join(sorted(OPERATIONS)))
    if target is None and name in NEEDS_TARGET:
        raise BadOperation(f"@{name} needs an argument", hint=f"write @{name}=<column or key path>")
    if target is not None and name not in TAKES_TARGET:
        raise BadOperation(f"@{name} takes no argument", hint=f"write @{name} alone")
    rows = options.get("rows")
    if name == "rows" and target is not None:
        rows = target
    return Operation(
        name=name, target=None if name == "rows" else target,
        where=parse_where(options["where"]) if options.get("where") else (),
        by=options.get("by") or None,
        cols=parse_cols(options["cols"]) if options.get("cols") else (),
        rows=parse_rows(rows) if rows else None,
        sheet=options.get("sheet") or None, since=options.get("since") or None,
        until=options.get("until") or None, k=k,
    )


def compare(left: Any, op: Comparison, right: Any) -> bool:
    """``left op right`` for two numbers or two case-folded strings."""
    if isinstance(left, str) and isinstance(right, str):
        left, right = left.casefold(), right.casefold()
    if op == "=":
        return bool(left == right)
    if op == "!=":
        return bool(left != right)
    try:
        return bool(_ORDERING[op](left, right))
    except TypeError:
        return False


def as_number(text: str) -> float | None:
    """``1,234.5``, ``-7``, ``12%``, ``$3.20`` -> float; None for anything else."""
    cleaned = text.strip().replace(",", "").removeprefix("$").removesuffix("%")
    if not cleaned or len(cleaned) > 40:
        return None
    try:
        value = float(cleaned)
    except ValueError:
        return None
    return value if value == value and value not in (float("inf"), float("-inf")) else None


def matches(condition: Condition, value: str | float | int | None) -> bool:
    """Does one field value satisfy the condition? Numbers compare as numbers."""
    if value is None:
        return condition.op == "!=" and condition.value != ""
    if condition.op == "~":
        return re.search(condition.value, str(value), re.IGNORECASE) is not None
    wanted = as_number(condition.value)
    have = value if isinstance(value, (int, float)) and not isinstance(value, bool) else as_number(str(value))
    if wanted is not None and have is not None:
        return compare(have, condition.op, wanted)
    return compare(str(value).strip(), condition.op, condition.value)


def format_number(value: float) -> str:
    """Integers without '.0'; others with 15 significant digits (what a float sum can claim)."""
    if value == int(value) and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:,.15g}"


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return re.sub(r"\\(.)", r"\1", value[1:-1])
    return value


def _check_regex(condition: Condition) -> None:
    if condition.op != "~":
        return
    try:
        re.compile(condition.value)
    except re.error as err:
        raise BadOperation(f"bad regular expression {condition.value!r}: {err}", hint=_WHERE_HINT) from None
