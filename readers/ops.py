"""Exact operations over all records of an artifact (pure: no I/O).

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

``where`` holds conditions separated by ``,``; a value that contains ``,``
(``a, b``, or a regex such as ``a{1,3}``) must be double-quoted
(``name~"a{1,3}"``; inside quotes ``\\"`` is a quote and ``\\\\`` a backslash, every
other backslash is kept as written). Operators: ``:`` or ``=`` (equal),
``!=``, ``>``, ``>=``, ``<``, ``<=`` and ``~`` (case-insensitive
regular-expression search, at most :data:`MAX_PATTERN` characters, and all the
searches of one operation share a :data:`PATTERN_SECONDS` time budget).

Values compare as numbers when both sides are numbers in the strict sense of
:func:`as_number` (ASCII digits, ``1,234.5``, ``-7``, ``1e5``, ``$3.20``;
``12%`` is 0.12, as a spreadsheet percent cell holds it); otherwise as
case-insensitive text. An ordering (``> >= < <=``) against a number never
matches a non-numeric value. An empty or missing value matches ``=`` only an
empty wanted value, never an ordering, and always matches ``!=`` with a
non-empty value (``status!=200`` includes entries without a status).

``since``/``until`` bound a timestamp field (logs, JSONL) inclusively;
``rows`` is a 1-based inclusive range of data rows or records (``20`` or
``20-80``). Each Reader applies only the options it documents and refuses the
others (:func:`require_options`), so a result never claims a filter it did
not apply.
"""

from __future__ import annotations

import math
import operator
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

import regex  # type: ignore[import-untyped]

from readers.actions import OPERATIONS as OPERATIONS  # the actions table lists the exact operations
from readers.base import ReaderError

Comparison = Literal["=", "!=", ">", ">=", "<", "<="]
Operator = Literal["=", "!=", ">", ">=", "<", "<=", "~"]

AGGREGATES: frozenset[str] = frozenset({"sum", "mean", "min", "max", "count", "distinct"})
NEEDS_TARGET: frozenset[str] = frozenset({"sum", "mean", "min", "max", "distinct", "path"})
TAKES_TARGET: frozenset[str] = NEEDS_TARGET | frozenset({"count", "rows", "filter"})
OPERATION_OPTIONS: frozenset[str] = frozenset({"where", "by", "cols", "rows", "sheet", "since", "until"})
MAX_CONDITIONS = 16
MAX_PATTERN = 500
"""Longest user regular expression accepted (characters)."""
PATTERN_SECONDS = 2.0
"""Time all the regular-expression searches of one operation may take together."""
CALL_SECONDS = 0.25
"""Time one search may take (a single value this slow means catastrophic backtracking)."""
_CONDITION = re.compile(r'\s*([^:=<>!~]+?)\s*(!=|>=|<=|:|=|>|<|~)\s*("(?:[^"\\]|\\.)*"|[^,]*)\s*(?:,|$)')
_ROWS = re.compile(r"\s*(\d{1,12})\s*(?:-\s*(\d{1,12})\s*)?")
_NUMBER = re.compile(
    r"([+-]?)\$?((?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]*)?|\.[0-9]+)(?:[eE]([+-]?[0-9]{1,4}))?(%?)"
)
_UNESCAPE = re.compile(r'\\(["\\])')
_ORDERING = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}
_WHERE_HINT = (
    'write &where=column:value, several as a,b (operators : != > >= < <= ~regex); '
    'double-quote a value that contains a comma: name~"a{1,3}" or city:"Paris, TX"'
)
_SLOW_HINT = "simplify the pattern (no nested repeats like (a+)+ or (a|a)+), or narrow first with &where=/&rows="


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

    def options(self) -> frozenset[str]:
        """The options this operation sets (``where``, ``by``, ``rows`` ...)."""
        given = {"where": self.where, "by": self.by, "cols": self.cols, "rows": self.rows,
                 "sheet": self.sheet, "since": self.since, "until": self.until}
        return frozenset(name for name, value in given.items() if value)

    def describe_filter(self, unit: str = "rows") -> str:
        """The filter in words, for provenance ('' when there is none)."""
        parts = [c.describe() for c in self.where]
        if self.since:
            parts.append(f"time >= {self.since}")
        if self.until:
            parts.append(f"time <= {self.until}")
        if self.rows:
            parts.append(f"{unit} {self.rows[0]}-{self.rows[1]}")
        return " and ".join(parts)


