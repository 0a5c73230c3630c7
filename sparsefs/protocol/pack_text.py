"""The EvidencePack as text: compact (the default, what a model reads) and verbose (for people).

Compact layout, measured against what an agent pays for (issue 17: a median of
at most 150 characters around the passages of a one-slot intent)::

    report.md@intent e1 45f3e85c · 27 sentences bm25 · E 1,190/L 4,019 · matched
    [L16] According to these analyses, the orf1ab (20kb ...
    [L1-3] First Complete Genome Sequence ...
    next: @focus=L10-22 · @refine=<words> · @full

The header carries what the paper requires (artifact, fingerprint, action,
episode, scope, exposure, coverage) tersely; coverage gets lines of its own
only for several slots; a next step is a suffix to append to the path just
read, so it works from any directory. A full-view pack is one header line and
the full view; a tiny file whose header would cost more than its text is the
text alone.

Nothing from the workspace can start a line of the pack or pass for its syntax (issue 24): every name,
label, anchor, slot, flag and message is a single line (``readers.escape.escape_name``), and every line of
content (a passage past its first line, a preview) begins with :data:`CONTENT_PREFIX`, which no line of the
pack's own ever does. So the pack's own lines are exactly those that do not start with a space: the header,
``[anchor]`` lines, ``N. slot:`` coverage lines, ``intent (from the session):``, ``next:`` and ``try:``. A
full-view pack is the exception by design: its header says how many characters follow, and the file follows
unchanged, with nothing of the pack's after it. A next step that carries the agent's words or a workspace
name is printed shell-quoted whole, so pasting it after the path runs nothing.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

from readers.base import SlotCoverage
from readers.escape import escape_name, escape_text
from sparsefs.protocol.pack import CoverageOut, EvidenceOut, EvidencePack, ScopeOut
from sparsefs.protocol.steps import ASK_STEP

CONTENT_PREFIX = " "
"""What every line of content begins with, and no line of the pack's own: one space (for a model, usually
no extra token: the space joins the word after it)."""
_CONTENT_BREAK = re.compile(r"\n(?=[^\n])")
_SHELL_SAFE = re.compile(r"[\w@%+=:,./-]*", re.ASCII)
_TEMPLATE = re.compile("(?:" + re.escape("@refine=<words>") + "|" + re.escape(ASK_STEP) + r")(?:&budget=\d+)?")

SLOT_CHARS = 60
"""A slot's text as a coverage line quotes it: enough to recognise it."""

QUIET_FLAGS = frozenset({"episode-closed", "session-intent-used", "session-context"})
"""Flags the compact header leaves out: the line already says it (closed, session intent shown)."""

_FULL_REASONS = {
    "native-fit": "the whole file (smaller than a pack would be)",
    "full": "full view",
    "fallback": "full view (the next pack would pass the budget)",
    "reuse-full-view": "full view (delivered before in this episode)",
}


def compact(pack: EvidencePack) -> str:
    """The default text: header line, passages, coverage of several slots, next steps."""
    if pack.error is not None:
        name = escape_name(pack.artifact) if pack.action == "?" else _name(pack)  # a refused name names itself
        return f"{name}: error: {escape_name(pack.error.message)}\ntry: {escape_name(pack.error.hint)}\n"
    if pack.full_view is not None:
        return full_view_text(pack)
    if pack.preview is not None:
        return _preview(pack)
    parts = [_sparse_header(pack) + "\n", *(_item(item, len(pack.slots) > 1) for item in pack.evidence)]
    if len(pack.coverage) > 1:
        parts += [_coverage_line(i, cov) for i, cov in enumerate(pack.coverage, 1)]
    parts.append(_next(pack))
    return "".join(parts)


def full_view_header(pack: EvidencePack) -> str:
    """The one line above a full view (its length is what the Gate reserves for it)."""
    why = _FULL_REASONS.get(pack.decision, "full view")
    if "selected-full-view" in pack.flags:
        why = "full view (no sparse method is reliable for this request)"
    fields = [_head(pack), f"{why}, {pack.exposure.full_view_chars:,} chars", *_flags(pack)]
    return " · ".join(fields) + "\n"


def full_view_text(pack: EvidencePack) -> str:
    """Header and full view; the full view alone when the header would cost more than it."""
    view = pack.full_view or ""
    header = full_view_header(pack)
    return view if len(header) > len(view) else header + view


NEXT_LINE_ESTIMATE = 60
"""A next-step line, before the steps are known (a focus, a refine, the full view)."""


def item_chars(item: EvidenceOut, several_slots: bool) -> int:
    """What one passage adds to a compact pack."""
    return len(_item(item, several_slots))


