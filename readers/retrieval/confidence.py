"""How likely a slot's evidence is among the passages a pack shows: coverage as a calibrated promise.

A pack says ``matched`` only when the evidence is very likely there: the
probability below reaches the calibrated threshold of the Reader's family
(``readers/calibration.json``, key ``coverage``: one model fitted by
``scripts/calibrate_coverage.py`` on the calibration split of the dev sets, and
per family the threshold at which "matched" keeps a precision of at least 90%
on that family's calibration split; a family with no such threshold is never
promised ``matched``). Below it, passages that share the slot's words are ``candidate``:
the best found, not promised. A slot whose words the artifact mostly lacks, or
with nothing shown, is ``unresolved``.

The signals are lexical and cheap (one pass over the slot's few terms), so
every Reader that ranks units with a :class:`UnitIndex` can use them:

* ``found`` — the rarity-weighted share of the slot's content terms that occur
  anywhere in the artifact (a need the artifact does not mention is not there);
* ``best`` / ``shown`` — the same share in the best passage, and in all of the
  slot's passages together;
* ``top`` — the best unit's score over the sum of the slot's term weights;
* ``margin`` / ``ahead`` — how far the best unit stands above the fifth best, and the second;
* ``spread`` — how many standard deviations the best unit stands above the units that score;
* ``passages`` — how many passages the slot got (one strong passage beats several weak ones);
* ``terms`` — how many content terms the slot has (a one-word need matches too easily);
* ``broad`` — the slot asks for a discussion, a summary, reasons or opinions: its
  evidence is long and rarely fits one pack;
* ``phrase`` — the share of the slot's adjacent index-term pairs ("bovine coronavirus",
  "size [of] bovine") that stand adjacent in the best passage too (the index's stopwords
  skipped on both sides; question words such as "what" are terms there, and dropping them
  measured no better). Shared words scattered over a passage are weaker evidence than the
  slot's words as one phrase; 0 for a slot of fewer than two terms.
* ``structure`` — a fact of the artifact's structure, not of its words, that the slot's evidence is
  in view: the Reader's ``structure`` hook (``readers.retrieval.locate``). 1.0 when a filing's passages
  show, on each needed statement's own page, the rows the slot's metric is computed from
  (``readers.pdf.structure.rows_shown``); 0 for every other Reader and slot. The logistic model does
  not weigh it (its weight is 0: a word-overlap model was never fitted on it); a family may be
  calibrated to promise on it instead (``Model.structural``).

``phrase`` is what lifted the recall of "matched" at the same precision (issue 17,
docs/BENCHMARKS.md): on the calibration split it kept 61% of the packs holding the
evidence at 90% precision where the other signals stopped near 49%. Term proximity,
term density, the rarest term's presence, the best sentence's share of the slot's
weight, trigrams and MiniLM cosines were measured beside it and added nothing that held
on both splits.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import astuple, dataclass, field
from functools import cache
from importlib import resources
from itertools import pairwise
from typing import Literal

import numpy as np
import orjson

from readers.base import SlotCoverage
from readers.retrieval.bm25index import Scores, UnitIndex, content_tokens, term_hashes, tokenize

Status = Literal["matched", "candidate", "unresolved"]
TABLE_FILE = "calibration.json"
_BROAD = re.compile(
    r"\b(summari[sz]\w*|discuss\w*|talk\w* about|opinions?|think|thought|views?|why|reasons?|how did|"
    r"decid\w*|agree\w*|disagree\w*|debat\w*|concern\w*|overall|describe|explain\w*)\b",
    re.IGNORECASE,
)
FOUND_FLOOR = 0.35
"""Below this share of the slot's weight found anywhere in the artifact the slot is unresolved."""
MATCHED_FOUND_FLOOR = 0.5
"""Below this share a slot is at best a candidate, whatever the model says: the dev sets' questions are
about their documents, so the model never learned what a need the artifact half lacks looks like
("zeppelin fleet size" in a report on a truck fleet scored 0.72). Chosen on the calibration split:
precision of "matched" 90.2% -> 91.7% for recall 61.1% -> 59.9%."""


@dataclass(frozen=True)
class Signals:
    """What the locate saw of one slot (see the module docstring); all in [0, ~1]."""

    found: float
    best: float
    shown: float
    top: float
    margin: float
    ahead: float
    spread: float
    passages: float
    terms: float
    broad: float
    phrase: float
    structure: float = 0.0  # last, with a default: packs recorded before it still rebuild their Signals

    def vector(self) -> list[float]:
        return list(astuple(self))


NAMES = tuple(Signals.__dataclass_fields__)


def signals(index: UnitIndex, slot: str, raw: Scores | None, passages: Sequence[str], structure: float = 0.0
            ) -> Signals:
    """The signals of one slot, from its raw unit scores and the text of its passages (best first), and the
    Reader's structural signal."""
    stems = sorted(content_tokens(slot))
    weights = index.term_weights(term_hashes(stems)) if stems else np.zeros(0)
    total = float(weights.sum()) or 1.0
    present = weights * (index.term_presence(term_hashes(stems)) if stems else np.zeros(0))
    found = float(present.sum()) / total
    best = _share(stems, weights, passages[:1], total)
    shown = _share(stems, weights, passages, total)
    top, margin, ahead, spread = _top(raw, total)
    return Signals(found, best, shown, top, margin, ahead, spread, min(len(passages), 10) / 10,
                   min(len(stems), 10) / 10, float(bool(_BROAD.search(slot))), phrase_share(slot, passages[:1]),
                   structure)


