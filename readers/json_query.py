"""JSONPath lookups over a parsed document (python-jsonpath, RFC 9535).

``resolve`` evaluates a query and gives each match's concrete path and span
in the full view; evaluation stops at :data:`MAX_MATCHES` matches or
:data:`MAX_SECONDS`, and recursive descent (``..``) is refused on documents
over :data:`DESCENT_LIMIT` characters. The exact operations (``path``,
``count``, ``distinct``, ``sum/mean/min/max``) work on the matched values.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import jsonpath
import orjson

from readers.base import BadAnchor, ReaderError
from readers.json_spans import Parts, Span, Tree, path_label
from readers.ops import BadOperation, as_number

MAX_MATCHES = 100_000
MAX_SECONDS = 5.0
DESCENT_LIMIT = 16 * 1024 * 1024
_ENV = jsonpath.JSONPathEnvironment()
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
    except RecursionError:
        raise error(f"JSONPath {query!r} recursed too deep", hint=_HINT) from None
    return Result(found, True)


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
        number = float(value) if isinstance(value, (int, float)) else None
        if isinstance(value, str):
            number = as_number(value)
        if number is not None:
            out.append(number)
    return out


def bad_anchor(anchor: str, tree: Tree) -> BadAnchor:
    value = tree.value
    if isinstance(value, dict):
        top = "top-level keys: " + ", ".join(path_label((k,)) for k in list(value)[:8])
    elif isinstance(value, list):
        top = f"the top level is a list of {len(value):,} items: $[0] .. $[{len(value) - 1}]"
    else:
        top = "the document is a single value: $"
    return BadAnchor(f"the JSONPath {anchor!r} matches nothing", hint=f"{top}; @scout shows the shape")
