"""JSONPath lookups over a parsed document (python-jsonpath, RFC 9535).

``resolve`` evaluates a query and gives each match's concrete path and span
in the full view; evaluation stops at :data:`MAX_MATCHES` matches or
:data:`MAX_SECONDS`, and recursive descent (``..``) is refused on documents
over :data:`DESCENT_LIMIT` characters. The exact operations (``path``,
``count``, ``distinct``, ``sum/mean/min/max``) work on the matched values.
Regular expressions inside a query (``match()``, ``search()``, ``=~ /re/``)
run with the ``regex`` package under one :class:`readers.ops.PatternClock`
per evaluation, so a catastrophic pattern is refused as "too slow".
"""

from __future__ import annotations

import math
import time
from collections import Counter
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import jsonpath
import orjson
import regex  # type: ignore[import-untyped]
from jsonpath import function_extensions

from readers.base import BadAnchor, ReaderError
from readers.jsondata.spans import Parts, Span, Tree, path_label
from readers.ops import MAX_PATTERN, BadOperation, Pattern, PatternClock, as_number

MAX_MATCHES = 100_000
MAX_SECONDS = 5.0
DESCENT_LIMIT = 16 * 1024 * 1024
_CLOCK: ContextVar[PatternClock | None] = ContextVar("json_query_clock", default=None)
_FLAGS = ((2, regex.IGNORECASE), (8, regex.MULTILINE), (16, regex.DOTALL))
"""re.I/M/S -> regex flags, for ``=~ /pattern/ims`` literals (compiled by python-jsonpath with ``re``)."""


def _timed(compiled: Any, text: str, full: bool) -> bool:
    """One regex test of a JSONPath filter, under the current evaluation's time budget."""
    source = str(getattr(compiled, "pattern", ""))
    if len(source) > MAX_PATTERN:
        raise BadOperation(f"a pattern of {len(source):,} characters; at most {MAX_PATTERN}", hint=_HINT)
    clock = _CLOCK.get() or PatternClock()
    return clock.search(Pattern(source, compiled), text, full)


class _Match(function_extensions.Match):
    def __call__(self, value: object, pattern: object) -> bool:
        compiled = self.check_cache(pattern) if isinstance(value, str) and isinstance(pattern, str) else None
        return compiled is not None and _timed(compiled, str(value), full=True)


class _Search(function_extensions.Search):
    def __call__(self, value: object, pattern: object) -> bool:
        compiled = self.check_cache(pattern) if isinstance(value, str) and isinstance(pattern, str) else None
        return compiled is not None and _timed(compiled, str(value), full=False)


class BoundedEnvironment(jsonpath.JSONPathEnvironment):
    """python-jsonpath with every regular expression evaluated under a time budget."""

    def setup_function_extensions(self) -> None:
        super().setup_function_extensions()
        self.function_extensions["match"] = _Match()
        self.function_extensions["search"] = _Search()

    def compare(self, left: object, operator: str, right: object) -> bool:
        if operator == "=~" and isinstance(left, str) and hasattr(right, "fullmatch"):
            return _timed(_literal(right), left, full=True)
        return bool(super().compare(left, operator, right))


_literal_cache: dict[tuple[str, int], Any] = {}


def _literal(pattern: Any) -> Any:
    """A ``re`` pattern literal recompiled with ``regex`` (for its timeout)."""
    key = (str(pattern.pattern), int(pattern.flags))
    if key not in _literal_cache:
        flags = 0
        for bit, flag in _FLAGS:
            if key[1] & bit:
                flags |= flag
        if len(_literal_cache) > 256:
            _literal_cache.clear()
        _literal_cache[key] = regex.compile(key[0], flags)
    return _literal_cache[key]


_ENV = BoundedEnvironment()
_HINT = "write a JSONPath (RFC 9535) like $.items[*].id, $['a b'][0] or $.items[?@.state=='open'].title"


@dataclass(frozen=True)
class Match:
    parts: Parts
    value: Any
    span: Span | None


@dataclass(frozen=True)
class Result:
    matches: list[Match]
    complete: bool