def phrase_share(slot: str, passages: Sequence[str]) -> float:
    """The share of the slot's adjacent index-term pairs that stand adjacent in one of ``passages``."""
    pairs = _pairs(tokenize(slot))
    if not pairs or not passages:
        return 0.0
    held = set().union(*(_pairs(tokenize(p)) for p in passages))
    return len(pairs & held) / len(pairs)


def _pairs(tokens: Sequence[str]) -> set[tuple[str, str]]:
    return set(pairwise(tokens))


def _share(stems: list[str], weights: np.ndarray, passages: Sequence[str], total: float) -> float:
    held = set().union(*(content_tokens(p) for p in passages)) if passages else set()
    return float(sum(w for s, w in zip(stems, weights.tolist(), strict=True) if s in held)) / total


def _top(raw: Scores | None, total: float) -> tuple[float, float, float, float]:
    """(top, margin, ahead, spread) of the raw unit scores."""
    if raw is None or not len(raw) or float(raw.max()) <= 0:
        return 0.0, 0.0, 0.0, 0.0
    ranked = np.sort(raw)[::-1]
    first, second = float(ranked[0]), float(ranked[min(1, len(ranked) - 1)])
    fifth = float(ranked[min(4, len(ranked) - 1)])
    scoring = ranked[ranked > 0]
    spread = (first - float(scoring.mean())) / (float(scoring.std()) + 1e-9) if len(scoring) > 1 else 0.0
    return min(first / total, 2.0), (first - fifth) / first, (first - second) / first, min(spread, 10.0) / 10


@dataclass(frozen=True)
class Model:
    """A logistic model over the signals, and the thresholds that name the states.

    ``matched`` holds one threshold per Reader family the promise was calibrated for
    (``scripts/calibrate_coverage.py``: the lowest probability keeping 90% precision on that family's
    calibration split); ``structural`` the families promised on the ``structure`` signal instead, with
    the least value that promises (calibrated the same way: the signal's packs keep 90% precision on the
    family's calibration split, and a bootstrap over its documents supports it). A family with neither is
    never promised ``matched``, only ``candidate``."""

    weights: tuple[float, ...]
    bias: float
    matched: Mapping[str, float]
    candidate: float
    structural: Mapping[str, float] = field(default_factory=dict)

    def probability(self, sig: Signals) -> float:
        z = self.bias + sum(w * x for w, x in zip(self.weights, sig.vector(), strict=True))
        return 1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, z))))

    def threshold(self, family: str) -> float | None:
        """The probability ``family`` says matched from; None when it was never calibrated."""
        return self.matched.get(family)

    def promises(self, family: str, sig: Signals, p: float, verbatim: bool) -> bool:
        """Whether ``family`` says matched for these signals (probability ``p``): at its calibrated
        probability with the need mostly found in the artifact, or on its calibrated structural signal."""
        threshold = self.matched.get(family)
        if threshold is not None and p >= threshold and (sig.found >= MATCHED_FOUND_FLOOR or verbatim):
            return True
        least = self.structural.get(family)
        return least is not None and sig.structure >= least


@cache
def shipped_model() -> Model:
    """The calibrated model shipped in ``readers/calibration.json``."""
    table = orjson.loads(resources.files("readers").joinpath(TABLE_FILE).read_bytes())
    entry = table["coverage"]
    families = dict(entry["families"]).items()
    matched = {str(name): float(found["matched"]) for name, found in families if "matched" in found}
    structural = {str(name): float(found["structure"]) for name, found in families if "structure" in found}
    return Model(tuple(float(entry["weights"][n]) for n in NAMES), float(entry["bias"]), matched,
                 float(entry["candidate"]), structural)


def status_of(
    sig: Signals, shown_any: bool, model: Model | None = None, verbatim: bool = False, family: str = "text"
) -> tuple[Status, float]:
    """The state a slot earns for a Reader of ``family``, with its probability: unresolved with nothing shown
    or a need the artifact mostly lacks (``verbatim``: the passages hold the slot's words as written,
    whatever the index saw); matched only where ``family`` was calibrated."""
    chosen = model or shipped_model()
    p = chosen.probability(sig)
    if not shown_any or (sig.found < FOUND_FLOOR and not verbatim) or p < chosen.candidate:
        return "unresolved", p
    return ("matched" if chosen.promises(family, sig, p, verbatim) else "candidate"), p


def judge(slot: str, sig: Signals, anchors: Sequence[str], closest: Sequence[str],
          verbatim: bool = False, family: str = "text", leads: Sequence[str] = ()) -> SlotCoverage:
    """The slot's coverage for a Reader of ``family``: matched or candidate with its anchors, else unresolved
    with the Reader's ``leads`` and the closest units. The one place a Reader's coverage is decided
    (``readers.retrieval.locate``)."""
    status, p = status_of(sig, bool(anchors), verbatim=verbatim, family=family)
    shown = tuple(anchors) if status != "unresolved" else ()
    others = tuple(dict.fromkeys(c for c in (*leads, *closest) if c not in shown))[:3] if status != "matched" else ()
    led = tuple(c for c in others if c in leads)
    return SlotCoverage(slot, status, shown, others, round(p, 3), tuple(sig.vector()), family, verbatim, led)


def vouches(coverage: SlotCoverage, model: Model | None = None) -> bool:
    """Whether the calibrated judge, given what ``coverage`` records, says what it says: the check the
    conformance suite makes of every ``matched`` a Reader hands out."""
    if not coverage.signals or coverage.confidence is None:
        return False
    sig = Signals(*coverage.signals)
    status, _ = status_of(sig, bool(coverage.anchors), model, coverage.verbatim, coverage.judged_by)
    return status == coverage.status
