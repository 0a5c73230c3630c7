"""The contract shared by the evidence plane and the control plane.

A Reader turns one artifact into evidence. It never decides *whether* it is
invoked (the Gate and the protocol in ``sparsefs`` do), it never does I/O of its
own beyond the :class:`ArtifactSource` it is handed, and it never imports
``sparsefs``.

Exception tree::

    ReaderError            the artifact or the request cannot be served;
    ├── UnsupportedArtifact    no text layer / binary / wrong family
    ├── ArtifactTooLarge       over the Reader's size bound
    ├── BadAnchor              a focus anchor that does not resolve
    │   └── ScopeMismatch          a scope or sheet the artifact does not have
    ├── UnsupportedOperation   an exact operation this Reader does not offer
    └── BadOperation           (readers.ops) a malformed operation, unknown column or key

Each carries a ``hint`` (what the agent should ask instead) that ends up in
the error pack.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from readers.actions import PROTOCOL_ACTIONS

if TYPE_CHECKING:
    from readers.ops import Operation


class ReaderError(Exception):
    """A request this Reader cannot serve; ``hint`` says what to ask instead."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class UnsupportedArtifact(ReaderError):
    """The artifact is not of a family this Reader handles (e.g. binary)."""


class ArtifactTooLarge(ReaderError):
    """The artifact exceeds the Reader's bounded-work limit."""


class BadAnchor(ReaderError):
    """A focus anchor that is malformed or points past the end."""


class ScopeMismatch(BadAnchor):
    """A scope the artifact does not have: pages past the end, a sheet that does not exist."""


class UnsupportedOperation(ReaderError):
    """The Reader has no such exact operation (e.g. @sum on a PDF)."""


class ArtifactSource(Protocol):
    """What a Reader may know about and read from its artifact."""

    @property
    def name(self) -> str:
        """Base name of the artifact (used for kind detection)."""
        ...

    @property
    def size(self) -> int:
        """Size in bytes."""
        ...

    def read_bytes(self, limit: int) -> bytes:
        """Whole content, or raise ArtifactTooLarge when size > limit."""
        ...


@dataclass(frozen=True)
class ReadIntent:
    """What the agent needs: the full text and its slots (one need each).

    ``scope`` (from ``&scope=``) restricts where evidence may come from, in the
    Reader's own anchor syntax (``L10-400``, ``#Heading`` for text); a scope
    that does not resolve raises BadAnchor (or its ScopeMismatch subclass).
    ``context`` holds words of the session intent the access did not say: a
    ranking Reader may use them to re-rank passages that already match a slot
    (``bm25index.contextual_scores``), never to select a passage on their own.
    ``method`` names the location method a selector chose (issue 6); a Reader
    that does not offer it uses its default.
    """

    text: str
    slots: tuple[str, ...]
    scope: str | None = None
    context: str | None = None
    method: str | None = None  # location method: "lexical" | "bm25" | "hybrid" | "region"; None: the Reader's default


@dataclass(frozen=True)
class Anchor:
    """A source location; ``label`` is what the agent can pass to @focus=.

    ``char_start``/``char_end`` are offsets into the Reader's full view, so the
    protocol can tell whether a span was already exposed.
    An exact result (a sum, a key-path value) is not a slice of the full view:
    its span is empty (``char_start == char_end``) and ``label`` carries the
    provenance (``sheet:Sales!C2:C4001``, ``$.items[*].id``, ``L120-180``).
    """

    label: str
    char_start: int
    char_end: int
    line_start: int | None = None
    line_end: int | None = None
    heading: str | None = None


@dataclass(frozen=True)
class EvidenceItem:
    """One anchored passage, exactly as it appears in the full view."""

    anchor: Anchor
    text: str
    score: float = 0.0
    slots: tuple[int, ...] = ()
    stance: Literal["supporting", "contradicting"] | None = None  # verify: how the passage bears on the claim


@dataclass(frozen=True)
class SlotCoverage:
    """Whether a slot has evidence, never an answer: ``matched`` (very likely among ``anchors``, a calibrated
    promise), ``candidate`` (the best passages found, not promised) or ``unresolved``.

    Only the calibrated judge (``readers.retrieval.confidence.judge``) says ``matched``, for a Reader family
    it was calibrated on; ``judged_by`` names what decided the state (the family whose calibration judged
    it, ``stance`` for verify's lexical stance rule, the one exception), so the conformance suite can
    check every ``matched`` against the judge. ``verbatim``: the passages were found by the slot's words as
    written (the judge then needs no share of its weight in the index)."""

    slot: str
    status: Literal["matched", "candidate", "unresolved"]
    anchors: tuple[str, ...] = ()
    candidates: tuple[str, ...] = ()
    confidence: float | None = None  # the calibrated probability the evidence is among ``anchors``
    signals: tuple[float, ...] = ()  # what it was computed from (readers.retrieval.confidence.Signals)
    judged_by: str = ""
    verbatim: bool = False
    leads: tuple[str, ...] = ()  # candidates the Reader points at on purpose (a statement page no passage cites)


@dataclass(frozen=True)
class Scope:
    """What the Reader processed to produce its batch."""

    units_scanned: int
    unit: str
    method: str
    chars_processed: int
    note: str = ""