def without_items(pack: EvidencePack, coverage: Sequence[SlotCoverage]) -> int:
    """A compact pack's size without its passages: the header, several slots' lines, a next line."""
    slots = [CoverageOut(slot=c.slot, status=c.status, anchors=list(c.anchors)) for c in coverage]
    lines = sum(len(_coverage_line(i, c)) for i, c in enumerate(slots, 1)) if len(slots) > 1 else 0
    return len(_sparse_header(pack)) + 1 + lines + NEXT_LINE_ESTIMATE


def _name(pack: EvidencePack) -> str:
    return f"{escape_name(pack.artifact)}@{escape_name(pack.action)}"


def content(text: str) -> str:
    """Lines of workspace text as a pack shows them: escaped, every line after the first prefixed."""
    return _CONTENT_BREAK.sub("\n" + CONTENT_PREFIX, escape_text(text))


def lines_of_content(text: str) -> str:
    """A block of content lines (a preview): every line prefixed, the first included."""
    shown = content(text)
    return CONTENT_PREFIX + shown if shown and not shown.startswith("\n") else shown


def shown_step(step: str) -> str:
    """A next step as printed: the suffix itself, or, when it carries anything a shell would act on (the
    agent's words, a member's name), the whole suffix shell-quoted: pasted after the path just read, quoted
    or not and from any directory, it is still one word and runs nothing (``cat a.md'@refine=x; y'``). The
    placeholders (``@refine=<words>``) stay as they are: they are to be filled in, not pasted."""
    if _SHELL_SAFE.fullmatch(step) or _TEMPLATE.fullmatch(step):
        return step
    return shlex.quote(escape_name(step))


def _head(pack: EvidencePack) -> str:
    episode = f" {pack.episode}" if pack.episode else ""
    return f"{_name(pack)}{episode} {pack.fingerprint[:8]}"


def _flags(pack: EvidencePack) -> list[str]:
    shown = [escape_name(flag) for flag in pack.flags if flag not in QUIET_FLAGS]
    return [", ".join(shown)] if shown else []


def _sparse_header(pack: EvidencePack) -> str:
    exp = pack.exposure
    fields = [_head(pack), _scope(pack.scope), f"E {exp.episode_exposed:,}/L {exp.full_view_chars:,}"]
    if len(pack.coverage) == 1:
        fields.append(_status(pack.coverage[0]))
    fields += _flags(pack)
    line = " · ".join(fields)
    if pack.session_intent and "session-intent-used" in pack.flags:
        line += f"\nintent (from the session): {escape_name(pack.intent or '')}"
    return line


def _scope(scope: ScopeOut) -> str:
    if scope.method == "exact":
        return f"exact over {scope.units_scanned:,} {escape_name(scope.unit)}"
    if not scope.unit:
        return f"{scope.chars_processed:,} chars processed"
    method = f" {escape_name(_short_method(scope.method))}" if scope.method else ""
    return f"{scope.units_scanned:,} {escape_name(scope.unit)}{method}"


def _short_method(method: str) -> str:
    """The method's name without its parts ('bm25+neighbours' -> 'bm25', 'hybrid (bm25 ...)' -> 'hybrid');
    the verbose and JSON forms keep the whole."""
    return method.replace("(", " ").replace("+", " ").split()[0] if method.strip() else method


def _status(cov: CoverageOut, anchors: bool = False) -> str:
    """One slot's coverage in a few words: the state (with its anchors on a slot's own line), anchors
    the pack does not show, evidence delivered earlier in the episode."""
    word = {"matched": "matched", "candidate": "candidate"}.get(cov.status, "unresolved")
    shown = f" {_anchors(cov.anchors[:3])}" if anchors and cov.anchors else ""
    extra = {"candidate": 1, "unresolved": 3}.get(cov.status, 0)  # a candidate's passages are on show already
    others = f" (also {_anchors(cov.candidates[:extra])})" if cov.candidates and extra else ""
    earlier = f"; earlier {_anchors(cov.earlier[:3])}" if cov.earlier else ""
    return f"{word}{shown}{others}{earlier}"


def _item(item: EvidenceOut, several_slots: bool) -> str:
    slots = f" ({', '.join(str(s + 1) for s in item.slots)})" if several_slots and item.slots else ""
    stance = f" ({item.stance})" if item.stance else ""
    return f"[{escape_name(item.anchor)}]{slots}{stance} {content(item.text.strip())}\n"


def _anchors(anchors: Sequence[str]) -> str:
    return ", ".join(escape_name(anchor) for anchor in anchors)


def _coverage_line(number: int, cov: CoverageOut) -> str:
    slot = cov.slot if len(cov.slot) <= SLOT_CHARS else cov.slot[: SLOT_CHARS - 1] + "…"
    return f"{number}. {escape_name(slot)}: {_status(cov, anchors=True)}\n"


