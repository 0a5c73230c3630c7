"""``@verify=<claim>``: passages that agree with a claim and passages that differ from it.

This is *lexical stance*, never a truth verdict: a passage "agrees" or
"differs" as found in the text, and the agent decides what that means.

1. The claim is parsed (:func:`readers.claims.stance.parse_claim`).
2. The Reader locates candidates for a query made of the claim's content
   words, its numbers and years, and the other spelling of each alias
   (direction and negation words are left out, so both stances rank alike),
   with :data:`CANDIDATE_FACTOR` times the pack budget (and 3k passages when
   ``k`` is given), in the Reader's ``&scope=`` (a bad scope raises the
   Reader's BadAnchor).
3. Each candidate is classified (:func:`readers.claims.stance.stance`);
   candidates with neither stance are dropped. Items stay the Reader's exact
   passages (same anchor and text), marked with ``stance`` and with slot 0
   (supporting) or 1 (contradicting).
4. Selection keeps both kinds within about ``max_chars`` of rendered evidence
   (text plus anchor line, :func:`cost`): each kind first fills up to half the
   budget, best first and alternating, then the rest is filled; a kind that got
   nothing (its passages too long) gets its best passage, dropping the other
   kind's weakest ones while more than one is left. Supporting passages come
   first, each kind best first; ``k`` caps the count.

Coverage has exactly two entries, ``supporting: <claim>`` and
``contradicting: <claim>``: matched with anchors (a passage of that stance was
found: the stance rule, the one "matched" not given by the calibrated judge,
``judged_by="stance"``), or unresolved with the best other candidates. The
scope is the Reader's, with method ``...+claim-check`` and a note counting the
classified candidates. Flag ``claim-without-numbers``: the check was by terms
and polarity only.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace

import numpy as np

from readers.base import Batch, EvidenceItem, Parsed, Reader, ReadIntent, Scope, SlotCoverage
from readers.claims.stance import STANCES, Claim, Stance, claim_query, parse_claim, stance, with_key_term
from readers.retrieval.bm25index import UnitIndex

CANDIDATE_FACTOR = 4
"""Candidates are located with this many times the pack budget, so both stances can turn up."""
ITEM_OVERHEAD = 24
"""Characters a rendered item adds besides its text, label and heading (``[n] ... (slot 1)``)."""
METHOD_SUFFIX = "+claim-check"
STANCE_RULE = "stance"
"""``SlotCoverage.judged_by`` of a stance found: matched by the lexical stance rule, not by the judge."""
Picks = dict[Stance, list[EvidenceItem]]

# -- verify ---------------------------------------------------------------------


def verify(
    reader: Reader,
    parsed: Parsed,
    claim: str,
    max_chars: int,
    exclude: Sequence[tuple[int, int]] = (),
    k: int | None = None,
    scope: str | None = None,
) -> Batch:
    """Supporting and contradicting passages for ``claim``, about ``max_chars`` in all."""
    parsed_claim = _key_term(parse_claim(claim), parsed)
    query = claim_query(parsed_claim)
    intent = ReadIntent(query, (query,), scope)
    base = reader.locate(parsed, intent, max_chars * CANDIDATE_FACTOR, exclude, None if k is None else min(50, 3 * k))
    judged = [(item, stance(parsed_claim, item.text, item.anchor.heading))
              for item in base.items if not _overlaps(item, exclude)]
    marked = [replace(item, stance=s, slots=(STANCES.index(s),)) for item, s in judged if s is not None]
    chosen = choose(marked, max_chars, k)
    flags = base.flags + (() if parsed_claim.amounts else ("claim-without-numbers",))
    return Batch(tuple(chosen), _scope(base.scope, judged), _coverage(claim, chosen, base.items), flags)


def _key_term(claim: Claim, parsed: Parsed) -> Claim:
    """The claim with its rarest term required, when the Reader keeps a BM25 index of units."""
    index = parsed.data.get("index")
    if not isinstance(index, UnitIndex):
        return claim
    return with_key_term(claim, lambda words: int(np.count_nonzero(index.scores(words))))


def _overlaps(item: EvidenceItem, exclude: Sequence[tuple[int, int]]) -> bool:
    a = item.anchor
    return a.char_end > a.char_start and any(a.char_start < end and start < a.char_end for start, end in exclude)


def _scope(scope: Scope, judged: list[tuple[EvidenceItem, Stance | None]]) -> Scope:
    counts = [sum(s == name for _, s in judged) for name in (*STANCES, None)]
    note = (f"{len(judged)} candidate passages classified by lexical stance: {counts[0]} agree, "
            f"{counts[1]} differ, {counts[2]} neither (not a truth verdict)")
    return replace(scope, method=scope.method + METHOD_SUFFIX, note=f"{scope.note}; {note}" if scope.note else note)


def _coverage(
    claim: str, chosen: Sequence[EvidenceItem], candidates: Sequence[EvidenceItem]
) -> tuple[SlotCoverage, ...]:
    out = []
    shown = {item.anchor.label for item in chosen}
    for name in STANCES:
        mine = tuple(item.anchor.label for item in chosen if item.stance == name)
        slot = f"{name}: {claim}"
        if mine:  # the stance rule, the one "matched" the calibrated judge does not give (readers.base)
            out.append(SlotCoverage(slot, "matched", anchors=mine, judged_by=STANCE_RULE))
            continue
        others = sorted((c for c in candidates if c.anchor.label not in shown), key=lambda c: -c.score)
        labels = tuple(dict.fromkeys(c.anchor.label for c in others))[:3]
        out.append(SlotCoverage(slot, "unresolved", candidates=labels))
    return tuple(out)


# -- selection ------------------------------------------------------------------


def cost(item: EvidenceItem) -> int:
    """Rendered size of an item: its text plus its anchor line."""
    return len(item.text) + len(item.anchor.label) + len(item.anchor.heading or "") + ITEM_OVERHEAD


def choose(items: Sequence[EvidenceItem], max_chars: int, k: int | None = None) -> list[EvidenceItem]:
    """Both stances within about ``max_chars``: supporting first, each kind best first (see module doc)."""
    kinds = {name: sorted((i for i in items if i.stance == name), key=lambda i: -i.score) for name in STANCES}
    picked: Picks = {name: [] for name in STANCES}
    limit = k or len(items)
    half = max_chars // 2 if all(kinds.values()) else max_chars
    for share in (half, max_chars):
        for item in _alternating(kinds):
            _take(picked, item, share, max_chars, limit)
    if limit > 1:
        for name in STANCES:
            _rescue(picked, kinds, name, max_chars, limit)
    return [item for name in STANCES for item in sorted(picked[name], key=lambda i: -i.score)]


def _alternating(kinds: Picks) -> Iterator[EvidenceItem]:
    for rank in range(max(map(len, kinds.values()), default=0)):
        for name in STANCES:
            if rank < len(kinds[name]):
                yield kinds[name][rank]


def _take(picked: Picks, item: EvidenceItem, share: int, budget: int, limit: int) -> None:
    mine = picked[item.stance or "supporting"]
    used = sum(cost(i) for kind in picked.values() for i in kind)
    if item in mine or sum(map(len, picked.values())) >= limit:
        return
    if sum(map(cost, mine)) + cost(item) <= share and used + cost(item) <= budget:
        mine.append(item)


def _rescue(picked: Picks, kinds: Picks, name: Stance, budget: int, limit: int) -> None:
    """A kind with candidates but nothing picked gets its best, at the other kind's weakest's expense."""
    if picked[name] or not kinds[name]:
        return
    best, other = kinds[name][0], picked[STANCES[1 - STANCES.index(name)]]
    while len(other) > 1 and (sum(map(cost, other)) + cost(best) > budget or len(other) >= limit):
        other.remove(min(other, key=lambda i: i.score))
    picked[name].append(best)
