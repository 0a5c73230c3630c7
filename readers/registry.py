"""Reader registry: Readers register lazily by import path, selected per artifact.

A registration names its extensions and magic bytes, so choosing a Reader
imports only the module that claims the artifact (pymupdf is never imported
for a CSV). A module is imported when an artifact first needs it, and an
ImportError names the extra to install instead of a bare traceback.

Selection order: registrations whose magic bytes match the head, then those
that claim the extension, then the sniffers (Readers that recognise content
whatever the name, e.g. logs), then the fallback (text). Each candidate's
``accepts`` has the last word.
"""

from __future__ import annotations

import importlib
import os
import threading
from dataclasses import dataclass

from readers.base import Reader, UnsupportedArtifact


@dataclass(frozen=True)
class Registration:
    """Where a Reader lives, what it claims, and what it needs installed."""

    name: str
    target: str
    extensions: frozenset[str] = frozenset()
    magic: tuple[bytes, ...] = ()
    sniffer: bool = False
    fallback: bool = False
    extra: str = ""

    def claims(self, extension: str, head: bytes) -> bool:
        return extension in self.extensions


_CODE_EXTENSIONS = frozenset({
    ".py", ".pyi", ".js", ".mjs", ".cjs", ".jsx", ".ts", ".tsx", ".go", ".rs", ".java", ".kt", ".c", ".h", ".cc",
    ".cpp", ".hpp", ".cs", ".rb", ".php", ".swift", ".sh", ".bash", ".scala", ".lua",
})
_HTML_MAGIC = (b"<!DOCTYPE html", b"<!DOCTYPE HTML", b"<!doctype html", b"<!doctype HTML", b"<html", b"<HTML")
_REGISTRATIONS: list[Registration] = [
    Registration("code", "readers.code.reader:CodeReader", extensions=_CODE_EXTENSIONS, magic=(b"#!",)),
    Registration(
        "html", "readers.html.reader:HtmlReader", extensions=frozenset({".html", ".htm", ".xhtml"}), magic=_HTML_MAGIC,
        sniffer=True,
    ),
    Registration(
        "table", "readers.table.reader:TableReader",
        extensions=frozenset({".csv", ".tsv", ".tab", ".xlsx", ".xlsm"}), magic=(b"PK\x03\x04",),
    ),
    Registration("pdf", "readers.pdf.reader:PdfReader", extensions=frozenset({".pdf"}), magic=(b"%PDF-",)),
    Registration("json", "readers.jsondata.reader:JsonReader", extensions=frozenset({".json", ".geojson"})),
    Registration("jsonl", "readers.jsondata.jsonl:JsonlReader", extensions=frozenset({".jsonl", ".ndjson"})),
    Registration("log", "readers.logs.reader:LogReader", extensions=frozenset({".log"}), sniffer=True),
    Registration("text", "readers.text:TextReader", fallback=True),
]
_loaded: dict[str, Reader] = {}
_lock = threading.Lock()


def _free_lock_in_child() -> None:
    """A forked child (a bounded parse) inherits this lock held if another thread held it: start it free."""
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_free_lock_in_child)


def register(registration: Registration) -> None:
    """Add a Reader; later registrations are tried first within their group."""
    with _lock:
        _REGISTRATIONS.insert(0, registration)


def registrations() -> list[Registration]:
    with _lock:
        return list(_REGISTRATIONS)


def load(registration: Registration) -> Reader:
    """Import and instantiate a Reader once."""
    with _lock:
        if registration.name not in _loaded:
            _loaded[registration.name] = _instantiate(registration)
        return _loaded[registration.name]


def by_name(name: str) -> Reader:
    """The registered Reader called ``name`` (KeyError when none is)."""
    for registration in registrations():
        if registration.name == name:
            return load(registration)
    raise KeyError(name)


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


def extension_of(name: str) -> str:
    base = os.path.basename(name)
    dot = base.rfind(".")
    return base[dot:].lower() if dot > 0 else ""


def candidates(name: str, head: bytes) -> list[Registration]:
    """Registrations to try for this artifact, most specific first."""
    regs, ext = registrations(), extension_of(name)
    by_magic = [r for r in regs if any(head.startswith(m) for m in r.magic)]
    by_ext = [r for r in regs if r.claims(ext, head) and r not in by_magic]
    sniffers = [r for r in regs if r.sniffer and r not in by_magic and r not in by_ext]
    fallbacks = [r for r in regs if r.fallback and r not in by_magic + by_ext + sniffers]
    return by_magic + by_ext + sniffers + fallbacks


def select(name: str, head: bytes) -> Reader:
    """The first candidate Reader that accepts this artifact."""
    for registration in candidates(name, head):
        reader = load(registration)
        if reader.accepts(name, head):
            return reader
    raise UnsupportedArtifact(
        "no Reader handles this artifact (binary or unknown format)",
        hint="read the original bytes with @raw",
    )
