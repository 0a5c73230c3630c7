#!/usr/bin/env python3
"""Calibrate the coverage promise (issue 17): when may a pack say "matched"?

For every one-slot question of the dev sets (covidqa, its one-line articles,
qmsum, financebench; ``scripts/agent_sims.py`` loads them and scores hits as
``scripts/bench_agents.py`` does), one ``@intent`` read goes through the real
protocol; the signals the Reader computed for the slot
(``readers.retrieval.confidence.Signals``) are recorded with whether the pack
held the evidence. A logistic model is fitted on the CALIBRATION split only;
the "matched" threshold is the lowest probability at which the calibration
split's "matched" packs keep a precision of ``--precision`` (default 0.90,
the promise's bar); a slot with passages of its
own below it is a candidate (``--candidate``, default 0: any). The
evaluation split is then scored with the fitted model and both splits are
printed: precision of "matched", and the share of packs holding the evidence
that say "matched".

    .venv/bin/python scripts/calibrate_coverage.py [--write] [--limit N]

Per Reader family (issue 27): the model is fitted on the QA sets (text and
PDF), but each family gets its own "matched" threshold, chosen the same way on
its own calibration split: text on covidqa/oneline/qmsum, pdf on financebench,
and table, json, log and jsonl on the requests ``scripts/eval_family_coverage.py``
makes from the shared structured data. A family whose calibration split never
keeps the precision over at least ``--least`` "matched" samples gets no
threshold: its packs say "candidate" at best. The structured families' requests
are made, not asked by agents (a row's unique key in the question), so they may
veto the promise or confirm it, never loosen it: such a family's threshold is
at least the text family's. ``--keep-model`` keeps the shipped weights and only
chooses the thresholds (the signals did not change with the v2 pipeline).

The ``structure`` signal (a Reader's structural fact that the evidence is in view: a filing's statement
rows, ``readers.pdf.structure.rows_shown``) is not in the logistic model (its weight stays 0). A family is
promised on it instead when its calibration split's packs with the signal keep ``--precision`` over at
least ``--least-structural`` of them and a bootstrap over the family's calibration documents
(``--bootstraps`` resamples of whole documents with replacement) keeps the precision at or above the
target in its lower 5% quantile; the Wilson 95% lower bound is printed beside it (with a dozen packs it
is far below the target: say so wherever the promise is reported).

``--write`` stores the model under ``coverage`` in readers/calibration.json.
Packs are read with the shipped model in place while the signals are taken;
the signals themselves do not depend on it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("SPARSEFS_DENSE_WARMUP", "0")

import eval_family_coverage as structured
from agent_sims import Doc, Question, hit, load_set, pack_seen, write_workspace
from eval_evidence import split_of

import readers.retrieval.confidence as confidence
import readers.retrieval.locate
from readers.retrieval.confidence import NAMES, Model, Signals
from sparsefs.artifacts.cache import ArtifactCache
from sparsefs.protocol.access import Protocol
from sparsefs.protocol.grammar import parse_suffix
from sparsefs.protocol.steps import encode_anchor
from sparsefs.source.rootfs import SourceRoot

TABLE = Path(__file__).resolve().parents[1] / "readers" / "calibration.json"
SETS = ("covidqa", "oneline", "qmsum", "financebench")
STRUCTURED = tuple(structured.FILES)  # table, json, log, jsonl: their sets are named after their family
FAMILY = {"covidqa": "text", "oneline": "text", "qmsum": "text", "financebench": "pdf"}


@dataclass(frozen=True)
class Sample:
    set: str
    split: str
    signals: Signals
    shown: bool  # the slot had passages of its own (else it can only be unresolved)
    hit: bool
    family: str = "text"  # the Reader family that judged it (its threshold's)
    verbatim: bool = False
    doc: str = ""  # the document (a bootstrap over documents resamples these)


def collect(name: str, limit: int | None) -> list[Sample]:
    """One @intent per one-slot question of set ``name``, with the slot's signals and whether it hit."""
    docs, questions = load_set(name)
    asked = _chosen(questions, limit)
    used = [docs[d] for d in dict.fromkeys(q.doc_id for q in asked)]
    tmp = Path(tempfile.mkdtemp(prefix=f"sparsefs-calibrate-coverage-{name}-"))
    root = None
    try:
        write_workspace(tmp, used)
        root = SourceRoot.open(str(tmp))
        protocol = Protocol(ArtifactCache(root))
        samples = [s for q in asked if (s := _sample(name, protocol, q, docs[q.doc_id])) is not None]
        protocol.chooser.close()
        return samples
    finally:
        if root is not None:
            root.close()
        shutil.rmtree(tmp, ignore_errors=True)


