"""Reader registry: the one place that says what each Reader is, read by everything else.

A :class:`Registration` is a Reader's metadata: where its class lives, what it
claims (extensions, magic bytes, sniffer, fallback), which of its extensions
are binary, whether every parse runs in a child process, the types its parse
persists, the distributions its parse depends on, the parsed kinds it emits,
its guard kind and its install extra. Adding a Reader is one module plus one
line in :data:`_REGISTRATIONS` (or one :func:`register` call); nothing else
lists Readers. Who reads what:

* :func:`select` (``sparsefs.artifacts.cache``): which Reader parses an artifact;
* ``isolated`` (``sparsefs.artifacts.bounded``): a parse in a forked child whatever its size;
* :func:`persisted` (``sparsefs.store.serial``): the codec's whitelist;
* :func:`dists` and :func:`sources` (``sparsefs.store.parsed``): the store's code version;
* :func:`guard_kinds`, :func:`guarding` (``sparsefs.guard``): what the guard cards, how it estimates;
* :func:`artifact_type` (``sparsefs.protocol.selecting``, calibration): the selector's request groups.

Registrations are data: nothing here imports a Reader until an artifact needs
it, so choosing a Reader imports only the module that claims the artifact
(pymupdf is never imported for a CSV), and an ImportError names the extra to
install instead of a bare traceback. ``tests/reader_conformance.py`` checks
that each registration matches its class and that its parses survive the store.

Selection order: registrations whose magic bytes match the head, then those
that claim the extension, then the sniffers (Readers that recognise content
whatever the name, e.g. logs), then the fallback (text). Each candidate's
``accepts`` has the last word.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from readers.base import Reader, UnsupportedArtifact
from readers.selection import ArtifactType, RequestGroup, request_group


@dataclass(frozen=True)
class Persisted:
    """A class a parse keeps in ``Parsed.data`` that the store's codec may rebuild field by field (no pickle)."""

    path: str  # "package.module.Class"
    transient: tuple[str, ...] = ()  # attributes rebuilt empty on load (caches)

    @property
    def module(self) -> str:
        return self.path.rpartition(".")[0]

    @property
    def attribute(self) -> str:
        return self.path.rpartition(".")[2]


@dataclass(frozen=True)
class Registration:
    """Where a Reader lives, what it claims, and what the control plane must know about it without importing it."""

    name: str
    target: str  # "module:Class"
    extensions: frozenset[str] = frozenset()
    magic: tuple[bytes, ...] = ()
    sniffer: bool = False  # tried for any name whose extension nobody claims
    fallback: bool = False  # tried last
    kinds: Mapping[str, ArtifactType] = field(default_factory=dict)  # Parsed.kind values it emits -> request group
    binary: frozenset[str] = frozenset()  # extensions whose bytes are no text (size says nothing about L)
    isolated: bool = False  # every parse in a bounded child, however small (the parser may expand its input)
    persists: tuple[Persisted, ...] = ()  # classes its parse holds, for the store's codec
    dists: tuple[str, ...] = ()  # distributions whose version changes what a parse stores
    guard_kind: str = ""  # the --guard-kinds name its files are carded under ("": never carded)
    guarded: frozenset[str] | None = None  # extensions carded under guard_kind (None: ``extensions``)
    chars_per_byte: Mapping[str, float] = field(default_factory=dict)  # the guard's estimate of L from the size
    probe: str = ""  # "module:function" (path, size) -> Glance: a bounded look for the guard, instead of the size
    extra: str = ""  # pip extra that installs its dependencies

    def claims(self, extension: str, head: bytes) -> bool:
        return extension in self.extensions

    @property
    def artifact(self) -> ArtifactType:
        """The request group of the Reader's own name: that of its kind of the same name, else its first kind."""
        own = self.kinds.get(self.name)
        return own if own is not None else next(iter(self.kinds.values()), "text")

    @property
    def guarded_extensions(self) -> frozenset[str]:
        if not self.guard_kind:
            return frozenset()
        return self.extensions if self.guarded is None else self.guarded


def _kinds(artifact: ArtifactType, *kinds: str) -> dict[str, ArtifactType]:
    return dict.fromkeys(kinds, artifact)


