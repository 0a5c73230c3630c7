"""Copyable next steps for a pack: a refine, a focus on the best anchor, the full view."""

from __future__ import annotations

import re

from sparsefs.artifacts.cache import Artifact
from sparsefs.protocol.grammar import VirtualRequest
from sparsefs.protocol.pack import EvidencePack, command, display_name

_LINES = re.compile(r"^L(\d+)(?:-(\d+))?$")
FOCUS_CONTEXT_LINES = 10


def encode_argument(text: str) -> str:
    """Make intent text safe inside one path component."""
    return text.replace("%", "%25").replace("/", "%2F")


def encode_anchor(anchor: str) -> str:
    """An anchor as a focus argument: also '&' (a member named 'a&k=3.txt' must not read as an option)."""
    return encode_argument(anchor).replace("&", "%26")


def next_steps(artifact: Artifact, request: VirtualRequest, pack: EvidencePack) -> list[str]:
    name = display_name(artifact.rel)
    length = len(artifact.parsed.full_view)
    full = f"{command(name, 'full')}    # the faithful full view, {length:,} chars; closes the episode"
    if pack.decision in ("native-fit", "full", "fallback", "reuse-full-view"):
        return [f"{command(name, 'intent=<a new question>')}    # starts a new episode"]
    if pack.decision == "exact":
        return [f"{command(name, 'scout')}    # columns, keys and what else can be computed", full]
    if pack.decision == "preview":
        return [f"{command(name, 'intent=<what you need; a second need>')}", full]
    view = artifact.parsed.full_view
    last_line = max(1, view.count("\n") + (0 if view.endswith("\n") else 1))
    return [*_after_evidence(name, pack, last_line), full]


def _after_evidence(name: str, pack: EvidencePack, last_line: int) -> list[str]:
    steps = []
    unresolved = [c.slot for c in pack.coverage if c.status == "unresolved"]
    if unresolved:
        steps.append(f"{command(name, 'refine=' + encode_argument(unresolved[0]))}    # other wording, unseen spans")
    elif pack.intent:
        steps.append(f"{command(name, 'refine=' + encode_argument(pack.intent))}    # more, skipping what you saw")
    best = _best_anchor(pack)
    if best:
        focus = "focus=" + encode_anchor(_widened(best, last_line))
        steps.append(f"{command(name, focus)}    # around the best passage")
    return steps


def _best_anchor(pack: EvidencePack) -> str | None:
    """The top-ranked anchor of the first matched slot (coverage lists anchors best first)."""
    for cov in pack.coverage:
        if cov.status == "matched" and cov.anchors:
            return cov.anchors[0]
    return pack.evidence[0].anchor if pack.evidence else None


def _widened(anchor: str, last_line: int) -> str:
    match = _LINES.match(anchor)
    if not match:
        return anchor
    start = int(match.group(1))
    end = int(match.group(2) or start)
    return f"L{max(1, start - FOCUS_CONTEXT_LINES)}-{min(last_line, end + FOCUS_CONTEXT_LINES)}"
