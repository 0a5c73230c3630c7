"""What each protocol action asks of a Reader (Algorithm 1, r.Prepare).

The five actions keep distinct meanings over every Reader:

* ``intent``  — the best evidence for the need within the pack budget; weak
  passages are the first to go when the budget is tight;
* ``collect`` — evidence for *every* slot: each slot is located on its own
  share of the budget and keeps at least its best passage, so one strong slot
  never crowds out another;
* ``refine``  — more of the same episode: spans already delivered are excluded
  (passages without a span, such as PDF tables, by anchor);
* ``verify``  — supporting and contradicting passages for a claim; passages the
  episode already delivered are cited by anchor, not sent again;
* ``focus``   — the anchored region, whole (``scout`` is the Object Preview and
  never reaches a Reader's locate).

Exact operations (``@sum`` …) run ``Reader.operate``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from readers.base import Batch, EvidenceItem, Parsed, Reader, ReadIntent, Scope, SlotCoverage
from readers.claims.verify import verify
from readers.ops import OPERATIONS, build_operation
from sparsefs.protocol.episodes import Episode
from sparsefs.protocol.grammar import VirtualRequest
from sparsefs.protocol.intents import ResolvedIntent

Span = tuple[int, int]


@dataclass(frozen=True)
class Prepared:
    """A batch plus the anchors of evidence this episode delivered before (cited, not re-sent)."""

    batch: Batch
    earlier: dict[int, tuple[str, ...]]  # coverage index -> anchors delivered earlier


def prepare(
    reader: Reader, parsed: Parsed, request: VirtualRequest, resolved: ResolvedIntent, episode: Episode,
    max_chars: int,
) -> Prepared:
    action, argument = request.action, request.argument or ""
    if action == "focus":
        return Prepared(reader.focus(parsed, argument), {})
    if action in OPERATIONS:
        operation = build_operation(action, request.argument, request.options, request.k)
        return Prepared(reader.operate(parsed, operation, max_chars), {})
    if action == "verify":
        return verified(reader, parsed, argument, max_chars, episode, request)
    intent = ReadIntent(resolved.text or argument, resolved.slots, request.scope, resolved.context, resolved.method)
    if action == "collect":
        return Prepared(collect(reader, parsed, intent, max_chars, (), request.k), {})
    if action == "refine":
        batch = reader.locate(parsed, intent, max_chars, episode.spans, request.k)
        return Prepared(without_repeats(batch, episode), {})
    return Prepared(reader.locate(parsed, intent, max_chars, (), request.k), {})


# -- collect -----------------------------------------------------------------------


def collect(
    reader: Reader, parsed: Parsed, intent: ReadIntent, max_chars: int, exclude: Sequence[Span], k: int | None
) -> Batch:
    """Each slot located on its own share; passages found for several slots are sent once."""
    slots = intent.slots or (intent.text,)
    share = max(1, max_chars // len(slots))
    merged: list[EvidenceItem] = []
    coverage: list[SlotCoverage] = []
    scope: Scope | None = None
    flags: list[str] = []
    for j, slot in enumerate(slots):
        one = ReadIntent(slot, (slot,), intent.scope, intent.context, intent.method)
        batch = reader.locate(parsed, one, share, exclude, k)
        scope = scope or batch.scope
        flags += [f for f in batch.flags if f not in flags]
        labels = [_merge(merged, replace(item, slots=(j,))) for item in batch.items]
        coverage.append(_slot_coverage(slot, batch.coverage, dict(zip(_labels(batch), labels, strict=True))))
    if len(flags) and "no-content-words" in flags and any(c.status == "matched" for c in coverage):
        flags.remove("no-content-words")  # one slot of stopwords does not make the request underspecified
    assert scope is not None
    note = f"collected per slot ({len(slots)} slots, ~{share:,} chars each)"
    return Batch(tuple(merged), replace(scope, note=_join_note(scope.note, note)), tuple(coverage), tuple(flags))


def _labels(batch: Batch) -> list[str]:
    return [item.anchor.label for item in batch.items]


def _merge(merged: list[EvidenceItem], item: EvidenceItem) -> str:
    """Add ``item`` unless it repeats a kept passage; return the label that now holds it."""
    for n, kept in enumerate(merged):
        if _same_evidence(kept, item):
            slots = tuple(sorted({*kept.slots, *item.slots}))
            merged[n] = replace(kept, slots=slots, score=max(kept.score, item.score))
            return kept.anchor.label
    merged.append(item)
    return item.anchor.label


def _same_evidence(a: EvidenceItem, b: EvidenceItem) -> bool:
    sa, sb = a.anchor, b.anchor
    if sa.char_end > sa.char_start and sb.char_end > sb.char_start:
        return sa.char_start < sb.char_end and sb.char_start < sa.char_end  # overlapping spans
    return sa.label == sb.label


def _slot_coverage(slot: str, found: tuple[SlotCoverage, ...], relabel: dict[str, str]) -> SlotCoverage:
    if not found:
        return SlotCoverage(slot, "unresolved")
    cov = found[0]
    anchors = tuple(dict.fromkeys(relabel.get(a, a) for a in cov.anchors))
    return replace(cov, slot=slot, anchors=anchors)  # the judge's record stays with its state


def _join_note(first: str, second: str) -> str:
    return f"{first}; {second}" if first else second


# -- verify ------------------------------------------------------------------------


def verified(
    reader: Reader, parsed: Parsed, claim: str, max_chars: int, episode: Episode, request: VirtualRequest
) -> Prepared:
    """Supporting and contradicting evidence; what the episode already holds is cited by anchor.

    A passage overlapping anything the episode delivered is not sent again: the
    coverage line cites the delivered passages it overlaps (``delivered earlier``).
    """
    batch = verify(reader, parsed, claim, max_chars, (), request.k, request.scope)
    held = {id(item): _held_labels(item, episode) for item in batch.items}
    if not any(held.values()):
        return Prepared(batch, {})
    fresh = tuple(item for item in batch.items if not held[id(item)])
    earlier: dict[int, tuple[str, ...]] = {}
    coverage = []
    for n, cov in enumerate(batch.coverage):
        mine = [item for item in batch.items if item.anchor.label in cov.anchors]
        earlier[n] = tuple(dict.fromkeys(label for item in mine for label in held[id(item)]))
        kept = tuple(a for a in cov.anchors if any(a == item.anchor.label for item in fresh))
        coverage.append(replace(cov, anchors=kept))
    return Prepared(replace(batch, items=fresh, coverage=tuple(coverage)), earlier)


def _held_labels(item: EvidenceItem, episode: Episode) -> list[str]:
    """Labels of the delivered passages ``item`` overlaps (a span-less result: its own label, if delivered)."""
    a = item.anchor
    if a.char_end <= a.char_start:
        return [a.label] if a.label in episode.anchors else []
    return [label for label, start, end in episode.passages if start < a.char_end and a.char_start < end]


# -- refine ------------------------------------------------------------------------


def without_repeats(batch: Batch, episode: Episode) -> Batch:
    """Refine never re-exposes: results without a span (a PDF table) are matched by anchor."""
    seen = set(episode.anchors)
    items = tuple(i for i in batch.items if i.anchor.char_end > i.anchor.char_start or i.anchor.label not in seen)
    return batch if len(items) == len(batch.items) else replace(batch, items=items)
