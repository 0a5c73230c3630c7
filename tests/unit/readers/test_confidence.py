"""The coverage judge's signals and shipped model (readers/retrieval/confidence.py, issue 17)."""

from __future__ import annotations

import importlib
import json
import sys
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from readers.base import ReadIntent
from readers.kit.source import MemorySource
from readers.retrieval.bm25index import UnitIndex
from readers.retrieval.confidence import NAMES, Model, Signals, phrase_share, shipped_model, signals, status_of
from readers.text import TextReader

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))


def _calibration(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """scripts/calibrate_coverage.py, imported without leaving its SPARSEFS_DENSE_WARMUP=0 behind."""
    monkeypatch.setenv("SPARSEFS_DENSE_WARMUP", "0")
    return importlib.import_module("calibrate_coverage")


def test_phrase_counts_the_slots_term_pairs_that_stand_together() -> None:
    slot = "the size of bovine coronavirus"  # index terms: size, bovin, coronavirus
    assert phrase_share(slot, ["The size of the bovine coronavirus genome is 31 kb."]) == 1.0
    assert phrase_share(slot, ["Bovine coronavirus has a genome size of 31 kb."]) == 0.5
    assert phrase_share(slot, ["Size matters. Cattle carry a coronavirus. Bovine herds are large."]) == 0.0
    # "what" is an index term (bm25s keeps it), so a question's first pair rarely stands in a passage
    assert phrase_share(f"What is {slot}?", ["The size of the bovine coronavirus genome is 31 kb."]) == 2 / 3


def test_phrase_is_zero_without_a_pair_or_a_passage() -> None:
    assert phrase_share("coronavirus?", ["the coronavirus spreads"]) == 0.0
    assert phrase_share("bovine coronavirus", []) == 0.0


def test_signals_take_the_phrase_from_the_best_passage_only() -> None:
    units = ["bovine coronavirus is an enveloped virus", "the herd was small", "cattle and a coronavirus"]
    index = UnitIndex(units)
    raw = index.scores("bovine coronavirus")
    best_first = signals(index, "bovine coronavirus", raw, [units[0], units[2]])
    scattered_first = signals(index, "bovine coronavirus", raw, [units[2], units[0]])
    assert best_first.phrase == 1.0 and scattered_first.phrase == 0.0
    assert best_first.shown == scattered_first.shown  # the passages together hold the same words


def test_the_shipped_model_promises_more_for_the_slots_words_as_a_phrase() -> None:
    sig = Signals(found=1.0, best=0.8, shown=0.9, top=0.6, margin=0.5, ahead=0.3, spread=0.5, passages=0.4,
                  terms=0.4, broad=0.0, phrase=0.0)
    model = shipped_model()
    assert model.probability(replace(sig, phrase=1.0)) > model.probability(sig)
    assert 0.0 < (model.threshold("text") or 0.0) < 1.0
    assert model.threshold("no-such-family") is None  # never calibrated: never promised


def test_matched_needs_the_threshold_and_a_need_the_artifact_mentions() -> None:
    model = shipped_model()
    threshold = model.threshold("text")
    assert threshold is not None
    strong = Signals(1.0, 1.0, 1.0, 0.5, 0.9, 0.6, 0.6, 0.1, 0.3, 0.0, 1.0)
    assert model.probability(strong) >= threshold
    assert status_of(strong, True)[0] == "matched"
    assert status_of(strong, True, family="no-such-family")[0] == "candidate"  # a family never calibrated
    assert status_of(strong, False)[0] == "unresolved"  # nothing shown
    assert status_of(replace(strong, found=0.2), True)[0] == "unresolved"  # the artifact lacks the need
    half = replace(strong, found=0.45)  # the model would promise it; half the need is not in the artifact
    assert model.probability(half) >= threshold and status_of(half, True)[0] == "candidate"
    assert status_of(half, True, verbatim=True)[0] == "matched"  # the passages hold the slot as written


def test_a_family_calibrated_on_the_structure_signal_promises_on_it() -> None:
    """A filing's statement rows in view (the PDF Reader's structure signal) are a promise only for a family
    whose calibration says so; the word-overlap model gives the signal no weight."""
    shipped = shipped_model()
    model = Model(shipped.weights, shipped.bias, dict(shipped.matched), shipped.candidate, {"pdf": 1.0})
    weak = Signals(0.8, 0.3, 0.4, 0.2, 0.1, 0.0, 0.1, 0.3, 0.9, 0.0, 0.0, structure=1.0)
    assert model.probability(weak) == model.probability(replace(weak, structure=0.0))
    assert status_of(weak, True, model, family="pdf")[0] == "matched"
    assert status_of(replace(weak, structure=0.0), True, model, family="pdf")[0] == "candidate"
    assert status_of(weak, True, model, family="text")[0] == "candidate"  # text was never calibrated on it
    assert status_of(weak, False, model, family="pdf")[0] == "unresolved"  # nothing shown
    assert Signals(*weak.vector()[:-1]).structure == 0.0  # a pack recorded before the signal still rebuilds


def test_a_need_whose_rarest_words_the_report_lacks_is_not_promised() -> None:
    """The demo report speaks of a truck fleet, never of zeppelins or airships."""
    report = (Path(__file__).resolve().parents[3] / "sparsefs" / "demo" / "annual-report.md").read_bytes()
    reader = TextReader()
    parsed = reader.parse(MemorySource("annual-report.md", report))
    cases = (("zeppelin/airship fleet size", {"candidate", "unresolved"}), ("R&D expenses 2023", {"matched"}))
    for slot, expected in cases:
        (coverage,) = reader.locate(parsed, ReadIntent(text=slot, slots=(slot,)), 1500).coverage
        assert coverage.status in expected, (slot, coverage)


def test_the_calibration_refuses_samples_of_another_signal_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _load = _calibration(monkeypatch)._load

    row = {"set": "covidqa", "split": "calibration", "shown": True, "hit": True}
    path = tmp_path / "samples.jsonl"
    path.write_text(json.dumps({**row, "signals": [0.5] * (len(NAMES) - 1)}) + "\n")
    with pytest.raises(SystemExit, match="signals per sample"):
        _load(path)
    path.write_text(json.dumps({**row, "signals": list(np.linspace(0, 1, len(NAMES)))}) + "\n")
    assert _load(path)[0].signals.structure == 1.0


def test_the_threshold_is_the_lowest_probability_that_keeps_the_precision(monkeypatch: pytest.MonkeyPatch) -> None:
    calibration = _calibration(monkeypatch)
    Sample, threshold = calibration.Sample, calibration.threshold

    def sample(found: float, hit: bool, shown: bool = True) -> Sample:
        return Sample("covidqa", "calibration", Signals(found, *([0.0] * (len(NAMES) - 1))), shown, hit)

    by_found = Model((1.0, *([0.0] * (len(NAMES) - 1))), 0.0, 1.0, 0.0)  # p = sigmoid(found): ranks by found
    hits = [sample(2.0 - i / 100, True) for i in range(30)]
    misses = [sample(1.0 - i / 100, False) for i in range(5)]
    unshown = [sample(1.5, False, shown=False)]  # can never say matched: left out of the precision
    cut = threshold(by_found, [*hits, *misses, *unshown], 0.90)
    assert cut == pytest.approx(by_found.probability(misses[2].signals))  # 30/33 = 90.9%; 30/34 falls below
    assert threshold(by_found, hits[:20], 0.90) == 1.0  # fewer than 30 packs: nothing is promised
