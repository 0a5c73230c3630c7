"""What a pack exposes, counted as the agent reads it: the whole served pack, every character.

The Gate admits whole packs (``gate.budget``): a sparse pack's size is the
length of its text, header, coverage and next steps included; a full-view pack
is the full view plus one header line, at most ``L + reserve``. Since the pack
states its own size and the episode's E, its text is rendered until those
numbers agree with the text they are printed in.

The unit is the default text: ``&format=json`` (and ``verbose``) serve the same
pack in another form, longer by its field names and escaping; the episode's
budget, like L, is counted on the text, and the log counts what was served.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from gate import Budget
from readers.base import Batch, EvidenceItem, SlotCoverage
from sparsefs.protocol.pack import EvidenceOut, EvidencePack, ExposureOut, artifact_chars, render_str

FULL_VIEW_RESERVE = 200
"""Characters a full-view pack's header line may take beyond its artifact's name (flags are cut to fit)."""
_ROUNDS = 6


def reserve_for(name: str, full_view_chars: int) -> int:
    """The sparse budget held back for a fallback pack's own line: never more than L itself."""
    return min(full_view_chars, FULL_VIEW_RESERVE + len(name))


def exposure(pack_chars: int, budget: Budget | None, length: int, text_chars: int, admitted: bool) -> ExposureOut:
    """Exposure figures after this pack: ``admitted`` adds it to E (a sparse pack not yet in ``budget``)."""
    if budget is None:
        return ExposureOut(pack_chars=pack_chars, episode_exposed=0, full_view_chars=length, budget_left=length,
                           artifact_chars=text_chars)
    exposed = budget.sparse_exposed + (pack_chars if admitted else 0)
    left = 0 if budget.closed else max(0, budget.full_view_chars - budget.reserve - exposed)
    return ExposureOut(pack_chars=pack_chars, episode_exposed=exposed, full_view_chars=length, budget_left=left,
                       artifact_chars=text_chars)


def served_as(pack: EvidencePack, text: str, fmt: str) -> str:
    """What the agent is served: the finalized ``text``, or the same pack in the format it asked for."""
    return text if fmt == "text" else render_str(pack, fmt)


def finalize(pack: EvidencePack, budget: Budget | None, admitted: bool) -> str:
    """Render ``pack`` as text so the size and E it states are those of that text.

    A number's digit count can move the length it measures; when the rounds do
    not settle, the text is padded with spaces to the largest size it stated.
    """
    length, chars = pack.exposure.full_view_chars, artifact_chars(pack)
    sizes: list[int] = []
    text = render_str(pack, "text")
    for _ in range(_ROUNDS):
        sizes.append(len(text))
        pack.exposure = exposure(len(text), budget, length, chars, admitted)
        again = render_str(pack, "text")
        if len(again) == len(text):
            return again
        text = again
    pack.exposure = exposure(max(*sizes, len(text)), budget, length, chars, admitted)
    text = render_str(pack, "text")
    return text + " " * (pack.exposure.pack_chars - len(text))


def fit_to_budget(batch: Batch, measure: Callable[[list[EvidenceItem]], int], budget: int,
                  per_slot: bool = False) -> Batch:
    """Drop whole passages, weakest first, until the pack ``measure`` says they make fits ``budget``.

    Passages are never cut; a single passage is always kept, and with
    ``per_slot`` (collect) so is each slot's last passage. Coverage that
    pointed only at dropped passages becomes unresolved, with those anchors as
    the closest candidates (found, but not shown).
    """
    items = list(batch.items)
    while len(items) > 1 and measure(items) > budget:
        droppable = [item for item in items if not per_slot or _others_hold(item, items)]
        if not droppable:
            break
        items.remove(min(droppable, key=lambda item: item.score))
    if len(items) == len(batch.items):
        return batch
    kept = {item.anchor.label for item in items}
    coverage = tuple(_still_covered(cov, kept) for cov in batch.coverage)
    return replace(batch, items=tuple(items), coverage=coverage)


def _others_hold(item: EvidenceItem, items: list[EvidenceItem]) -> bool:
    """Every slot of ``item`` also has another passage among ``items``."""
    return all(any(j in other.slots for other in items if other is not item) for j in item.slots)


def _still_covered(cov: SlotCoverage, kept: set[str]) -> SlotCoverage:
    anchors = tuple(a for a in cov.anchors if a in kept)
    if cov.status == "unresolved" or anchors == cov.anchors:
        return cov
    if anchors:
        return replace(cov, anchors=anchors)
    return SlotCoverage(cov.slot, "unresolved", candidates=cov.anchors[:3])


def evidence_out(item: EvidenceItem) -> EvidenceOut:
    """The pack's view of one passage."""
    a = item.anchor
    lines = (a.line_start, a.line_end) if a.line_start is not None and a.line_end is not None else None
    span = (a.char_start, a.char_end) if a.char_end > a.char_start else None
    return EvidenceOut(
        anchor=a.label, span=span, lines=lines, heading=a.heading,
        slots=list(item.slots), stance=item.stance, text=item.text,
    )
