"""A safe structured codec for Reader-private data (no pickle, no imports by name).

``encode`` turns a value into a JSON-able tree plus side files (numpy arrays,
byte blobs); ``decode`` turns them back. Supported: str, int, float, bool,
None, bytes, list, tuple, dict (any encodable keys), ``collections.Counter``,
numpy arrays of non-object dtype, and instances of the classes registered
Readers declare they persist (``readers.registry.persisted``: dataclasses and
plain classes), rebuilt field by field without calling ``__init__``. A class
name read from a file is only a key into that whitelist; no module named in a
file is ever imported unless a registration names it.
Anything else raises :class:`Unserializable` when encoding and
:class:`Corrupt` when decoding.

Tree nodes: plain JSON for lists, strings, ints, bools, None and finite
floats; ``{"$t": tag, ...}`` objects for everything else. A subtree that is
already plain JSON (str-keyed dicts, lists, scalars: what a JSON or JSONL
Reader holds) is stored as ``{"$t": "json", "v": ...}`` so decoding it costs
one C-level ``orjson.loads`` and no Python walk. Objects listed in
``shared`` (the full view, referenced again by several Readers) are stored
once, by identity, as ``{"$t": "ref"}``.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from readers import registry
from readers.registry import Persisted

FORMAT = 1
_MAX_INT = 1 << 63
_SCALARS = frozenset({str, bool, type(None)})


class Unserializable(Exception):
    """The value holds something outside the supported types and whitelist."""


class Corrupt(ValueError):
    """A stored tree that does not decode (garbled, truncated or from another layout)."""


@dataclass
class Encoded:
    """An encoded value: the JSON-able tree and its side files, by index."""

    tree: Any
    arrays: list[np.ndarray[Any, Any]] = field(default_factory=list)
    blobs: list[bytes] = field(default_factory=list)


def class_named(name: str, whitelist: dict[str, Persisted] | None = None) -> type:
    """The whitelisted class called ``name``; Corrupt for any other name."""
    entry = (registry.persisted() if whitelist is None else whitelist).get(name)
    if entry is None:
        raise Corrupt(f"class {name!r} is not in the whitelist")
    return getattr(importlib.import_module(entry.module), entry.attribute)  # type: ignore[no-any-return]


def encode(value: Any, shared: dict[int, str] | None = None) -> Encoded:
    """Encode ``value``; ``shared`` maps id(obj) -> name for objects stored elsewhere."""
    out = Encoded(None)
    out.tree = _Encoder(out, shared or {}).node(value)
    return out


class _Encoder:
    def __init__(self, out: Encoded, shared: dict[int, str]) -> None:
        self.out = out
        self.shared = shared
        self.whitelist = registry.persisted()  # once per value: registrations may grow at run time

    def node(self, value: Any) -> Any:
        tree, pure = self.walk(value)
        return {"$t": "json", "v": value} if pure and isinstance(value, (dict, list)) else tree

    def walk(self, value: Any) -> tuple[Any, bool]:
        """(tree, pure): pure means ``value`` itself is plain JSON and needs no tree."""
        if id(value) in self.shared and isinstance(value, str):
            return {"$t": "ref", "v": self.shared[id(value)]}, False
        if value is None or isinstance(value, (bool, str)):
            return value, True
        if isinstance(value, int):
            return (value, True) if -_MAX_INT <= value < _MAX_INT else ({"$t": "int", "v": str(value)}, False)
        if isinstance(value, float):
            return (value, True) if math.isfinite(value) else ({"$t": "float", "v": repr(value)}, False)
        return self.container(value)

    def container(self, value: Any) -> tuple[Any, bool]:
        if type(value) is list:
            return self.sequence(value, None)
        if type(value) is tuple:
            return self.sequence(value, "tuple")
        if type(value) is dict or type(value) is Counter:
            return self.mapping(value)
        if isinstance(value, bytes):
            self.out.blobs.append(bytes(value))
            return {"$t": "bytes", "i": len(self.out.blobs) - 1}, False
        if isinstance(value, np.ndarray):
            return self.array(value), False
        return self.instance(value), False

    def sequence(self, value: list[Any] | tuple[Any, ...], tag: str | None) -> tuple[Any, bool]:
        walked = [self.walk(item) for item in value]
        pure = all(p for _, p in walked)
        items = [self.wrap(item, t, p) for item, (t, p) in zip(value, walked, strict=True)]
        if tag is None:
            return (value if pure else items), pure
        return _flat_tuple(tuple(value)) or {"$t": tag, "v": items}, False

    def wrap(self, value: Any, tree: Any, pure: bool) -> Any:
        """A child's node inside an impure parent: pure containers go in whole."""
        return {"$t": "json", "v": value} if pure and isinstance(value, (dict, list)) else tree

    def mapping(self, value: dict[Any, Any]) -> tuple[Any, bool]:
        tag = "counter" if type(value) is Counter else "dict"
        if all(type(k) is str for k in value):
            walked = {k: self.walk(v) for k, v in value.items()}
            pure = tag == "dict" and all(p for _, p in walked.values())
            if pure:
                return value, True
            return {"$t": tag, "v": {k: self.wrap(value[k], t, p) for k, (t, p) in walked.items()}}, False
        pairs = [[self.node(k), self.node(v)] for k, v in value.items()]
        return {"$t": tag, "pairs": pairs}, False

    def array(self, value: np.ndarray[Any, Any]) -> Any:
        if value.dtype.hasobject:
            raise Unserializable("numpy array of Python objects")
        self.out.arrays.append(value)
        return {"$t": "array", "i": len(self.out.arrays) - 1}

    def instance(self, value: Any) -> Any:
        cls = type(value)
        name = f"{cls.__module__}.{cls.__qualname__}"
        if name not in self.whitelist or class_named(name, self.whitelist) is not cls:
            raise Unserializable(f"type {name} is not whitelisted")
        transient = self.whitelist[name].transient
        state = _fields(value) if dataclasses.is_dataclass(value) else dict(vars(value))
        return {"$t": "obj", "c": name, "v": {k: self.node(v) for k, v in state.items() if k not in transient}}