def _steps(pack: EvidencePack) -> list[str]:
    return [shown_step(step) for step in pack.next_steps]


def _next(pack: EvidencePack) -> str:
    return "next: " + " · ".join(_steps(pack)) + "\n" if pack.next_steps else ""


def _preview(pack: EvidencePack) -> str:
    note = f" ({escape_name(pack.scope.note)})" if pack.scope.note and pack.scope.note != "object preview" else ""
    fields = [_head(pack), f"preview{note}", *_flags(pack)]
    return " · ".join(fields) + "\n" + lines_of_content((pack.preview or "").rstrip()) + "\n" + _next(pack)


# ---- verbose: the full layout, for people (&format=verbose) -------------------------------------------


def verbose(pack: EvidencePack) -> str:
    """Every field of the pack in labelled sections (configuration, reliability, processed counts)."""
    parts = [_verbose_header(pack)]
    if pack.error:
        parts.append(f"## Error\n{escape_name(pack.error.message)}\nTry: {escape_name(pack.error.hint)}\n\n")
    if pack.preview:
        parts.append(f"## Object preview\n{lines_of_content(pack.preview.rstrip())}\n\n")
    if pack.evidence:
        title = "Exact result (computed over all records)" if pack.decision == "exact" else "Evidence"
        parts.append(f"## {title}\n" + "".join(_verbose_item(i, item) for i, item in enumerate(pack.evidence, 1)))
    if pack.full_view is not None:
        parts.append(f"## Full view ({len(pack.full_view):,} chars)\n{lines_of_content(pack.full_view)}\n\n")
    if pack.coverage:
        lines = [f"[{i}] {escape_name(c.slot)}: {_verbose_coverage(c)}" for i, c in enumerate(pack.coverage, 1)]
        parts.append("## Coverage (evidence found, not answers)\n" + "\n".join(lines) + "\n\n")
    if pack.next_steps:
        parts.append("## Next (append to the path you read)\n" + "".join(f"{step}\n" for step in _steps(pack)))
    return "".join(parts)


def _verbose_header(pack: EvidencePack) -> str:
    exp, name = pack.exposure, escape_name(pack.artifact)
    lines = [
        f"# EvidencePack · {name} · {pack.decision}",
        f"artifact: {name}  fingerprint: {pack.fingerprint}  episode: {pack.episode or '-'}  "
        f"action: {escape_name(pack.action)}" + (f"  read as: {escape_name(pack.reader)}" if pack.reader else ""),
    ]
    lines += [f"intent: {escape_name(pack.intent)}"] if pack.intent else []
    lines += [f"session intent: {escape_name(pack.session_intent)}"] if pack.session_intent else []
    lines += ["slots: " + "  ".join(f"[{i}] {escape_name(s)}" for i, s in enumerate(pack.slots, 1))
              ] if len(pack.slots) > 1 else []
    lines += [f"configuration: {escape_name(pack.configuration)}"] if pack.configuration else []
    scope = pack.scope
    note = f"; {escape_name(scope.note)}" if scope.note else ""
    scanned = f"{scope.units_scanned:,} {escape_name(scope.unit)} scanned ({escape_name(scope.method)}), " \
        if scope.unit else ""
    lines.append(f"scope: {scanned}{scope.chars_processed:,} chars processed{note}")
    lines.append(
        f"exposure: this pack {exp.pack_chars:,} chars ({exp.artifact_chars:,} of the artifact's text) · "
        f"episode E {exp.episode_exposed:,} / L {exp.full_view_chars:,} · budget left {exp.budget_left:,}"
    )
    lines += ["flags: " + ", ".join(escape_name(flag) for flag in pack.flags)] if pack.flags else []
    return "\n".join(lines) + "\n\n"


def _verbose_item(number: int, item: EvidenceOut) -> str:
    heading = f" § {escape_name(item.heading)}" if item.heading else ""
    slots = f"  (slot {', '.join(str(s + 1) for s in item.slots)})" if item.slots else ""
    stance = f"  ({item.stance})" if item.stance else ""
    return f"[{number}] {escape_name(item.anchor)}{heading}{slots}{stance}\n{lines_of_content(item.text.rstrip())}\n\n"


def _verbose_coverage(cov: CoverageOut) -> str:
    earlier = f"; delivered earlier: {_anchors(cov.earlier)}" if cov.earlier else ""
    if cov.status == "matched":
        return f"matched → {_anchors(cov.anchors)}{earlier}"
    candidates = f" → {_anchors(cov.candidates)}" if cov.candidates else ""
    return f"{cov.status}{candidates}{earlier}"
