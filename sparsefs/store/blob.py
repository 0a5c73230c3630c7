"""Immutable blobs of one parsed artifact for the shared tier (``sparsefs.store.shared``).

An artifact in the shared tier is a set of *parts*, each one blob written once
under a part id within the artifact's key (content name + Reader + code version):

    view                 the full view, the parsed kind and the data keys a load needs
    k<xxh3 of key>.<n>   one top-level data key (an index, the dense vectors...) at size n

Readers fill caches in place after the parse (a BM25 index, dense vectors), so a
data key can grow; a grown key is a new part with a larger ``n`` (the size is the
store's signature: keys plus array rows of a dict, ``n`` for anything else) and a
load takes the largest of each key. Every part is a pure function of the parse,
so any combination of parts is one consistent artifact. Parts are uploaded data
first, ``view`` last: a visible view means its required parts were written.

A blob is ``SPARSEFS-BLOB <header JSON>\\n<body>``. The header names the format,
code version, content name, Reader and part it belongs to, the lengths of the
body's sections (the codec's tree, the view text, numpy arrays, byte blobs) and
the xxh3-128 of the body; :func:`decode_part` checks all of it before decoding a
byte. Another format or code version is :class:`Skewed`; anything else off is
:class:`~sparsefs.store.serial.Corrupt`. Arrays travel as ``.npy`` without
pickle; classes are rebuilt only from the codec's whitelist.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import xxhash

from readers.base import Parsed
from sparsefs.store import serial

FORMAT = 1
MAGIC = b"SPARSEFS-BLOB "
VIEW = "view"
_MAX_HEADER = 1 << 20
_SHARED_VIEW = "full_view"


class Skewed(serial.Corrupt):
    """A blob written by another blob format or Reader code version than the key it was found under."""


class PartError(Exception):
    """Part ``pid`` of a fetched artifact cannot be used (``cause``: Skewed or Corrupt)."""

    def __init__(self, pid: str, cause: Exception) -> None:
        super().__init__(f"part {pid}: {cause}")
        self.pid = pid
        self.cause = cause

    @property
    def skewed(self) -> bool:
        return isinstance(self.cause, Skewed)


@dataclass(frozen=True)
class Owner:
    """Whose parts these are: the key every header must repeat."""

    code: str
    name: str
    reader: str


@dataclass(frozen=True)
class Part:
    """One decoded part: a data key's value, or the view (``key`` is None)."""

    key: str | None
    value: Any
    kind: str = ""
    required: tuple[str, ...] = ()


def value_size(value: Any) -> int:
    """How big a cache has grown: a dict's keys plus the rows of the arrays it holds; -1 for anything else."""
    if not isinstance(value, dict):
        return -1
    return len(value) + sum(int(x.shape[0]) for x in value.values() if isinstance(x, np.ndarray) and x.ndim)


def part_id(key: str, size: int) -> str:
    """``k<xxh3-64 of the key>.<size>`` (``n`` for a value that is not a growing dict): safe as a file name."""
    digest = xxhash.xxh3_64_hexdigest(key.encode("utf-8", "surrogatepass"))
    return f"k{digest}.{size if size >= 0 else 'n'}"


def wanted_ids(parsed: Parsed, transient: Iterable[str] = ()) -> dict[str, str | None]:
    """Part id -> data key (None for the view) of every part this parse consists of now."""
    skip = set(transient)
    ids: dict[str, str | None] = {part_id(k, value_size(v)): k for k, v in list(parsed.data.items()) if k not in skip}
    ids[VIEW] = None
    return ids


def choose(ids: Iterable[str]) -> list[str]:
    """What to fetch from a listing: the view and the largest part of each key ([] without a view)."""
    best: dict[str, tuple[int, str]] = {}
    present = set(ids)
    for pid in present:
        head, _, size = pid.partition(".")
        if not head.startswith("k") or not size:
            continue
        rank = -1 if size == "n" else int(size) if size.isdigit() else None
        if rank is not None and (head not in best or rank > best[head][0]):
            best[head] = (rank, pid)
    return [VIEW, *sorted(pid for _, pid in best.values())] if VIEW in present else []


def encode_part(owner: Owner, parsed: Parsed, key: str | None, required: Iterable[str] = ()) -> bytes:
    """One part as a blob: the view (``key`` None) or one data key, with its header and checksum."""
    sections: list[tuple[str, bytes]] = []
    header: dict[str, Any] = {"format": FORMAT, "code": owner.code, "name": owner.name, "reader": owner.reader}
    if key is None:
        sections.append(("view", parsed.full_view.encode("utf-8", "surrogatepass")))
        header.update(part=VIEW, kind=parsed.kind, chars=len(parsed.full_view), required=sorted(required))
    else:
        value = parsed.data[key]
        encoded = serial.encode(value, {id(parsed.full_view): _SHARED_VIEW})
        sections.append(("tree", orjson.dumps(encoded.tree)))
        sections += [(f"a{i}", _npy(array)) for i, array in enumerate(encoded.arrays)]
        sections += [(f"b{i}", bytes(blob)) for i, blob in enumerate(encoded.blobs)]
        header.update(part=part_id(key, value_size(value)), key=key)
    body = b"".join(data for _, data in sections)
    header["sections"] = [[name, len(data)] for name, data in sections]
    header["xxh3"] = xxhash.xxh3_128_hexdigest(body)
    return MAGIC + orjson.dumps(header) + b"\n" + body