_RANKING = ("bm25s", "PyStemmer", "numpy")  # readers.retrieval: BM25 indexes and the arrays they are kept in
_INDEX = (Persisted("readers.retrieval.bm25index.UnitIndex"),)
_SEGMENTED = (
    *_INDEX, Persisted("readers.retrieval.segment.Segmentation"), Persisted("readers.retrieval.segment.Heading"),
)
_CODE_EXTENSIONS = frozenset({
    ".py", ".pyi", ".js", ".mjs", ".cjs", ".jsx", ".ts", ".tsx", ".go", ".rs", ".java", ".kt", ".c", ".h", ".cc",
    ".cpp", ".hpp", ".cs", ".rb", ".php", ".swift", ".sh", ".bash", ".scala", ".lua",
})
_HTML_MAGIC = (b"<!DOCTYPE html", b"<!DOCTYPE HTML", b"<!doctype html", b"<!doctype HTML", b"<html", b"<HTML")
_MARKUP = 0.35  # characters of main text per byte of a saved page
_REGISTRATIONS: list[Registration] = [
    Registration(
        "code", "readers.code.reader:CodeReader", extensions=_CODE_EXTENSIONS, magic=(b"#!",),
        kinds=_kinds("text", "code"), dists=_RANKING, persists=(
            *_SEGMENTED, Persisted("readers.code.symbols.Symbol"), Persisted("readers.code.symbols.SymbolIndex"),
        ),
    ),
    Registration(
        "html", "readers.html.reader:HtmlReader", extensions=frozenset({".html", ".htm", ".xhtml"}),
        magic=_HTML_MAGIC, sniffer=True, kinds=_kinds("text", "html"), dists=_RANKING,
        persists=(*_SEGMENTED, Persisted("readers.html.extract.Page"), Persisted("readers.html.extract.Block")),
        guard_kind="html", guarded=frozenset({".html", ".htm", ".xhtml", ".xml"}),
        chars_per_byte={".html": _MARKUP, ".htm": _MARKUP, ".xhtml": _MARKUP, ".xml": 0.5},
    ),
    Registration(
        "table", "readers.table.reader:TableReader", extensions=frozenset({".csv", ".tsv", ".tab", ".xlsx", ".xlsm"}),
        magic=(b"PK\x03\x04",), kinds=_kinds("structured", "csv", "tsv", "xlsx"),
        binary=frozenset({".xlsx", ".xlsm"}), persists=(*_INDEX, Persisted("readers.table.model.Sheet")),
        dists=(*_RANKING, "openpyxl", "python-calamine"), guard_kind="table",
        guarded=frozenset({".csv", ".tsv", ".xlsx"}), chars_per_byte={".xlsx": 2.0},
    ),
    Registration(
        "pdf", "readers.pdf.reader:PdfReader", extensions=frozenset({".pdf"}), magic=(b"%PDF-",),
        kinds=_kinds("text", "pdf"), binary=frozenset({".pdf"}), isolated=True, dists=(*_RANKING, "pymupdf"),
        persists=(*_INDEX, Persisted("readers.pdf.anchors.PageMap"), Persisted("readers.pdf.headings.PdfHeading")),
        guard_kind="pdf", probe="readers.pdf.probe:glance",
    ),
    Registration(
        "json", "readers.jsondata.reader:JsonReader", extensions=frozenset({".json", ".geojson"}),
        kinds=_kinds("structured", "json"), dists=(*_RANKING, "orjson"), persists=(
            *_INDEX, Persisted("readers.jsondata.spans.Tree", ("_children",)), Persisted("readers.jsondata.spans.Unit"),
        ),
        guard_kind="json", guarded=frozenset({".json"}),
    ),
    Registration(
        "jsonl", "readers.jsondata.jsonl:JsonlReader", extensions=frozenset({".jsonl", ".ndjson"}),
        kinds=_kinds("structured", "jsonl"), dists=(*_RANKING, "orjson"), persists=_INDEX, guard_kind="json",
    ),
    Registration(
        "log", "readers.logs.reader:LogReader", extensions=frozenset({".log"}), sniffer=True,
        kinds=_kinds("structured", "log"), dists=_RANKING,
        persists=(*_INDEX, Persisted("readers.logs.parse.Entries")), guard_kind="log",
    ),
    Registration(
        "text", "readers.text:TextReader", fallback=True, dists=_RANKING, persists=_SEGMENTED,
        kinds={**_kinds("text", "text", "markdown", "code", "config"), **_kinds("structured", "data", "log")},
        guard_kind="text", guarded=frozenset({".txt", ".md", ".markdown", ".rst", ".tex", ".org", ".adoc"}),
    ),
    # A directory: chosen by stat, never by name (sparsefs.artifacts.cache); kept in memory, never stored.
    Registration("folder", "readers.folder:FolderReader", extensions=frozenset({"/"}),
                 kinds=_kinds("collection", "folder")),
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


def named(name: str) -> Registration | None:
    """The registration called ``name`` (the latest one), if any."""
    return next((r for r in registrations() if r.name == name), None)


def load(registration: Registration) -> Reader:
    """Import and instantiate a Reader once."""
    with _lock:
        if registration.name not in _loaded:
            _loaded[registration.name] = _instantiate(registration)
        return _loaded[registration.name]


def by_name(name: str) -> Reader:
    """The registered Reader called ``name`` (KeyError when none is)."""
    registration = named(name)
    if registration is None:
        raise KeyError(name)
    return load(registration)


def resolve(target: str, registration: Registration) -> Any:
    """``module:attribute`` of a registration, imported now; UnsupportedArtifact (naming the extra) if it cannot be."""
    module_name, _, attribute = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        extra = f" (pip install 'sparsefs[{registration.extra}]')" if registration.extra else ""
        raise UnsupportedArtifact(
            f"the {registration.name} Reader cannot load: {exc}{extra}", hint="read it with @raw"
        ) from exc
    return getattr(module, attribute)


def _instantiate(registration: Registration) -> Reader:
    reader: Reader = resolve(registration.target, registration)()
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


# ---- what the control plane reads ---------------------------------------------------------


def isolated(name: str) -> bool:
    """Does every parse of the Reader called ``name`` run in a bounded child, whatever its size?"""
    registration = named(name)
    return registration is not None and registration.isolated


def persisted() -> dict[str, Persisted]:
    """Every class a registered Reader's parse may hold, by dotted name: the store codec's whitelist."""
    return {p.path: p for r in reversed(registrations()) for p in r.persists}


def dists() -> tuple[str, ...]:
    """The distributions registered Readers' parses depend on, sorted (the store's code version hashes them)."""
    return tuple(sorted({d for r in registrations() for d in r.dists}))


def outside_modules() -> tuple[str, ...]:
    """Modules of registered Readers that live outside ``readers/`` (plug-ins): their source is part of the code
    version too (``readers/`` is hashed whole)."""
    modules = {r.target.partition(":")[0] for r in registrations()}
    return tuple(sorted(m for m in modules if m != "readers" and not m.startswith("readers.")))


def guard_kinds() -> dict[str, frozenset[str]]:
    """Guard kind -> the extensions carded under it, in registration order (``--guard-kinds``)."""
    kinds: dict[str, frozenset[str]] = {}
    for r in registrations():
        if r.guard_kind:
            kinds[r.guard_kind] = kinds.get(r.guard_kind, frozenset()) | r.guarded_extensions
    return kinds


def guarding(extension: str) -> Registration | None:
    """The registration whose guard kind cards files with this extension, if any."""
    return next((r for r in registrations() if extension in r.guarded_extensions), None)


def artifact_type(kind: str) -> ArtifactType:
    """text | structured | collection of a parsed kind or a Reader name (unknown ones read as text)."""
    lowered = kind.lower()
    regs = registrations()
    for r in regs:
        if lowered in r.kinds:
            return r.kinds[lowered]
    return next((r.artifact for r in regs if r.name == lowered), "text")


def group_of(kind: str, full_view_chars: int, action: str, text: str) -> RequestGroup:
    """The selector's request group of one read of a parsed kind (or a Reader name)."""
    return request_group(artifact_type(kind), full_view_chars, action, text)
