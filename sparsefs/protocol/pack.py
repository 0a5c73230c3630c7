"""The EvidencePack: one pydantic model, rendered as text (default) or JSON."""

from __future__ import annotations

import shlex
from typing import Literal

import orjson
from pydantic import BaseModel, Field

Decision = Literal["sparse", "exact", "native-fit", "fallback", "full", "preview", "error", "reuse-full-view"]


class EvidenceOut(BaseModel):
    """One anchored passage, verbatim from the full view."""

    anchor: str
    span: tuple[int, int] | None = None
    lines: tuple[int, int] | None = None
    heading: str | None = None
    slots: list[int] = Field(default_factory=list)
    stance: Literal["supporting", "contradicting"] | None = None  # verify only: how the text bears on the claim
    text: str


class CoverageOut(BaseModel):
    """Per-slot coverage; 'matched' means evidence was found, not that it answers."""

    slot: str
    status: Literal["matched", "unresolved"]
    anchors: list[str] = Field(default_factory=list)
    candidates: list[str] = Field(default_factory=list)
    earlier: list[str] = Field(default_factory=list)  # matching evidence this episode delivered before


class ScopeOut(BaseModel):
    """What was processed to build the pack."""

    units_scanned: int = 0
    unit: str = ""
    method: str = ""
    chars_processed: int = 0
    note: str = ""


class ExposureOut(BaseModel):
    """Characters exposed: this pack's payload, episode total E, full view L."""

    pack_chars: int
    episode_exposed: int
    full_view_chars: int
    budget_left: int


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
    """Bytes a virtual file serves: JSON with format=json, else text."""
    if fmt == "json":
        return orjson.dumps(pack.model_dump(mode="json"), option=orjson.OPT_INDENT_2) + b"\n"
    return render_text(pack).encode("utf-8", "surrogateescape")


def render_evidence(items: list[EvidenceOut]) -> str:
    """The evidence block: this is the payload the Gate measures (E)."""
    return "".join(_evidence_item(i, item) for i, item in enumerate(items, 1))


def _evidence_item(number: int, item: EvidenceOut) -> str:
    heading = f" § {item.heading}" if item.heading else ""
    slots = f"  (slot {', '.join(str(s + 1) for s in item.slots)})" if item.slots else ""
    stance = f"  ({item.stance})" if item.stance else ""
    return f"[{number}] {item.anchor}{heading}{slots}{stance}\n{item.text.rstrip()}\n\n"


def render_text(pack: EvidencePack) -> str:
    parts = [_header(pack)]
    if pack.error:
        parts.append(f"## Error\n{pack.error.message}\nTry: {pack.error.hint}\n\n")
    if pack.preview:
        parts.append(f"## Object preview\n{pack.preview.rstrip()}\n\n")
    if pack.evidence:
        title = "Exact result (computed over all records)" if pack.decision == "exact" else "Evidence"
        parts.append(f"## {title}\n" + render_evidence(pack.evidence))
    if pack.full_view is not None:
        parts.append(f"## Full view ({len(pack.full_view):,} chars)\n{pack.full_view}\n\n")
    if pack.coverage:
        parts.append("## Coverage (evidence found, not answers)\n" + _coverage(pack.coverage) + "\n")
    if pack.next_steps:
        parts.append("## Next\n" + "".join(f"{step}\n" for step in pack.next_steps))
    return "".join(parts)


def _header(pack: EvidencePack) -> str:
    exp = pack.exposure
    lines = [
        f"# EvidencePack · {pack.artifact} · {pack.decision}",
        f"artifact: {pack.artifact}  fingerprint: {pack.fingerprint}  "
        f"episode: {pack.episode or '-'}  action: {pack.action}" + (f"  read as: {pack.reader}" if pack.reader else ""),
    ]
    if pack.intent:
        lines.append(f"intent: {pack.intent}")
    if pack.session_intent:
        lines.append(f"session intent: {pack.session_intent}")
    if len(pack.slots) > 1:
        lines.append("slots: " + "  ".join(f"[{i}] {s}" for i, s in enumerate(pack.slots, 1)))
    if pack.configuration:
        lines.append(f"configuration: {pack.configuration}")
    lines.append("scope: " + _scope(pack.scope))
    lines.append(
        f"exposure: {exp.pack_chars:,} chars of the artifact in this pack · episode E {exp.episode_exposed:,}"
        f" / L {exp.full_view_chars:,} · budget left {exp.budget_left:,}"
    )
    if pack.flags:
        lines.append("flags: " + ", ".join(pack.flags))
    return "\n".join(lines) + "\n\n"


def _scope(scope: ScopeOut) -> str:
    if not scope.unit:
        return f"{scope.chars_processed:,} chars processed{_note(scope.note)}"
    return (
        f"{scope.units_scanned:,} {scope.unit} scanned ({scope.method}), "
        f"{scope.chars_processed:,} chars processed{_note(scope.note)}"
    )


def _note(note: str) -> str:
    return f"; {note}" if note else ""


def _coverage(coverage: list[CoverageOut]) -> str:
    out = []
    for i, cov in enumerate(coverage, 1):
        earlier = f"{'; ' if cov.anchors else ''}delivered earlier: {', '.join(cov.earlier)}" if cov.earlier else ""
        if cov.status == "matched":
            out.append(f"[{i}] {cov.slot}: matched → {', '.join(cov.anchors)}{earlier}")
        else:
            closest = f"; closest: {', '.join(cov.candidates)}" if cov.candidates else ""
            out.append(f"[{i}] {cov.slot}: unresolved{closest}")
    return "\n".join(out) + "\n"


def command(artifact: str, suffix: str) -> str:
    """A shell command the agent can copy to read ``artifact@suffix``."""
    return "cat " + shlex.quote(f"{artifact}@{suffix}")
