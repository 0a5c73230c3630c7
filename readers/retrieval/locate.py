"""The one locate pipeline of every ranking Reader (Reader contract v2, issue 27).

A Reader that ranks passages subclasses :class:`RankingReader` and supplies small hooks; its ``locate``
is this module's and may not be overridden (the class refuses it). The pipeline, in order::

    units in scope (hook: units)          the UnitView: offsets, the index that scores them, the Scope
    slots -> their terms (hook: slot_terms)
    rank by the intent's method           readers.retrieval.methods (lexical, bm25, hybrid, region)
      [expand]                            query expansion: the document's own other forms of the slot's words
      (hook: adjustment.raw)              e.g. the Code Reader lifts a named symbol's definition
    adjustment.lift / .weight             structure boosts (a filing's statement pages), demotions
    [rerank]                              a shortlist reranker over the ranking
    extra items (hook: extras)            e.g. a PDF's tables, out of the same budget
    choose units within the budget        readers.retrieval.methods.choose_units
      [extend]                            ... chosen with the whole they belong to (the sentence a piece is of)
    runs -> anchored passages (hooks: runs, anchor)
    coverage (hooks: label, leads,        judged once, here, by the calibrated judge
      structure)

The bracketed stages are :class:`Stages`, set per Reader (``RankingReader.stages``) or for all
(:data:`PIPELINE`), so an improvement to one of them reaches every ranking Reader at once. PIPELINE runs
:func:`own_vocabulary` (expand) and :func:`whole_sentences` (extend), measured per family on the
calibration split (docs/BENCHMARKS.md, issue 27: neutral or better on every family; a family whose units
are not sentences is left as it was by construction). No reranker ships (no PyPI wheel carries one).

Coverage is built in one place (:func:`judged`): every slot's state comes from
:func:`readers.retrieval.confidence.judge` for the Reader's ``family``, which says ``matched`` only for a
family it was calibrated on. A passage counts as a slot's when it scores > 0 and shares a content word
with it (``verbatim``, the lexical method: the score already says it holds one as written); an unresolved
slot names the Reader's ``leads`` first, then the best-scoring units not shown and not excluded.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, final

import numpy as np

from readers.base import Anchor, Batch, EvidenceItem, Parsed, Reader, ReadIntent, Scope, SlotCoverage
from readers.retrieval.bm25index import Mask, Offsets, Scores, Selection, UnitIndex, blocked_mask, content_tokens
from readers.retrieval.confidence import judge, signals
from readers.retrieval.definitions import defining, definition_question, lifted
from readers.retrieval.expand import adjust_for, glossary_of, other_forms
from readers.retrieval.extend import choose_sentences, groups_of
from readers.retrieval.methods import DEFAULT_METHOD, METHODS, Adjust, Ranking, choose_units, rank_units

CANDIDATES = 3
"""Closest units an unresolved slot names."""
NO_CONTENT = "no-content-words"


@dataclass(frozen=True, eq=False)
class UnitView:
    """The units one locate may pick from.

    ``starts``/``ends`` are the units' offsets into the full view, in document order; ``first`` is
    where the first of them sits in the index ``index()`` returns (built on first use: a read
    without content words never builds one); ``ids`` are their ids in the artifact's dense cache
    when those are not ``first, first + 1, ...``; ``silent`` units never score (a PDF's page markers);
    ``span`` is the part of the full view the view covers; ``empty`` the flag of a view without a unit
    that can score (a scope without text, a sheet without rows).
    """

    starts: Offsets
    ends: Offsets
    first: int
    scope: Scope
    index: Callable[[], UnitIndex]
    ids: Offsets | None = None
    silent: Mask | None = None
    span: tuple[int, int] = (0, 0)
    empty: str = "no-units"

    def live(self) -> int:
        """Units that can score."""
        return len(self.starts) - (int(np.count_nonzero(self.silent)) if self.silent is not None else 0)


@dataclass(frozen=True, eq=False)
class Adjustment:
    """How a Reader changes the ranking, whatever the method: ``raw(j, scores)`` changes slot j's raw unit
    scores before they are ranked (and judged); ``lift`` (per unit in view) adds that share of each slot's
    best ranked score to the units that already score (a structure boost: a filing's statement pages);
    ``weight`` (per unit) multiplies the ranked scores (a demotion below 1: boilerplate). ``flag`` is said
    in the pack when the adjustment changed anything."""

    raw: Adjust | None = None
    lift: Scores | None = None
    weight: Scores | None = None
    flag: str = ""


NO_ADJUSTMENT = Adjustment()


@dataclass(frozen=True, eq=False)
class Found:
    """What the ranking found: the slots and their content words, the index, the ranking, the blocked units."""

    intent: ReadIntent
    slots: tuple[str, ...]
    contents: tuple[frozenset[str], ...]
    index: UnitIndex
    ranking: Ranking
    blocked: Mask


@dataclass(frozen=True)
class Extras:
    """Items a Reader adds beside its passages (a PDF's tables): they come out of the same budget."""

    items: tuple[EvidenceItem, ...] = ()
    flags: tuple[str, ...] = ()
    method: str = ""  # appended to the scope's method when items came ("+find_tables")


Expand = Callable[[Parsed, UnitView, ReadIntent, UnitIndex], Adjust | None]
"""Query expansion: a change to each slot's raw unit scores (``Adjust``, before the Reader's own) from what
the slot means in this document (the other form of a word it defines); None: none for this read. The
slots stay as asked: the judge judges them, over the expanded scores."""
Rerank = Callable[[Parsed, UnitView, Found], Ranking]
"""A shortlist reranker: a new ranking (``ranked`` scores) from what the method found."""
Extend = Callable[[Parsed, UnitView], Offsets | None]
"""Passage extension: per unit in view, the whole it is chosen with (units of one group are chosen
together, scored as their best, within the same budget: the pieces of one sentence); None: each alone."""


@dataclass(frozen=True)
class Stages:
    """The pipeline's optional stages (module docstring); None skips a stage."""

    expand: Expand | None = None
    rerank: Rerank | None = None
    extend: Extend | None = None


def own_vocabulary(parsed: Parsed, view: UnitView, intent: ReadIntent, index: UnitIndex) -> Adjust | None:
    """The expand stage: the other forms the document defines of a slot's words add their scores
    (readers.retrieval.expand), then a "What is X?" slot lifts the units that define X in either form
    (readers.retrieval.definitions). Not for the lexical method: its scores promise the words as written."""
    if intent.method == "lexical":
        return None
    slots = dict(enumerate(intent.slots or (intent.text,)))
    words = glossary_of(parsed.data, parsed.full_view)
    expand = adjust_for(index, words, slots, slice(view.first, view.first + len(view.starts)))
    shapes = {j: shape for j, slot in slots.items()
              if (x := definition_question(slot)) and (shape := defining([x, *other_forms(x, words)]))}
    if not shapes:
        return expand
    text = parsed.full_view

    def texts_of(units: list[int]) -> list[str]:
        return [text[int(view.starts[u]) : int(view.ends[u])] for u in units]

    def define(j: int, raw: Scores) -> Scores:
        return lifted(raw, shapes[j], texts_of) if j in shapes else raw

    return _then(expand, define)


def whole_sentences(parsed: Parsed, view: UnitView) -> Offsets | None:
    """The extend stage: in a view of sentences, the pieces of one sentence the segmenter cut at its unit
    cap are chosen together (readers.retrieval.extend); rows, cells, values, lines and line groups are
    whole units already (None)."""
    starts, ends = parsed.data.get("unit_starts"), parsed.data.get("unit_ends")
    if view.scope.unit != "sentences" or view.ids is not None or not isinstance(starts, np.ndarray) \
            or not isinstance(ends, np.ndarray):
        return None
    group: Offsets = groups_of(parsed.data, parsed.full_view, starts, ends)[view.first : view.first + len(view.starts)]
    return group


PIPELINE = Stages(expand=own_vocabulary, extend=whole_sentences)
"""The stages every ranking Reader runs unless it sets its own ``stages``."""


class RankingReader(Reader):
    """A Reader that answers an intent by ranking units of its full view: hooks in, one ``locate`` out."""

    methods = frozenset(METHODS)
    stages: Stages | None = None  # None: PIPELINE

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "locate" in cls.__dict__:
            raise TypeError(f"{cls.__name__} overrides locate: a ranking Reader supplies hooks (readers.retrieval"
                            ".locate), the pipeline is shared")

    @property
    def default_method(self) -> str:
        """The method a read gets when it names none this Reader declares (bm25 if declared)."""
        return DEFAULT_METHOD if DEFAULT_METHOD in self.methods else min(self.methods)

    @property
    def family(self) -> str:
        """Whose calibration judges this Reader's coverage (``readers/calibration.json``): its name."""
        return self.name

    @final
    def locate(
        self, parsed: Parsed, intent: ReadIntent, max_chars: int, exclude: Sequence[tuple[int, int]] = (),
        k: int | None = None,
    ) -> Batch:
        return locate(self, parsed, intent, max_chars, exclude, k)

    # -- hooks -----------------------------------------------------------------------

    @abstractmethod
    def units(self, parsed: Parsed, scope: str | None) -> UnitView:
        """The units in ``scope`` (the Reader's anchor syntax; None: all); BadAnchor when it does not resolve."""

    @abstractmethod
    def anchor(self, parsed: Parsed, view: UnitView, run: Sequence[int]) -> Anchor:
        """The anchor of a passage made of the consecutive units ``run`` (positions in ``view``); its span is
        the passage's text in the full view."""

    def runs(self, parsed: Parsed, view: UnitView, run: list[int]) -> list[list[int]]:
        """A run of chosen neighbours cut where one passage must not cross (a sheet, non-adjacent values)."""
        return [run]

    def label(self, parsed: Parsed, view: UnitView, unit: int) -> str:
        """What a candidate names for one unit (a place to @focus on)."""
        return self.anchor(parsed, view, [unit]).label

    def slot_terms(self, parsed: Parsed, slot: str) -> frozenset[str]:
        """A slot's content words (a Reader may count more: symbol names)."""
        return content_tokens(slot)

    def adjustment(self, parsed: Parsed, view: UnitView, intent: ReadIntent) -> Adjustment:
        """Score adjustments for this read (:class:`Adjustment`); none by default."""
        return NO_ADJUSTMENT

    def extras(self, parsed: Parsed, view: UnitView, found: Found, budget: int,
               exclude: Sequence[tuple[int, int]]) -> Extras:
        """Items beside the passages, within ``budget`` characters; none by default."""
        return Extras()

    def leads(self, parsed: Parsed, items: Sequence[EvidenceItem], intent: ReadIntent) -> tuple[str, ...]:
        """Anchors an unresolved or candidate slot names before its closest units (a statement page no
        passage cites); none by default."""
        return ()

    def flags(self, parsed: Parsed, view: UnitView) -> tuple[str, ...]:
        """Flags every answer over this view carries (pages without text, a symbol index's limits)."""
        return ()

    def structure(self, parsed: Parsed, slot: str, items: Sequence[EvidenceItem]) -> float:
        """The ``structure`` signal of a slot whose passages are ``items`` (best first): 1.0 when the
        artifact's structure says they hold what the slot asks (a filing's statement rows), which word
        overlap cannot see; 0 by default. The judge promises on it only for a family calibrated to."""
        return 0.0


# -- the pipeline ----------------------------------------------------------------------------


def locate(
    reader: RankingReader, parsed: Parsed, intent: ReadIntent, max_chars: int,
    exclude: Sequence[tuple[int, int]] = (), k: int | None = None,
) -> Batch:
    """The module docstring's pipeline, for one read."""
    if intent.method not in reader.methods:
        intent = replace(intent, method=reader.default_method)
    view = reader.units(parsed, intent.scope)
    flags = reader.flags(parsed, view)
    slots = intent.slots or (intent.text,)
    contents = tuple(reader.slot_terms(parsed, slot) for slot in slots)
    if not any(contents) or not view.live():
        return unresolved(intent, view.scope, (*flags, NO_CONTENT if not any(contents) else view.empty))
    stages = reader.stages or PIPELINE
    found = _ranked(reader, parsed, view, intent, slots, contents, exclude, stages)
    extra = reader.extras(parsed, view, found, max_chars, exclude)
    budget = max_chars - sum(len(item.text) for item in extra.items)
    found = _beside(view, found, extra.items)
    selection = _chosen(parsed, view, found, stages, budget, k)
    items = sorted([*passages(reader, parsed, view, selection), *extra.items],
                   key=lambda it: (it.anchor.char_start, it.anchor.char_end))
    coverage = judged(reader, parsed, view, found, items)
    method = found.ranking.method + (extra.method if extra.items else "")
    return Batch(tuple(items), replace(view.scope, method=method), coverage,
                 (*flags, *extra.flags, *found.ranking.flags))


def _ranked(
    reader: RankingReader, parsed: Parsed, view: UnitView, intent: ReadIntent, slots: tuple[str, ...],
    contents: tuple[frozenset[str], ...], exclude: Sequence[tuple[int, int]], stages: Stages,
) -> Found:
    """Rank the view's units for the slots with content words (expanded, adjusted, reranked)."""
    index = view.index()
    blocked = blocked_mask(view.starts, view.ends, exclude)
    if view.silent is not None:
        blocked |= view.silent
    searched = {j: slots[j] for j in range(len(slots)) if contents[j]}
    adjustment = reader.adjustment(parsed, view, intent)
    expand = stages.expand(parsed, view, intent, index) if stages.expand is not None else None
    units = (view.starts, view.ends, view.first)
    ranking = rank_units(parsed, index, units, intent, searched, blocked, view.silent,
                         _then(expand, adjustment.raw), view.ids)
    found = Found(intent, slots, contents, index, _adjusted(ranking, adjustment), blocked)
    if stages.rerank is not None:
        found = replace(found, ranking=stages.rerank(parsed, view, found))
    return found


def _beside(view: UnitView, found: Found, items: Sequence[EvidenceItem]) -> Found:
    """The units an extra item already shows (its span) are not chosen again as passages."""
    spans = [(it.anchor.char_start, it.anchor.char_end) for it in items if it.anchor.char_end > it.anchor.char_start]
    if not spans:
        return found
    return replace(found, blocked=found.blocked | blocked_mask(view.starts, view.ends, spans))


def _then(first: Adjust | None, second: Adjust | None) -> Adjust | None:
    """One raw-score adjustment made of two, ``first`` first."""
    if first is None or second is None:
        return first or second
    return lambda j, raw: second(j, first(j, raw))


def _chosen(parsed: Parsed, view: UnitView, found: Found, stages: Stages, budget: int, k: int | None) -> Selection:
    """The units to show within ``budget``: each alone, or with the whole the extend stage says it is of."""
    units = (view.starts, view.ends, view.first)
    group = stages.extend(parsed, view) if stages.extend is not None else None
    if group is None:
        return choose_units(found.ranking, found.index, units, found.blocked, budget, k)
    return choose_sentences(found.ranking, found.index, units, found.blocked, budget, k, group)


def _adjusted(ranking: Ranking, adjustment: Adjustment) -> Ranking:
    """The ranked scores with the adjustment's lift and weight (raw scores stay what the method gave)."""
    if adjustment.lift is None and adjustment.weight is None:
        return ranking
    ranked: dict[int, Scores] = {}
    for slot, scores in ranking.ranked.items():
        top = float(scores.max()) if len(scores) else 0.0
        lifted = scores + top * adjustment.lift * (scores > 0) if adjustment.lift is not None else scores
        ranked[slot] = lifted * adjustment.weight if adjustment.weight is not None else lifted
    flags = (*ranking.flags, adjustment.flag) if adjustment.flag else ranking.flags
    return replace(ranking, ranked=ranked, flags=flags)


def passages(reader: RankingReader, parsed: Parsed, view: UnitView, selection: Selection) -> list[EvidenceItem]:
    """One item per run of chosen units (cut where the Reader says), anchored by the Reader, in order."""
    items: list[EvidenceItem] = []
    for run in selection.passages():
        for part in reader.runs(parsed, view, run):
            anchor = reader.anchor(parsed, view, part)
            text = parsed.full_view[anchor.char_start : anchor.char_end]
            items.append(EvidenceItem(anchor, text, run_score(selection, part), run_slots(selection, part)))
    return items


def unresolved(intent: ReadIntent, scope: Scope, flags: tuple[str, ...] = ()) -> Batch:
    """The answer to a read with nothing to search: no passages, every slot unresolved."""
    slots = intent.slots or (intent.text,)
    return Batch((), scope, tuple(SlotCoverage(slot, "unresolved") for slot in slots), flags)


def run_score(selection: Selection, run: Sequence[int]) -> float:
    """A passage's score: its best unit's, rounded as packs show it."""
    return round(max(selection.best.get(u, 0.0) for u in run), 4)


def run_slots(selection: Selection, run: Sequence[int]) -> tuple[int, ...]:
    """The slots a passage serves: those of any of its units."""
    return tuple(sorted(set().union(*(selection.slots.get(u, set()) for u in run))))


# -- coverage, in one place ------------------------------------------------------------------


def judged(
    reader: RankingReader, parsed: Parsed, view: UnitView, found: Found, items: Sequence[EvidenceItem],
) -> tuple[SlotCoverage, ...]:
    """One entry per slot, each judged by the calibrated judge of the Reader's family."""
    leads = reader.leads(parsed, items, found.intent)
    hidden = found.blocked | _shown(view, items)
    verbatim = found.ranking.verbatim
    out = []
    for j, slot in enumerate(found.slots):
        raw = found.ranking.raw.get(j)
        mine = _slot_items(items, j, found.contents[j], verbatim)
        closest = closest_labels(raw, lambda u: reader.label(parsed, view, u), hidden)
        sig = signals(found.index, slot, raw, [it.text for it in mine], reader.structure(parsed, slot, mine))
        out.append(judge(slot, sig, [it.anchor.label for it in mine], closest, verbatim, reader.family, leads))
    return tuple(out)


def _slot_items(items: Sequence[EvidenceItem], j: int, content: frozenset[str], verbatim: bool) -> list[EvidenceItem]:
    """Slot j's passages, best first; none when the best does not score or shares no content word."""
    mine = sorted((it for it in items if j in it.slots), key=lambda it: -it.score)
    if mine and mine[0].score > 0 and (verbatim or content & content_tokens(mine[0].text)):
        return mine
    return []


def _shown(view: UnitView, items: Sequence[EvidenceItem]) -> Mask:
    """Units inside a passage this answer shows (a candidate names a place the agent has not seen)."""
    mask: Mask = np.zeros(len(view.starts), dtype=np.bool_)
    for item in items:
        a = item.anchor
        if a.char_end > a.char_start:
            mask |= (view.starts >= a.char_start) & (view.ends <= a.char_end)
    return mask


def closest_labels(
    raw: Scores | None, label_of: Callable[[int], str], blocked: Mask | None = None, n: int = CANDIDATES
) -> tuple[str, ...]:
    """Labels of the best-scoring units (raw, unsmoothed scores > 0), distinct, at most ``n``, none of a
    ``blocked`` unit: where an unresolved slot's evidence most likely is."""
    if raw is None:
        return ()
    labels: list[str] = []
    for u in np.argsort(-raw, kind="stable")[: 4 * n].tolist():
        if raw[u] > 0 and (blocked is None or not blocked[u]):
            label = label_of(u)
            if label not in labels:
                labels.append(label)
    return tuple(labels[:n])

