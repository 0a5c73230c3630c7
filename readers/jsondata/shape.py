"""The shape of a JSON value for the @scout preview: keys, types, lengths, samples.

Bounded in depth (:data:`MAX_DEPTH`) and breadth (:data:`MAX_KEYS` keys per
object); an array is described by its length, the types of its items and the
union of the keys of its first :data:`ARRAY_SAMPLE` object items (with how
many of them hold each key), then by its first item.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from readers.jsondata.spans import step
from readers.kit.bounded import shorten

MAX_DEPTH = 5
MAX_KEYS = 14
ARRAY_SAMPLE = 50
SAMPLE_CHARS = 48


def kind(value: Any) -> str:
    if isinstance(value, dict):
        return f"object{{{len(value)}}}"
    if isinstance(value, list):
        return f"list[{len(value)}]"
    if value is None:
        return "null"
    return type(value).__name__


def sample(value: Any) -> str:
    if isinstance(value, str):
        return '"' + shorten(value, SAMPLE_CHARS).replace("\n", "\\n") + '"'
    if isinstance(value, (dict, list)):
        return ""
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def shape(value: Any) -> Iterator[str]:
    """Indented lines ``path: type sample``, outermost first."""
    yield f"$: {kind(value)}"
    yield from _inside(value, "$", 1)


def _inside(value: Any, path: str, depth: int) -> Iterator[str]:
    if depth > MAX_DEPTH:
        return
    indent = "  " * depth
    if isinstance(value, dict):
        for n, (key, child) in enumerate(value.items()):
            if n == (MAX_KEYS if depth == 1 else MAX_KEYS // 2):
                yield f"{indent}… {len(value) - n} more keys"
                break
            label = path + step(key)
            yield f"{indent}{label}: {kind(child)} {sample(child)}".rstrip()
            yield from _inside(child, label, depth + 1)
    elif isinstance(value, list) and value:
        yield from _array(value, path, indent, depth)


def _array(value: list[Any], path: str, indent: str, depth: int) -> Iterator[str]:
    head = value[:ARRAY_SAMPLE]
    types = sorted({kind(v).split("{")[0].split("[")[0] for v in head})
    objects = [v for v in head if isinstance(v, dict)]
    first = f" (first {len(head)})" if len(value) > len(head) else ""
    yield f"{indent}{path}[*]: items of type {'|'.join(types)}{first}"
    if objects:
        keys: dict[str, int] = {}
        for obj in objects:
            for key in obj:
                keys[key] = keys.get(key, 0) + 1
        listed = ", ".join(f"{k} ({n}/{len(objects)})" if n < len(objects) else k for k, n in list(keys.items())[:30])
        more = f", … {len(keys) - 30} more" if len(keys) > 30 else ""
        yield f"{indent}  keys: {listed}{more}"
    yield from _inside(value[0], path + "[0]", depth + 1)