def normalise(query: str) -> str:
    """``items[0].id`` and ``.items`` are read as ``$.items[0].id``."""
    query = query.strip()
    if query.startswith("$"):
        return query
    return "$" + query if query.startswith(("[", ".")) else "$." + query


def evaluate(
    tree: Tree, query: str, error: type[ReaderError] = BadOperation, spans: bool = True, limit: int = MAX_MATCHES
) -> Result:
    """Matches of ``query`` in document order of evaluation, at most ``limit``, bounded in time."""
    text = normalise(query)
    if ".." in text and len(tree.text) > DESCENT_LIMIT:
        raise error(f"recursive descent (..) over {len(tree.text):,} characters is refused",
                    hint="name the path explicitly, e.g. $.data[*].id (see @scout for the shape)")
    token = _CLOCK.set(PatternClock())
    try:
        compiled = _ENV.compile(text)
        found: list[Match] = []
        deadline = time.monotonic() + MAX_SECONDS
        for match in compiled.finditer(tree.value):
            parts = tuple(match.parts)
            if not all(isinstance(p, (str, int)) for p in parts):
                continue
            resolved = tree.resolve(parts) if spans else None
            found.append(Match(parts, match.obj, resolved[1] if resolved else None))
            if len(found) >= limit or time.monotonic() > deadline:
                return Result(found, False)
    except jsonpath.JSONPathError as err:
        raise error(f"bad JSONPath {query!r}: {str(err).splitlines()[0]}", hint=_HINT) from None
    except (ValueError, OverflowError, TypeError) as err:  # the library's literals: $[1e2], 1e999
        raise error(f"bad JSONPath {query!r}: {type(err).__name__}: {str(err)[:120]}", hint=_HINT) from None
    except RecursionError:
        raise error(f"JSONPath {query!r} recursed too deep", hint=_HINT) from None
    finally:
        _CLOCK.reset(token)
    return Result(found, True)


def compile_query(query: str) -> Any:
    """A compiled JSONPath in the bounded environment (jsonpath.JSONPathError when malformed)."""
    return _ENV.compile(query)


def clocked(clock: PatternClock) -> _Clocked:
    """Context for queries sharing one pattern budget: ``with json_query.clocked(clock): ...``."""
    return _Clocked(clock)


class _Clocked:
    def __init__(self, clock: PatternClock) -> None:
        self.clock = clock

    def __enter__(self) -> None:
        self.token = _CLOCK.set(self.clock)

    def __exit__(self, *exc: object) -> None:
        _CLOCK.reset(self.token)


def minified(value: Any) -> str:
    return orjson.dumps(value).decode()


def path_lines(result: Result) -> list[tuple[str, str]]:
    """(concrete path, ``path = value``) per match."""
    return [(label, f"{label} = {minified(m.value)}") for m in result.matches for label in (path_label(m.parts),)]


def distinct_lines(result: Result) -> list[str]:
    counts = Counter(minified(m.value)[:200] for m in result.matches)
    return [f"{value}\t{n:,}" for value, n in counts.most_common()]


def numbers(result: Result) -> list[float]:
    out: list[float] = []
    for m in result.matches:
        value = m.value
        if isinstance(value, bool) or value is None:
            continue
        number = _finite(value) if isinstance(value, (int, float)) else None
        if isinstance(value, str):
            number = as_number(value)
        if number is not None:
            out.append(number)
    return out


def _finite(value: float) -> float | None:
    """A JSON number as a finite float (None past the float range, e.g. a 400-digit integer)."""
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def bad_anchor(anchor: str, tree: Tree) -> BadAnchor:
    value = tree.value
    if isinstance(value, dict):
        top = "top-level keys: " + ", ".join(path_label((k,)) for k in list(value)[:8])
    elif isinstance(value, list):
        top = f"the top level is a list of {len(value):,} items: $[0] .. $[{len(value) - 1}]"
    else:
        top = "the document is a single value: $"
    return BadAnchor(f"the JSONPath {anchor!r} matches nothing", hint=f"{top}; @scout shows the shape")
