"""Copyable next steps for a pack: a focus around the best passage, a refine, the full view.

Each step is a suffix to append to the path just read (``@focus=L10-22``), so
it works from any directory and costs a few characters. No suggested focus or
refine delivers more than the episode may still admit, or much more than was
asked: a focus is widened around the best passage only while its text stays
under :data:`FOCUS_MAX_CHARS` and the budget left, and narrowed to the passage
itself (a character range inside a long line) when even that is too much.
What "around" means is the Reader's (``Reader.widen``: lines of context, a PDF
passage's page, rows of a sheet): the protocol parses no anchor itself.
"""

from __future__ import annotations

import re

from readers.base import ReaderError
from sparsefs.artifacts.cache import Artifact
from sparsefs.protocol.grammar import VirtualRequest
from sparsefs.protocol.pack import EvidencePack

FOCUS_MAX_CHARS = 3_000
"""The most a suggested focus shows: context around one passage, not a chapter."""
LEAD_FOCUS_MAX_CHARS = 6_000
"""... or the place a slot that is not matched names first on purpose (a Reader's lead: a statement page)."""
STEP_PACK_CHARS = 200
"""What a step's own pack adds around its text (header, next line), kept free in the budget."""
REFINE_MIN_LEFT = 600
"""Below this budget left a refine would only trigger the fallback: not suggested."""
REFINE_PACK_CHARS = 1_500 + STEP_PACK_CHARS
"""Below this budget left a suggested refine carries ``&budget=`` so its pack fits what is left."""


ASK_STEP = "@intent=<what you need; a second need; / as %2F>"
"""The step that suggests a question: a '/' in it must be written %2F (a raw one makes the kernel answer
ENOTDIR, as if the name were a directory), so the placeholder says so."""
_OPTION_LIKE = re.compile(r"&(?=[^&=]*=)")


def encode_argument(text: str) -> str:
    """Make intent text safe inside one path component, and taken back as the same text: '%' and '/'
    encoded, and an '&' that would start an option (or a near miss of one, which the grammar refuses)."""
    return _OPTION_LIKE.sub("%26", text.replace("%", "%25").replace("/", "%2F"))


def encode_anchor(anchor: str) -> str:
    """An anchor as a focus argument: also '&' (a member named 'a&k=3.txt' must not read as an option)."""
    return encode_argument(anchor).replace("&", "%26")


def next_steps(artifact: Artifact, request: VirtualRequest, pack: EvidencePack) -> list[str]:
    """The steps worth suggesting after this pack, as suffixes (most useful first)."""
    full = "@full"  # its size is the pack's L
    if pack.decision in ("native-fit", "full", "fallback", "reuse-full-view", "error"):
        return []
    if pack.decision == "exact":
        return ["@scout", full]
    if pack.decision == "preview":
        return [ASK_STEP, full]
    left = pack.exposure.budget_left
    steps = [f"@focus={encode_anchor(focus)}"] if (focus := suggested_focus(artifact, pack, left)) else []
    if left >= REFINE_MIN_LEFT and pack.action != "verify":  # a verify's slots are stances, not needs
        budget = f"&budget={left - STEP_PACK_CHARS}" if left < REFINE_PACK_CHARS * max(1, len(pack.slots)) else ""
        steps.append(_refine(pack) + budget)
    return [*steps, full]


def _refine(pack: EvidencePack) -> str:
    """A refine: with the unresolved slot's words when several slots were asked, else other words."""
    open_slots = [c.slot for c in pack.coverage if c.status != "matched"]
    if len(pack.coverage) > 1 and open_slots:
        return "@refine=" + encode_argument(open_slots[0])
    return "@refine=<words>"


def suggested_focus(artifact: Artifact, pack: EvidencePack, budget_left: int) -> str | None:
    """The widest anchor around the best passage whose focus fits the budget left and FOCUS_MAX_CHARS;
    for a slot not matched whose first candidate is a lead the Reader named (a statement page no passage
    cites), that lead (if it fits)."""
    lead = _lead(pack)
    if lead is not None:
        size = _focus_chars(artifact, lead)
        if size is not None and size <= min(LEAD_FOCUS_MAX_CHARS, budget_left - STEP_PACK_CHARS):
            return lead
    best = _best_anchor(pack)
    if best is None:
        return None
    limit = min(FOCUS_MAX_CHARS, budget_left - STEP_PACK_CHARS)
    for anchor in artifact.reader.widen(artifact.parsed, best):
        size = _focus_chars(artifact, anchor)
        if size is not None and size <= limit:
            return anchor
    return None


def _lead(pack: EvidencePack) -> str | None:
    """The first candidate of the first slot that is not matched, when the Reader named it on purpose."""
    for cov in pack.coverage:
        if cov.status != "matched" and cov.candidates and cov.candidates[0] in cov.leads:
            return cov.candidates[0]
    return None


def _best_anchor(pack: EvidencePack) -> str | None:
    """The top-ranked anchor of the first slot with passages, matched before candidate (coverage lists
    anchors best first; the evidence itself is in document order)."""
    for wanted in ("matched", "candidate"):
        for cov in pack.coverage:
            if cov.status == wanted and cov.anchors:
                return cov.anchors[0]
    return pack.evidence[0].anchor if pack.evidence else None


def _focus_chars(artifact: Artifact, anchor: str) -> int | None:
    """Characters a focus on ``anchor`` would show; None when it does not resolve."""
    try:
        batch = artifact.reader.focus(artifact.parsed, anchor)
    except ReaderError:
        return None
    return sum(len(item.text) for item in batch.items)