def require_options(operation: Operation, allowed: frozenset[str], reader: str, hint: str = "") -> None:
    """BadOperation naming every option of ``operation`` that this Reader would not apply."""
    extra = sorted(operation.options() - allowed)
    if not extra:
        return
    unsupported = ", ".join(f"&{name}=" for name in extra)
    takes = ", ".join(f"&{name}=" for name in sorted(allowed)) or "no options"
    raise BadOperation(
        f"the {reader} Reader does not apply {unsupported} to @{operation.name}",
        hint=hint or f"@{operation.name} on this file takes {takes}; drop {unsupported}",
    )


def parse_where(text: str) -> tuple[Condition, ...]:
    """``region:EU, year>=2020`` -> conditions; BadOperation when malformed."""
    conditions: list[Condition] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        match = _CONDITION.match(text, pos)
        if match is None or match.end() == pos:
            raise BadOperation(
                f"cannot read the filter {text[pos:pos + 40]!r} (a value that contains ',' must be double-quoted)",
                hint=_WHERE_HINT,
            )
        field, op, value = match.group(1).strip(), match.group(2), _unquote(match.group(3).strip())
        conditions.append(Condition(field, "=" if op == ":" else op, value))  # type: ignore[arg-type]
        pos = match.end()
    if len(conditions) > MAX_CONDITIONS:
        raise BadOperation(f"{len(conditions)} conditions; at most {MAX_CONDITIONS}", hint=_WHERE_HINT)
    for condition in conditions:
        if condition.op == "~":
            compile_pattern(condition.value, _WHERE_HINT)
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


# -- user regular expressions ----------------------------------------------------------


@dataclass(frozen=True)
class Pattern:
    """A compiled user regular expression (case-insensitive, ``regex`` with timeouts)."""

    text: str
    compiled: Any


@lru_cache(maxsize=256)
def _compiled(text: str) -> Any:
    return regex.compile(text, regex.IGNORECASE)


def compile_pattern(text: str, hint: str = _WHERE_HINT) -> Pattern:
    """A user pattern, compiled once (cached); BadOperation when too long or malformed."""
    if len(text) > MAX_PATTERN:
        raise BadOperation(f"the pattern is {len(text):,} characters; at most {MAX_PATTERN}", hint=hint)
    try:
        return Pattern(text, _compiled(text))
    except (regex.error, ValueError, OverflowError, RecursionError) as err:
        quoting = " (a regex that contains ',' must be double-quoted)" if "{" in text else ""
        raise BadOperation(f"bad regular expression {text!r}: {err}{quoting}", hint=hint) from None


class PatternClock:
    """The time budget every user-pattern search of one operation shares.

    Each search may take at most :data:`CALL_SECONDS` and all of them together
    :data:`PATTERN_SECONDS`; past either, BadOperation ("too slow").
    """

    def __init__(self, seconds: float = PATTERN_SECONDS) -> None:
        self.left = seconds

    def search(self, pattern: Pattern, text: str, full: bool = False) -> bool:
        """Does ``pattern`` occur in ``text`` (match all of it when ``full``)? BadOperation when too slow."""
        if self.left <= 0:
            raise _too_slow(pattern)
        started = time.monotonic()
        method = pattern.compiled.fullmatch if full else pattern.compiled.search
        try:
            found = method(text, timeout=min(self.left, CALL_SECONDS))
        except TimeoutError:
            raise _too_slow(pattern) from None
        finally:
            self.left -= time.monotonic() - started
        return found is not None


def _too_slow(pattern: Pattern) -> BadOperation:
    shown = pattern.text if len(pattern.text) <= 60 else pattern.text[:60] + "…"
    return BadOperation(f"the pattern {shown!r} is too slow (catastrophic backtracking?)", hint=_SLOW_HINT)


