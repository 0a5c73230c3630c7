#!/usr/bin/env python3
"""Cost and effect of dense re-ranking (readers.retrieval.dense) on top of the Text Reader's BM25.

Cost: model load time (first call in a fresh process: imports, sha256 checks,
ONNX session), embed latency for one query and for 50 document sentences
(median of --repeat runs), RSS growth from loading and embedding.

Effect, on the CALIBRATION split of COVID-QA dev (a document is calibration when
xxh64(doc_id) % 2 == 0) and the questions with located evidence: the top-K BM25
sentence units of a question are re-scored as (1 - w) x BM25 / max BM25 +
w x max(cosine, 0) (units outside the shortlist keep (1 - w) x BM25 / max), then
neighbour smoothing and the same budgeted selection as TextReader.locate. The
hit definition and the BM25-only row are those of scripts/bench_evidence.py
(>= 80% of the evidence characters covered), at the same --max-chars budget.

    scripts/bench_dense.py [--limit N] [--max-chars 1500] [--weights 0.3,0.5,0.7,1.0]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import xxhash

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from readers.base import Parsed, ReadIntent
from readers.kit.source import MemorySource
from readers.retrieval import dense
from readers.retrieval.bm25index import blocked_mask, contextual_scores, select, smoothed
from readers.text import TextReader, passage_items, unit_index_of
from scripts.bench_evidence import DATA, HIT_COVERAGE, Span, _load, coverage

SHORTLIST = dense.SHORTLIST


def rss_bytes() -> int:
    """Resident set size of this process in bytes (Linux)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def calibration(doc_id: str) -> bool:
    return int(xxhash.xxh64_hexdigest(doc_id.encode()), 16) % 2 == 0


def _median_ms(values: Sequence[float]) -> float:
    return statistics.median(values) * 1000.0 if values else 0.0


def cost(repeat: int) -> None:
    """Load time, latency and memory, in this (fresh) process."""
    rss = rss_bytes()
    t0 = time.perf_counter()
    if not dense.available():
        raise SystemExit(dense.missing_reason())
    load_s = time.perf_counter() - t0
    loaded = rss_bytes()
    docs = _load(DATA / "covidqa-dev.docs.jsonl")
    parsed = TextReader().parse(MemorySource("d.txt", str(docs[0]["text"]).encode()))
    starts, ends = parsed.data["unit_starts"], parsed.data["unit_ends"]
    sentences = [parsed.full_view[s:e] for s, e in zip(starts[:50], ends[:50], strict=True)]
    questions = [str(q["question"]) for q in _load(DATA / "covidqa-dev.questions.jsonl")[:repeat]]
    query_s, batch_s = [], []
    for question in questions:
        t0 = time.perf_counter()
        dense.embed([question])
        query_s.append(time.perf_counter() - t0)
    for _ in range(repeat):
        t0 = time.perf_counter()
        dense.embed(sentences)
        batch_s.append(time.perf_counter() - t0)
    used = rss_bytes()
    chars = statistics.median(len(s) for s in sentences)
    print(f"model load (first call, fresh process): {load_s * 1000:.0f} ms; threads {dense.THREADS}")
    print(f"embed 1 query: median {_median_ms(query_s):.1f} ms over {len(query_s)} questions")
    print(f"embed 50 sentences (median {chars:.0f} chars): median {_median_ms(batch_s):.0f} ms over {repeat} runs")
    print(f"RSS: +{(loaded - rss) / 2**20:.0f} MiB after load, +{(used - rss) / 2**20:.0f} MiB after embedding\n")


def texts_for(parsed: Parsed) -> Callable[[np.ndarray], list[str]]:
    starts, ends, view = parsed.data["unit_starts"], parsed.data["unit_ends"], parsed.full_view
    return lambda ids: [view[int(starts[i]) : int(ends[i])] for i in ids]


