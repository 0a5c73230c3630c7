"""The EvidencePack: one pydantic model, rendered as compact text (default), verbose text or JSON.

The agent pays for every character it reads, so the default text is compact
(``sparsefs.protocol.pack_text``): one header line, the passages with inline
anchors, coverage only where it tells something, one next-step line. The
details that help people more than models (configuration, reliability,
processed counts) are in ``&format=json`` and ``&format=verbose``.
"""

from __future__ import annotations

import shlex
from enum import StrEnum
from typing import Literal

import orjson
from pydantic import BaseModel, Field


class Decision(StrEnum):
    """What the access decided, named where it is decided (never read back from a reason's text); its value
    is what packs, the log and ``sparsefs report`` say."""

    SPARSE = "sparse"  # passages located by the Reader, admitted by the Gate
    EXACT = "exact"  # an exact operation's result
    NATIVE_FIT = "native-fit"  # the artifact is smaller than a pack would be: its full view
    FALLBACK = "fallback"  # the next pack would pass L - E: the full view, once, and the episode closes
    FULL = "full"  # the full view was asked for (@full), or the selector found no reliable sparse method
    PREVIEW = "preview"  # the Object Preview (@scout, a vague intent, an inconsistent scope)
    ERROR = "error"  # the request or the artifact cannot be served; what to ask instead
    REUSE_FULL_VIEW = "reuse-full-view"  # the episode delivered the full view before: not sent again

    @property
    def delivers_full_view(self) -> bool:
        return self in _FULL_VIEW_DECISIONS


_FULL_VIEW_DECISIONS = frozenset({Decision.NATIVE_FIT, Decision.FALLBACK, Decision.FULL, Decision.REUSE_FULL_VIEW})


class EvidenceOut(BaseModel):
    """One anchored passage, verbatim from the full view."""

    anchor: str
    span: tuple[int, int] | None = None
    lines: tuple[int, int] | None = None
    heading: str | None = None
    slots: list[int] = Field(default_factory=list)
    stance: Literal["supporting", "contradicting"] | None = None  # verify only: how the text bears on the claim
    text: str


CoverageStatus = Literal["matched", "candidate", "unresolved"]


class CoverageOut(BaseModel):
    """Per-slot coverage, never an answer. 'matched': the evidence is very likely among the anchors
    (a calibrated promise); 'candidate': the best passages found, not likely enough to promise;
    'unresolved': nothing worth showing, or a need the artifact does not mention."""

    slot: str
    status: CoverageStatus
    anchors: list[str] = Field(default_factory=list)
    candidates: list[str] = Field(default_factory=list)
    earlier: list[str] = Field(default_factory=list)  # matching evidence this episode delivered before
    leads: list[str] = Field(default_factory=list, exclude=True)  # candidates the Reader names on purpose
    confidence: float | None = None  # the calibrated probability behind the state (readers.retrieval.confidence)


class ScopeOut(BaseModel):
    """What was processed to build the pack."""

    units_scanned: int = 0
    unit: str = ""
    method: str = ""
    chars_processed: int = 0
    note: str = ""


class ExposureOut(BaseModel):
    """Characters the agent reads: this whole pack, the episode's total E (whole packs), the full
    view L, what the episode may still admit; ``artifact_chars``: the artifact's own text in this
    pack (passages, or the full view), the paper's payload figure."""

    pack_chars: int
    episode_exposed: int
    full_view_chars: int
    budget_left: int
    artifact_chars: int = 0


class ErrorOut(BaseModel):
    message: str
    hint: str


class EvidencePack(BaseModel):
    """What a virtual path reads as."""

    artifact: str
    reader: str | None = None  # which Reader read it, and the kind it saw ("table/csv", "pdf/pdf")
    fingerprint: str
    action: str
    episode: str | None
    decision: Decision
    intent: str | None = None
    slots: list[str] = Field(default_factory=list)
    session_intent: str | None = None  # when the session intent filled in or re-ranked this read
    configuration: str | None = None  # the selector's choice: method/exposure, request group, reliability, why
    scope: ScopeOut = Field(default_factory=ScopeOut)
    exposure: ExposureOut
    evidence: list[EvidenceOut] = Field(default_factory=list)
    coverage: list[CoverageOut] = Field(default_factory=list)
    full_view: str | None = None
    preview: str | None = None
    flags: list[str] = Field(default_factory=list)
    error: ErrorOut | None = None
    next_steps: list[str] = Field(default_factory=list)


def display_name(name: str) -> str:
    """A path as text: bytes that are not UTF-8 (surrogate-escaped) become \\x escapes."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def render(pack: EvidencePack, fmt: str) -> bytes:
    """Bytes a virtual file serves: JSON with format=json, the verbose layout with format=verbose,
    else the compact text."""
    return render_str(pack, fmt).encode("utf-8", "surrogateescape")


def render_str(pack: EvidencePack, fmt: str) -> str:
    """What the agent reads, as text; its length is the exposure the Gate counts."""
    from sparsefs.protocol import pack_text  # the renderers import this module's models

    if fmt == "json":
        return orjson.dumps(pack.model_dump(mode="json"), option=orjson.OPT_INDENT_2).decode() + "\n"
    if fmt == "verbose":
        return pack_text.verbose(pack)
    return pack_text.compact(pack)


def artifact_chars(pack: EvidencePack) -> int:
    """The artifact's own characters in a pack: its passages, or the full view it carries."""
    if pack.full_view is not None:
        return len(pack.full_view)
    return sum(len(item.text) for item in pack.evidence)


def command(artifact: str, suffix: str) -> str:
    """A shell command the agent can copy to read ``artifact@suffix``."""
    return "cat " + shlex.quote(f"{artifact}@{suffix}")