# -- values ----------------------------------------------------------------------------


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
    """A finite number written in ASCII digits, else None.

    Accepted: an optional sign, an optional ``$``, digits with optional
    thousands commas in the right places (``1,234,567``), decimals, an
    exponent, and a trailing ``%`` that divides by 100 (``12%`` -> 0.12).
    Refused: ``1_000``, non-ASCII digits, ``inf``/``nan``, ``1,23``.
    """
    cleaned = text.strip()
    if not cleaned or len(cleaned) > 40:
        return None
    match = _NUMBER.fullmatch(cleaned)
    if match is None:
        return None
    sign, mantissa, exponent, percent = match.groups()
    power = int(exponent or 0) - (2 if percent else 0)
    value = float(f"{sign}{mantissa.replace(',', '')}e{power}")
    return value if math.isfinite(value) else None


def wanted_number(text: str) -> float | None:
    """A condition's number: like :func:`as_number` but any length, and past the float
    range it is +-inf (``price<1e309`` holds for every finite price)."""
    cleaned = text.strip()
    match = _NUMBER.fullmatch(cleaned) if len(cleaned) <= 400 else None
    if match is None:
        return None
    sign, mantissa, exponent, percent = match.groups()
    power = int(exponent or 0) - (2 if percent else 0)
    try:
        return float(f"{sign}{mantissa.replace(',', '')}e{power}")
    except OverflowError:
        return math.inf if sign != "-" else -math.inf


def matches(condition: Condition, value: str | float | int | None, clock: PatternClock | None = None) -> bool:
    """Does one field value satisfy the condition? Numbers compare as numbers.

    ``clock`` is the operation's pattern budget (a fresh one when None). An
    empty or missing value matches ``=`` an empty wanted value, ``!=`` a
    non-empty one, never an ordering; ``~`` searches it as ''.
    """
    if condition.op == "~":
        text = "" if value is None else str(value)
        return (clock or PatternClock()).search(compile_pattern(condition.value), text)
    if value is None or (isinstance(value, str) and not value.strip()):
        wanted_empty = not condition.value.strip()
        return wanted_empty if condition.op == "=" else not wanted_empty if condition.op == "!=" else False
    wanted = wanted_number(condition.value)
    have = value if isinstance(value, (int, float)) and not isinstance(value, bool) else as_number(str(value))
    if wanted is not None and have is not None:
        return compare(have, condition.op, wanted)
    if wanted is not None and condition.op in _ORDERING:
        return False
    return compare(str(value).strip(), condition.op, condition.value)


def format_number(value: float) -> str:
    """Integers without '.0'; others with 15 significant digits; overflow said in words."""
    if math.isnan(value):
        return "undefined (nan)"
    if math.isinf(value):
        return f"{'-' if value < 0 else ''}inf (overflow: the result exceeds the float range, ±1.8e308)"
    if value == int(value) and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:,.15g}"


def safe_fsum(values: Sequence[float]) -> float:
    """:func:`math.fsum` (correctly rounded); ±inf when the sum is beyond the float range."""
    try:
        return math.fsum(values)
    except OverflowError:
        scaled = math.fsum(v * 2.0**-64 for v in values)  # exact: scaling by a power of two
        return scaled * 2.0**64  # ±inf when beyond the range (float * never raises)


def safe_mean(values: Sequence[float]) -> float:
    """The mean, finite whenever the values are (the sum may overflow where the mean does not)."""
    if not values:
        return math.nan
    total = safe_fsum(values)
    if math.isfinite(total):
        return total / len(values)
    return safe_fsum([v / len(values) for v in values])


def reduce_numbers(name: str, numbers: Sequence[float]) -> float:
    """sum / mean / min / max of a non-empty sequence, never raising on overflow."""
    if name == "sum":
        return safe_fsum(numbers)
    if name == "mean":
        return safe_mean(numbers)
    return min(numbers) if name == "min" else max(numbers)


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return _UNESCAPE.sub(r"\1", value[1:-1])
    return value