def spans_for(parsed: Parsed, scores: np.ndarray, max_chars: int) -> list[Span]:
    """TextReader.locate's selection (one slot, no scope, nothing excluded) over ``scores``."""
    starts, ends = parsed.data["unit_starts"], parsed.data["unit_ends"]
    blocked = blocked_mask(starts, ends, ())
    sel = select(starts, ends, {0: smoothed(scores)}, blocked, max_chars, None)
    return [(it.anchor.char_start, it.anchor.char_end) for it in passage_items(parsed, sel)]


def effect(limit: int | None, max_chars: int, weights: Sequence[float], split: str) -> None:
    docs = {str(d["doc_id"]): str(d["text"]) for d in _load(DATA / "covidqa-dev.docs.jsonl")}
    wanted = split == "calibration"
    questions = [
        q
        for q in _load(DATA / "covidqa-dev.questions.jsonl")
        if q["unlocated"] == 0 and calibration(str(q["doc_id"])) == wanted
    ][:limit]
    reader, parsed_of = TextReader(), {}
    names = ["BM25 (TextReader.locate)"] + [f"top-{SHORTLIST} re-ranked, w={w}" for w in weights]
    hits: dict[str, list[bool]] = {n: [] for n in names}
    exposed: dict[str, list[int]] = {n: [] for n in names}
    dense_s: list[float] = []
    for q in questions:
        doc_id, question = str(q["doc_id"]), str(q["question"])
        if doc_id not in parsed_of:
            parsed_of[doc_id] = reader.parse(MemorySource(f"{doc_id}.txt", docs[doc_id].encode()))
        parsed = parsed_of[doc_id]
        evidence = [(int(s), int(e)) for s, e in q["evidence"]]  # type: ignore[attr-defined]
        batch = reader.locate(parsed, ReadIntent(question, (question,)), max_chars)
        results = {names[0]: [(it.anchor.char_start, it.anchor.char_end) for it in batch.items]}
        raw = contextual_scores(unit_index_of(parsed), question, None)
        shortlist = dense.shortlist(raw, SHORTLIST)
        t0 = time.perf_counter()
        cosines = dense.unit_similarities(parsed, "sentences", shortlist, texts_for(parsed), question)
        dense_s.append(time.perf_counter() - t0)
        for name, w in zip(names[1:], weights, strict=True):
            results[name] = spans_for(parsed, dense.fuse(raw, shortlist, cosines, w), max_chars)
        for name, spans in results.items():
            hits[name].append(coverage(evidence, spans) >= HIT_COVERAGE)
            exposed[name].append(sum(e - s for s, e in spans))
    n = len(questions)
    print(f"COVID-QA dev, {split.upper()} split: {n} questions with located evidence, {len(parsed_of)} documents;")
    print(f"hit = covers >= {HIT_COVERAGE:.0%} of evidence chars; max_chars={max_chars}\n")
    print("| method | hit rate | questions won / lost vs BM25 | median exposed chars |")
    print("|---|---|---|---|")
    for name in names:
        won = sum(h and not b for h, b in zip(hits[name], hits[names[0]], strict=True))
        lost = sum(b and not h for h, b in zip(hits[name], hits[names[0]], strict=True))
        rate, count = 100.0 * sum(hits[name]) / max(1, n), sum(hits[name])
        median = statistics.median(exposed[name] or [0])
        print(f"| {name} | {rate:.1f}% ({count}/{n}) | +{won} / -{lost} | {median:,.0f} |")
    print(
        f"\ndense step per question (embeds only new shortlist units): median {_median_ms(dense_s):.1f} ms, "
        f"mean {statistics.mean(dense_s or [0]) * 1000:.1f} ms"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--limit", type=int, default=None, help="first N questions of the split only")
    parser.add_argument("--max-chars", type=int, default=1500, help="@intent budget")
    parser.add_argument("--weights", default="0.3,0.5,0.7,1.0", help="dense weights w to try")
    parser.add_argument("--repeat", type=int, default=10, help="runs per latency median")
    parser.add_argument("--split", choices=("calibration", "evaluation"), default="calibration")
    args = parser.parse_args(argv)
    cost(args.repeat)
    effect(args.limit, args.max_chars, [float(w) for w in args.weights.split(",")], args.split)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