@dataclass(frozen=True)
class Batch:
    """A Reader's answer to one locate/focus request, before admission."""

    items: tuple[EvidenceItem, ...]
    scope: Scope
    coverage: tuple[SlotCoverage, ...] = ()
    flags: tuple[str, ...] = ()


@dataclass
class Parsed:
    """A parsed artifact: the faithful full view plus Reader-private indexes.

    Built once per artifact version (fingerprint) and cached by the caller.
    """

    full_view: str
    kind: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Glance:
    """What a bounded look at an unparsed file found, for a decision that cannot wait for a parse (the guard).

    ``estimate`` is the full view's length, estimated (to decide only); ``facts`` and ``preview`` are what
    the look can say for sure (pages, a first page's text). A Reader offers one through its registration's
    ``probe``: a function ``(path, size) -> Glance`` given a path to a file the caller opened, confined.
    """

    estimate: int
    facts: str
    preview: str


@dataclass(frozen=True)
class CostProfile:
    """What serving this family costs, for the selector (issue 6) and the docs.

    ``parse_ms_per_mb``: measured cold parse time per MiB of source on the
    reference 2-core machine; ``per_call_chars``: fixed overhead a pack adds
    (anchors, headers); ``full_view_ratio``: full-view characters per source
    byte (a PDF's text is much smaller than its bytes).
    """

    parse_ms_per_mb: float = 50.0
    per_call_chars: int = 120
    full_view_ratio: float = 1.0


class Reader(ABC):
    """One artifact family. Subclasses declare what they handle and cost.

    ``actions`` are the protocol actions it serves (intent, scout, focus, ...; by default every one of
    ``readers.actions``, the table that says what each needs and which Readers must answer it);
    ``operations`` are the exact operations of :mod:`readers.ops` it answers in
    :meth:`operate`; ``methods`` the location methods its ``locate`` honours
    (the selector of issue 6 only picks among these); ``magic`` are byte prefixes that identify the family
    whatever the file is called. What the control plane knows about a Reader without importing it (its
    extensions and magic again, isolation, persisted types, guard kind...) is its registration in
    ``readers.registry``; ``name``, ``extensions`` and ``magic`` must match it (the conformance suite checks).
    """

    name: str = "reader"
    extensions: frozenset[str] = frozenset()
    magic: tuple[bytes, ...] = ()
    actions: frozenset[str] = PROTOCOL_ACTIONS
    operations: frozenset[str] = frozenset()
    methods: frozenset[str] = frozenset({"bm25"})  # location methods ``locate`` honours (ReadIntent.method)
    max_bytes: int = 64 * 1024 * 1024
    cost_per_call_chars: int = 0
    cost: CostProfile = CostProfile()

    @abstractmethod
    def accepts(self, name: str, head: bytes) -> bool:
        """True when this Reader handles an artifact with this name and first bytes."""

    @abstractmethod
    def parse(self, source: ArtifactSource) -> Parsed:
        """Parse the artifact once; raise ReaderError when it cannot."""

    @abstractmethod
    def preview(self, parsed: Parsed, max_chars: int) -> str:
        """Bounded Object Preview (the @scout answer), at most ``max_chars``."""

    @abstractmethod
    def locate(
        self,
        parsed: Parsed,
        intent: ReadIntent,
        max_chars: int,
        exclude: Sequence[tuple[int, int]] = (),
        k: int | None = None,
    ) -> Batch:
        """Evidence for the intent, about ``max_chars`` of passage text in all.

        Passages overlapping a span in ``exclude`` (already exposed in this
        episode) are never returned. Coverage has one entry per slot.
        """

    @abstractmethod
    def focus(self, parsed: Parsed, anchor: str) -> Batch:
        """The anchored region, whole; raise BadAnchor when it does not resolve."""

    def widen(self, parsed: Parsed, anchor: str) -> list[str]:
        """Anchors around ``anchor``, widest first, for a suggested ``@focus`` (``sparsefs.protocol.steps``
        keeps the widest whose focus fits): lines of context around a line range, a PDF passage's page.
        Never ``anchor`` itself, which the pack already shows; none for anchors the Reader cannot widen."""
        return []

    def members(self, parsed: Parsed) -> tuple[tuple[str, int, int], ...]:
        """The files a collection's full view is made of: (path relative to the collection, start, end) of each
        member's full view in it (start == end: listed, not readable). A file has none. The savings count what a
        person would have read instead of a collection's pack: its listing and the members it carries text of."""
        return ()

    def operate(self, parsed: Parsed, operation: Operation, max_chars: int) -> Batch:
        """An exact operation over ALL records; items hold results with provenance anchors.

        The batch's scope counts the records processed (``unit`` = rows, items,
        lines) with ``method="exact"`` and its note names the provenance (file
        part, columns, filter). Results longer than ``max_chars`` are cut at
        whole result lines and flagged ``results-truncated`` with the total.
        """
        offered = ", ".join(sorted(self.operations)) or "none"
        raise UnsupportedOperation(
            f"the {self.name} Reader has no @{operation.name} (exact operations here: {offered})",
            hint="ask with @intent=<what you need> (a '/' in it as %2F), or @scout to see what this file holds",
        )