def _scalars(value: tuple[Any, ...]) -> bool:
    return all(_scalar(v) for v in value)


def _scalar(v: Any) -> bool:
    """Plain JSON scalars that round-trip exactly (64-bit ints, finite floats)."""
    kind = type(v)
    if kind is int:
        return bool(-_MAX_INT <= v < _MAX_INT)
    return kind in _SCALARS or (kind is float and math.isfinite(v))


def _flat_tuple(value: tuple[Any, ...]) -> dict[str, Any] | None:
    """Tuples of scalars (and of such tuples: segment units) decode without a walk."""
    if _scalars(value):
        return {"$t": "tup", "v": list(value)}
    if all(type(v) is tuple and _scalars(v) for v in value):
        return {"$t": "tup2", "v": [list(v) for v in value]}
    return None


def _fields(value: Any) -> dict[str, Any]:
    return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}


Loader = Callable[[int], Any]


def decode(tree: Any, arrays: Loader, blobs: Loader, shared: dict[str, Any]) -> Any:
    """Rebuild a value from its tree; side files come from the two loaders (by index)."""
    try:
        return _Decoder(arrays, blobs, shared).node(tree)
    except Corrupt:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, RecursionError) as err:
        raise Corrupt(f"undecodable tree: {err!r}") from None


class _Decoder:
    def __init__(self, arrays: Loader, blobs: Loader, shared: dict[str, Any]) -> None:
        self.arrays = arrays
        self.blobs = blobs
        self.shared = shared
        self.whitelist = registry.persisted()

    def node(self, tree: Any) -> Any:
        if isinstance(tree, list):
            return [self.node(item) for item in tree]
        if not isinstance(tree, dict):
            return tree
        return self.tagged(tree["$t"], tree)

    def tagged(self, tag: str, tree: dict[str, Any]) -> Any:
        simple = self.simple(tag, tree)
        if simple is not _NONE:
            return simple
        if tag in ("dict", "counter"):
            return self.mapping(tag, tree)
        if tag == "obj":
            return self.instance(tree["c"], tree["v"])
        raise Corrupt(f"unknown tag {tag!r}")

    def simple(self, tag: str, tree: dict[str, Any]) -> Any:
        if tag == "json":
            return tree["v"]
        if tag == "tuple":
            return tuple(self.node(item) for item in tree["v"])
        if tag == "tup":
            return tuple(tree["v"])
        if tag == "tup2":
            return tuple(map(tuple, tree["v"]))
        if tag == "ref":
            return self.shared[tree["v"]]
        if tag == "int":
            return int(tree["v"])
        if tag == "float":
            return float(tree["v"])
        if tag == "bytes":
            return self.blobs(int(tree["i"]))
        if tag == "array":
            return self.arrays(int(tree["i"]))
        return _NONE

    def mapping(self, tag: str, tree: dict[str, Any]) -> Any:
        if "pairs" in tree:
            built = {_hashable(self.node(k)): self.node(v) for k, v in tree["pairs"]}
        else:
            built = {str(k): self.node(v) for k, v in tree["v"].items()}
        return Counter(built) if tag == "counter" else built

    def instance(self, name: str, state: dict[str, Any]) -> Any:
        cls = class_named(name, self.whitelist)
        transient = self.whitelist[name].transient
        values = {str(k): self.node(v) for k, v in state.items()}
        if dataclasses.is_dataclass(cls):
            expected = {f.name for f in dataclasses.fields(cls)} - set(transient)
            if set(values) != expected:
                raise Corrupt(f"{name}: stored fields differ from the class")
        elif any(not k.isidentifier() or hasattr(cls, k) for k in values):
            raise Corrupt(f"{name}: bad attribute name")  # never shadow a method or a class attribute
        obj: Any = object.__new__(cls)
        for key, value in values.items():
            object.__setattr__(obj, key, value)
        for key in transient:
            object.__setattr__(obj, key, {})
        return obj


_NONE = object()


def _hashable(key: Any) -> Any:
    if isinstance(key, list):
        raise Corrupt("a list cannot be a dict key")
    return key
