"""The Reader code version: what the parsed store's entries, local and shared, are valid for."""

from __future__ import annotations

import importlib.util
from importlib import metadata
from pathlib import Path

import xxhash

import readers
from readers import registry
from sparsefs.store import entry as parsed_entry
from sparsefs.store import serial

_CODEC_DISTS = ("numpy", "orjson")  # the codec's own; each Reader's are in its registration
_REPO = Path(readers.__file__).resolve().parent.parent  # names below are relative: the version is the same anywhere


def code_version() -> str:
    """xxh3 of the Reader sources, the codec, the entry format and the parsing libraries' versions.

    Any change to how an artifact is parsed (a Reader edit, a pymupdf upgrade)
    invalidates the whole store rather than trusting an old layout. What to hash
    comes from the registrations (``readers.registry``), without importing a Reader.
    """
    digest = xxhash.xxh3_64(f"format {serial.FORMAT}".encode())
    for dist in sorted({*_CODEC_DISTS, *registry.dists()}):
        try:
            digest.update(f"{dist} {metadata.version(dist)}\n".encode())
        except metadata.PackageNotFoundError:
            digest.update(f"{dist} -\n".encode())
    sources = [*sorted((_REPO / "readers").rglob("*.py")), Path(serial.__file__).resolve(),
               Path(parsed_entry.__file__).resolve()]
    for path in sources:
        digest.update(path.relative_to(_REPO).as_posix().encode() + b"\0" + path.read_bytes())
    for module in registry.outside_modules():
        digest.update(module.encode() + b"\0" + _module_source(module))
    return digest.hexdigest()


def _module_source(module: str) -> bytes:
    """The source of a plug-in Reader's module, found without running it (b"" when it cannot be)."""
    try:
        spec = importlib.util.find_spec(module)
        origin = spec.origin if spec is not None else None
        return Path(origin).read_bytes() if origin else b""
    except (ImportError, ValueError, OSError):
        return b""