def _chosen(questions: Sequence[Question], limit: int | None) -> list[Question]:
    out: list[Question] = []
    for split in ("calibration", "evaluation"):
        out += [q for q in questions if split_of(q.doc_id) == split][:limit]
    return out


_SEEN: list[tuple[str, Signals, int, str, bool]] = []


def _recording(slot: str, sig: Signals, anchors: Sequence[str], closest: Sequence[str],
               verbatim: bool = False, family: str = "text", leads: Sequence[str] = ()) -> object:
    _SEEN.append((slot, sig, len(anchors), family, verbatim))
    return _JUDGE(slot, sig, anchors, closest, verbatim, family, leads)


_JUDGE = confidence.judge


def _sample(name: str, protocol: Protocol, q: Question, doc: Doc) -> Sample | None:
    _SEEN.clear()
    served = protocol.serve(doc.file, parse_suffix(f"intent={encode_anchor(q.text)}"))
    pack = served.pack
    protocol.serve(doc.file, parse_suffix("full"))  # closes the episode: the next question starts afresh
    if pack.decision != "sparse" or len(pack.coverage) != 1 or len(_SEEN) != 1:
        return None
    _, sig, shown, family, verbatim = _SEEN[0]
    return Sample(name, split_of(q.doc_id), sig, shown > 0, hit(q, doc, pack_seen(pack, doc)), family, verbatim,
                  q.doc_id)


def collect_structured(limit: int | None) -> list[Sample]:
    """The structured families' requests (scripts/eval_family_coverage.py), answered by their Readers."""
    samples: list[Sample] = []
    for family, paths in structured.FILES.items():
        for path in paths:
            try:
                reader, parsed, requests = structured.requests_of(family, path, limit or 25)
            except Exception:  # noqa: BLE001 - a file its Reader refuses has no samples
                continue
            for request in requests:
                _SEEN.clear()
                answered = structured.answer(reader, parsed, request)
                if len(_SEEN) == 1:
                    _, sig, shown, judged, verbatim = _SEEN[0]
                    samples.append(Sample(family, request.split, sig, shown > 0, answered["hit"], judged, verbatim,
                                          path.name))
    return samples


def fit(samples: Sequence[Sample], l2: float = 0.01, steps: int = 6000) -> tuple[np.ndarray, float]:
    """Logistic regression by gradient descent on standardised signals (numpy only), returned as weights
    and bias on the raw signals; the ``structure`` signal is left out (weight 0: see the module docstring)."""
    x = np.array([s.signals.vector() for s in samples], dtype=np.float64)
    x[:, NAMES.index("structure")] = 0.0  # constant: its standardised column is 0, so is its weight
    y = np.array([s.hit for s in samples], dtype=np.float64)
    mu, sd = x.mean(axis=0), x.std(axis=0) + 1e-9
    z = (x - mu) / sd
    w, b = np.zeros(x.shape[1]), 0.0
    for _ in range(steps):
        p = 1 / (1 + np.exp(-(z @ w + b)))
        w -= 0.3 * ((z.T @ (p - y)) / len(y) + l2 * w)
        b -= 0.3 * float(np.mean(p - y))
    return w / sd, b - float(np.sum(w * mu / sd))


def threshold(model: Model, samples: Sequence[Sample], precision: float, least: int = 30) -> float:
    """The lowest probability at which the calibration split's "matched" packs (at least ``least`` of
    them) keep a precision of ``precision`` (before the found floor, as issue 17 fitted it: fitted after it,
    the text threshold drops to 0.672 and evaluation precision below 90%)."""
    scored = sorted(((model.probability(s.signals), s.hit) for s in samples if s.shown), reverse=True)
    best, hits = 1.0, 0
    for n, (p, got) in enumerate(scored, 1):
        hits += got
        if n >= least and hits / n >= precision:
            best = p
    return best


def _collect_all(limit: int | None) -> list[Sample]:
    readers.retrieval.locate.judge = _recording  # type: ignore[assignment]  # the one place coverage is judged
    return [s for name in SETS for s in collect(name, limit)] + collect_structured(limit)


def _save(path: Path, samples: Sequence[Sample]) -> None:
    with path.open("w") as f:
        for s in samples:
            f.write(json.dumps({"set": s.set, "split": s.split, "signals": s.signals.vector(), "shown": s.shown,
                                "hit": s.hit, "family": s.family, "verbatim": s.verbatim, "doc": s.doc}) + "\n")