def _npy(array: np.ndarray[Any, Any]) -> bytes:
    out = io.BytesIO()
    np.save(out, np.ascontiguousarray(array), allow_pickle=False)
    return out.getvalue()


def decode_part(blob: bytes, owner: Owner, pid: str, view: str | None = None) -> Part:
    """Check and decode one blob found under ``owner``/``pid``; the view must be decoded first (data parts may
    refer to it). Raises Skewed or serial.Corrupt."""
    header, body = _split(blob)
    if (header.get("format"), header.get("code")) != (FORMAT, owner.code):
        raise Skewed(f"written by format {header.get('format')!r}, code {str(header.get('code'))[:12]!r}")
    if (header.get("name"), header.get("reader"), header.get("part")) != (owner.name, owner.reader, pid):
        raise serial.Corrupt("the header names another artifact or part")
    if xxhash.xxh3_128_hexdigest(body) != header.get("xxh3"):
        raise serial.Corrupt("xxh3 of the body differs")
    sections = _sections(header, body)
    if pid == VIEW:
        text = sections["view"].decode("utf-8", "surrogatepass")
        if len(text) != header.get("chars"):
            raise serial.Corrupt("view length differs")
        return Part(None, text, str(header.get("kind")), tuple(str(k) for k in header.get("required", [])))
    if view is None:
        raise serial.Corrupt("a data part decoded before its view")
    key = str(header.get("key"))
    value = serial.decode(orjson.loads(sections["tree"]), _arrays(sections), _blobs(sections), {_SHARED_VIEW: view})
    if part_id(key, value_size(value)) != pid:
        raise serial.Corrupt("the part's key or size differs from its id")
    return Part(key, value)


def _split(blob: bytes) -> tuple[dict[str, Any], bytes]:
    """Header and body; the header is looked for only in the first MiB, so garbage costs no scan of a big value."""
    if not blob.startswith(MAGIC):
        raise serial.Corrupt("not a SparseFS blob")
    end = blob.find(b"\n", len(MAGIC), _MAX_HEADER)
    if end < 0:
        raise serial.Corrupt("no header")
    try:
        header = orjson.loads(blob[len(MAGIC) : end])
    except orjson.JSONDecodeError as err:
        raise serial.Corrupt(f"garbled header: {err}") from None
    if not isinstance(header, dict):
        raise serial.Corrupt("the header is not an object")
    return header, blob[end + 1 :]


def _sections(header: dict[str, Any], body: bytes) -> dict[str, bytes]:
    """The body cut at the header's section lengths, which must cover it exactly."""
    out: dict[str, bytes] = {}
    at = 0
    for name, length in header.get("sections", []):
        if not isinstance(length, int) or length < 0 or at + length > len(body):
            raise serial.Corrupt("section lengths overrun the body")
        out[str(name)] = body[at : at + length]
        at += length
    if at != len(body):
        raise serial.Corrupt("section lengths do not cover the body")
    return out


def _arrays(sections: dict[str, bytes]) -> serial.Loader:
    def load(i: int) -> np.ndarray[Any, Any]:
        return np.load(io.BytesIO(sections[f"a{i}"]), allow_pickle=False)  # type: ignore[no-any-return]
    return load


def _blobs(sections: dict[str, bytes]) -> serial.Loader:
    def load(i: int) -> bytes:
        return sections[f"b{i}"]
    return load


def assemble(parts: dict[str, bytes], owner: Owner) -> Parsed:
    """A Parsed from fetched blobs (the view and the chosen data parts). PartError names the first part that
    cannot be used (the view when a part it requires is missing)."""
    view = _decoded(parts, owner, VIEW, None)
    assert isinstance(view.value, str)
    data: dict[str, Any] = {}
    for pid in parts:
        if pid != VIEW:
            part = _decoded(parts, owner, pid, view.value)
            data[str(part.key)] = part.value
    missing = set(view.required) - set(data)
    if missing:
        raise PartError(VIEW, serial.Corrupt(f"{len(missing)} required part(s) missing"))
    return Parsed(view.value, view.kind, data)


def _decoded(parts: dict[str, bytes], owner: Owner, pid: str, view: str | None) -> Part:
    """decode_part, with any failure (a bad header, a checksum, the codec, numpy) as a PartError."""
    try:
        return decode_part(parts[pid], owner, pid, view)
    except Exception as err:  # noqa: BLE001 - whatever a shared store holds, a bad part is only a miss
        raise PartError(pid, err if isinstance(err, serial.Corrupt) else serial.Corrupt(repr(err))) from None
