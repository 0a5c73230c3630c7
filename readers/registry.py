"""Reader registry: Readers register lazily by import path, selected per artifact.

A Reader module is imported only when an artifact first needs it, and an
ImportError names the extra to install instead of a bare traceback.
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass

from readers.base import Reader, UnsupportedArtifact


@dataclass(frozen=True)
class Registration:
    """Where a Reader lives and what it needs installed."""

    name: str
    target: str
    extra: str = ""


_REGISTRATIONS: list[Registration] = [
    Registration("text", "readers.text:TextReader"),
]
_loaded: dict[str, Reader] = {}
_lock = threading.Lock()


def register(registration: Registration) -> None:
    """Add a Reader; later registrations are tried first."""
    with _lock:
        _REGISTRATIONS.insert(0, registration)


def load(registration: Registration) -> Reader:
    """Import and instantiate a Reader once."""
    with _lock:
        if registration.name not in _loaded:
            _loaded[registration.name] = _instantiate(registration)
        return _loaded[registration.name]


def _instantiate(registration: Registration) -> Reader:
    module_name, _, class_name = registration.target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        extra = f" (pip install 'sparsefs[{registration.extra}]')" if registration.extra else ""
        raise UnsupportedArtifact(
            f"the {registration.name} Reader cannot load: {exc}{extra}", hint="read it with @raw"
        ) from exc
    reader: Reader = getattr(module, class_name)()
    return reader


def select(name: str, head: bytes) -> Reader:
    """The first registered Reader that accepts this artifact."""
    for registration in list(_REGISTRATIONS):
        reader = load(registration)
        if reader.accepts(name, head):
            return reader
    raise UnsupportedArtifact(
        "no Reader handles this artifact (binary or unknown format)",
        hint="read the original bytes with @raw",
    )