def _load(path: Path) -> list[Sample]:
    """Samples saved by ``--samples``; a file from another signal set is refused (its columns would be
    fitted under the wrong names)."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line]
    stale = next((r for r in rows if len(r["signals"]) != len(NAMES)), None)
    if stale is not None:
        raise SystemExit(f"{path}: {len(stale['signals'])} signals per sample, this model has {len(NAMES)} "
                         f"({', '.join(NAMES)}): collect them again without --from-samples")
    return [Sample(r["set"], r["split"], Signals(*r["signals"]), r["shown"], r["hit"],
                   r.get("family", FAMILY.get(r["set"], r["set"])), r.get("verbatim", False), r.get("doc", ""))
            for r in rows]


def curve(model: Model, samples: Sequence[Sample]) -> list[str]:
    """Precision of "matched" at the probability that keeps a given share of the hits, per split."""
    lines = ["| split | share of hits kept | threshold | precision |", "|---|---|---|---|"]
    for split in ("calibration", "evaluation"):
        scored = sorted(((model.probability(s.signals), s.hit) for s in samples if s.split == split and s.shown),
                        reverse=True)
        hits = sum(h for _, h in scored)
        for want in (0.2, 0.4, 0.6, 0.8):
            kept = good = 0
            for p, h in scored:
                kept, good = kept + 1, good + h
                if good >= want * hits:
                    lines.append(f"| {split} | {want:.0%} | {p:.3f} | {good}/{kept} ({100 * good / kept:.1f}%) |")
                    break
    return lines


def report(model: Model, samples: Sequence[Sample]) -> list[str]:
    lines = ["| set | split | one-slot packs | hits | matched | precision of matched | hits that say matched |",
             "|---|---|---|---|---|---|---|"]
    for name in (*SETS, *STRUCTURED, "all"):
        for split in ("calibration", "evaluation"):
            mine = [s for s in samples if s.split == split and name in (s.set, "all")]
            if mine:
                lines.append(_row(name, split, model, mine))
    return lines


def _row(name: str, split: str, model: Model, mine: Sequence[Sample]) -> str:
    said = [s for s in mine if confidence.status_of(s.signals, s.shown, model, s.verbatim, s.family)[0] == "matched"]
    hits = [s for s in mine if s.hit]
    good = sum(s.hit for s in said)
    precision = f"{good}/{len(said)} ({100 * good / len(said):.1f}%)" if said else "-"
    recall = f"{good}/{len(hits)} ({100 * good / len(hits):.1f}%)" if hits else "-"
    return f"| {name} | {split} | {len(mine)} | {len(hits)} | {len(said)} | {precision} | {recall} |"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="questions per split per set")
    parser.add_argument("--precision", type=float, default=0.90, help="precision 'matched' keeps on calibration")
    parser.add_argument("--candidate", type=float, default=0.0, help="below this probability: unresolved")
    parser.add_argument("--write", action="store_true", help="store the model in readers/calibration.json")
    parser.add_argument("--samples", type=Path, help="save the collected samples here (JSON lines)")
    parser.add_argument("--from-samples", type=Path, help="refit from samples saved by --samples (no reads)")
    parser.add_argument("--least", type=int, default=30, help="'matched' calibration samples a family threshold needs")
    parser.add_argument("--keep-model", action="store_true", help="keep the shipped weights; choose thresholds only")
    parser.add_argument("--least-structural", type=int, default=10,
                        help="packs with the structure signal a family's structural promise needs")
    parser.add_argument("--bootstraps", type=int, default=2000, help="document resamples for the structural promise")
    args = parser.parse_args(argv)
    samples = _load(args.from_samples) if args.from_samples else _collect_all(args.limit)
    if args.samples:
        _save(args.samples, samples)
    calibration = [s for s in samples if s.split == "calibration"]
    w, b = fit([s for s in calibration if s.set in SETS])  # the model: the QA sets, as issue 17 fitted it
    if args.keep_model:
        shipped = confidence.shipped_model()
        w, b = np.array(shipped.weights), shipped.bias
    provisional = Model(tuple(w.tolist()), b, {}, args.candidate)
    thresholds = family_thresholds(provisional, calibration, args.precision, args.least)
    structural, lines = structural_rules(calibration, args.precision, args.least_structural, args.bootstraps)
    model = Model(provisional.weights, b, thresholds, args.candidate, structural)
    print(f"`{' '.join(['scripts/calibrate_coverage.py', *(argv or sys.argv[1:])])}`\n")
    print("fitted on the calibration split: " + ", ".join(f"{n} {v:+.3f}" for n, v in zip(NAMES, w, strict=True))
          + f", bias {b:+.3f}; matched per family at p >= "
          + (", ".join(f"{f} {t:.3f}" for f, t in sorted(thresholds.items())) or "(none)")
          + f", unresolved below {model.candidate}; on the structure signal: "
          + (", ".join(sorted(structural)) or "(none)") + "\n")
    print("\n".join(lines) + "\n")
    print("\n".join(report(model, samples)))
    print("\n" + "\n".join(curve(model, samples)))
    if args.write:
        _write(model, calibration)
    return 0


def family_thresholds(model: Model, calibration: Sequence[Sample], precision: float, least: int) -> dict[str, float]:
    """Each family's threshold on its own calibration samples; a family that cannot keep ``precision`` over
    ``least`` "matched" samples gets none."""
    out: dict[str, float] = {}
    for family in sorted({s.family for s in calibration}):
        mine = [s for s in calibration if s.family == family]
        found = threshold(model, mine, precision, least)
        if found < 1.0:
            out[family] = found
    made = {f for f in out if all(s.set in STRUCTURED for s in calibration if s.family == f)}
    for family in made:  # made-up requests confirm or veto the promise, never loosen it
        out[family] = max(out[family], out.get("text", 1.0))
    return out


def structural_rules(calibration: Sequence[Sample], precision: float, least: int, bootstraps: int,
                     seed: int = 27) -> tuple[dict[str, float], list[str]]:
    """The families promised on the structure signal (see the module docstring), and a table of why."""
    rng = np.random.default_rng(seed)
    rules: dict[str, float] = {}
    lines = ["| family | calibration packs with the signal | hits | precision | Wilson 95% lower | bootstrap "
             "over documents: 5% quantile (share >= target) | promised |", "|---|---|---|---|---|---|---|"]
    for family in sorted({s.family for s in calibration}):
        said = [s for s in calibration if s.family == family and s.shown and s.signals.structure >= 1.0]
        if not said:
            continue
        good = sum(s.hit for s in said)
        low, share = _bootstrap(said, precision, bootstraps, rng)
        ok = len(said) >= least and good / len(said) >= precision and low >= precision
        if ok:
            rules[family] = 1.0
        lines.append(f"| {family} | {len(said)} | {good} | {100 * good / len(said):.1f}% | "
                     f"{100 * _wilson_low(good, len(said)):.1f}% | {100 * low:.1f}% ({100 * share:.1f}%) | "
                     f"{'yes' if ok else 'no'} |")
    return rules, lines


def _bootstrap(said: Sequence[Sample], precision: float, rounds: int, rng: np.random.Generator) -> tuple[float, float]:
    """(5% quantile of the precision, share of resamples at or above ``precision``) over resamples of the
    documents with replacement (a resample without a pack counts as meeting it: it promises nothing)."""
    docs = sorted({s.doc for s in said})
    per_doc = {d: (sum(s.hit for s in said if s.doc == d), sum(s.doc == d for s in said)) for d in docs}
    values = []
    for _ in range(rounds):
        drawn = rng.choice(len(docs), size=len(docs), replace=True)
        good = sum(per_doc[docs[i]][0] for i in drawn)
        told = sum(per_doc[docs[i]][1] for i in drawn)
        values.append(good / told if told else 1.0)
    return float(np.quantile(values, 0.05)), float(np.mean([v >= precision for v in values]))


def _wilson_low(good: int, n: int, z: float = 1.96) -> float:
    p = good / n
    return float((p + z * z / (2 * n) - z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))) / (1 + z * z / n))


def _write(model: Model, calibration: Sequence[Sample]) -> None:
    table = json.loads(TABLE.read_text())
    named = sorted({*model.matched, *model.structural})
    sets = {family: sorted({s.set for s in calibration if s.family == family}) for family in named}
    counts = {family: sum(s.family == family for s in calibration) for family in named}
    table["coverage"] = {
        "note": f"scripts/calibrate_coverage.py on {len(calibration)} one-slot calibration-split requests",
        "weights": dict(zip(NAMES, (round(w, 4) for w in model.weights), strict=True)),
        "bias": round(model.bias, 4), "candidate": model.candidate,
        "families": {family: {**({"matched": round(model.matched[family], 4)} if family in model.matched else {}),
                              **({"structure": model.structural[family]} if family in model.structural else {}),
                              "note": f"{counts[family]} calibration samples of {', '.join(sets[family])}"}
                     for family in named},
    }
    TABLE.write_text(json.dumps(table, indent=1) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
