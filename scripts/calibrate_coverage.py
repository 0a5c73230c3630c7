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

from agent_sims import Doc, Question, hit, load_set, pack_seen, write_workspace
from eval_evidence import split_of

import readers.pdf.reader
import readers.retrieval.confidence as confidence
import readers.text
from readers.retrieval.confidence import NAMES, Model, Signals
from sparsefs.artifacts.cache import ArtifactCache
from sparsefs.protocol.access import Protocol
from sparsefs.protocol.grammar import parse_suffix
from sparsefs.protocol.steps import encode_anchor
from sparsefs.source.rootfs import SourceRoot

TABLE = Path(__file__).resolve().parents[1] / "readers" / "calibration.json"
SETS = ("covidqa", "oneline", "qmsum", "financebench")


@dataclass(frozen=True)
class Sample:
    set: str
    split: str
    signals: Signals
    shown: bool  # the slot had passages of its own (else it can only be unresolved)
    hit: bool


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


_SEEN: list[tuple[str, Signals, int]] = []


def _recording(slot: str, sig: Signals, anchors: Sequence[str], closest: Sequence[str],
               verbatim: bool = False) -> object:
    _SEEN.append((slot, sig, len(anchors)))
    return _JUDGE(slot, sig, anchors, closest, verbatim)


_JUDGE = confidence.judge


def _sample(name: str, protocol: Protocol, q: Question, doc: Doc) -> Sample | None:
    _SEEN.clear()
    served = protocol.serve(doc.file, parse_suffix(f"intent={encode_anchor(q.text)}"))
    pack = served.pack
    protocol.serve(doc.file, parse_suffix("full"))  # closes the episode: the next question starts afresh
    if pack.decision != "sparse" or len(pack.coverage) != 1 or len(_SEEN) != 1:
        return None
    _, sig, shown = _SEEN[0]
    return Sample(name, split_of(q.doc_id), sig, shown > 0, hit(q, doc, pack_seen(pack, doc)))


def fit(samples: Sequence[Sample], l2: float = 0.01, steps: int = 6000) -> tuple[np.ndarray, float]:
    """Logistic regression by gradient descent on standardised signals (numpy only), returned as weights
    and bias on the raw signals."""
    x = np.array([s.signals.vector() for s in samples], dtype=np.float64)
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
    them) keep a precision of ``precision``."""
    scored = sorted(((model.probability(s.signals), s.hit) for s in samples if s.shown), reverse=True)
    best, hits = 1.0, 0
    for n, (p, got) in enumerate(scored, 1):
        hits += got
        if n >= least and hits / n >= precision:
            best = p
    return best


def _collect_all(limit: int | None) -> list[Sample]:
    for module in (readers.text, readers.pdf.reader):  # the Readers that judge coverage with the model
        module.judge = _recording  # type: ignore[attr-defined]
    return [s for name in SETS for s in collect(name, limit)]


def _save(path: Path, samples: Sequence[Sample]) -> None:
    with path.open("w") as f:
        for s in samples:
            f.write(json.dumps({"set": s.set, "split": s.split, "signals": s.signals.vector(), "shown": s.shown,
                                "hit": s.hit}) + "\n")


def _load(path: Path) -> list[Sample]:
    """Samples saved by ``--samples``; a file from another signal set is refused (its columns would be
    fitted under the wrong names)."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line]
    stale = next((r for r in rows if len(r["signals"]) != len(NAMES)), None)
    if stale is not None:
        raise SystemExit(f"{path}: {len(stale['signals'])} signals per sample, this model has {len(NAMES)} "
                         f"({', '.join(NAMES)}): collect them again without --from-samples")
    return [Sample(r["set"], r["split"], Signals(*r["signals"]), r["shown"], r["hit"]) for r in rows]


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
    for name in (*SETS, "all"):
        for split in ("calibration", "evaluation"):
            mine = [s for s in samples if s.split == split and name in (s.set, "all")]
            if mine:
                lines.append(_row(name, split, model, mine))
    return lines


def _row(name: str, split: str, model: Model, mine: Sequence[Sample]) -> str:
    said = [s for s in mine if confidence.status_of(s.signals, s.shown, model)[0] == "matched"]
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
    args = parser.parse_args(argv)
    samples = _load(args.from_samples) if args.from_samples else _collect_all(args.limit)
    if args.samples:
        _save(args.samples, samples)
    calibration = [s for s in samples if s.split == "calibration"]
    w, b = fit(calibration)
    provisional = Model(tuple(w.tolist()), b, 1.0, args.candidate)
    model = Model(provisional.weights, b, threshold(provisional, calibration, args.precision), args.candidate)
    print(f"`{' '.join(['scripts/calibrate_coverage.py', *(argv or sys.argv[1:])])}`\n")
    print("fitted on the calibration split: " + ", ".join(f"{n} {v:+.3f}" for n, v in zip(NAMES, w, strict=True))
          + f", bias {b:+.3f}; matched at p >= {model.matched:.3f}, unresolved below {model.candidate}\n")
    print("\n".join(report(model, samples)))
    print("\n" + "\n".join(curve(model, samples)))
    if args.write:
        _write(model, len(calibration))
    return 0


def _write(model: Model, n: int) -> None:
    table = json.loads(TABLE.read_text())
    table["coverage"] = {
        "note": f"scripts/calibrate_coverage.py on {n} one-slot calibration-split requests",
        "weights": dict(zip(NAMES, (round(w, 4) for w in model.weights), strict=True)),
        "bias": round(model.bias, 4), "matched": round(model.matched, 4), "candidate": model.candidate,
    }
    TABLE.write_text(json.dumps(table, indent=1) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
