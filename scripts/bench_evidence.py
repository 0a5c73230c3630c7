#!/usr/bin/env python3
"""Evidence hit rate of the Text Reader's @intent vs a top-1 BM25 window baseline.

Over the COVID-QA dev questions whose evidence is located in the document
(``unlocated == 0``): a question is a *hit* when the union of the returned
[start, end) spans covers at least 80% of its annotated evidence characters.
Both methods run in the same process, on the same documents, with the same
tokenizer (bm25s regex split, English stopwords, PyStemmer English).

    scripts/bench_evidence.py [--limit N] [--max-chars 1500]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from readers.base import ReadIntent
from readers.kit.source import MemorySource
from readers.retrieval.bm25index import UnitIndex
from readers.text import TextReader

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "qa"
HIT_COVERAGE = 0.8
Span = tuple[int, int]


@dataclass
class Tally:
    """Per-method results."""

    hits: int = 0
    exposed: list[int] = field(default_factory=list)
    build_ms: list[float] = field(default_factory=list)
    query_ms: list[float] = field(default_factory=list)

    def row(self, name: str, questions: int) -> str:
        rate = 100.0 * self.hits / max(1, questions)
        return (
            f"| {name} | {rate:.1f}% ({self.hits}/{questions}) "
            f"| {_median(self.exposed):,.0f} | {_median(self.build_ms):.1f} "
            f"| {_median(self.query_ms):.2f} |"
        )


class WindowBaseline:
    """Fixed windows of ``size`` chars every ``size // 2``; BM25's top-1 window."""

    def __init__(self, text: str, size: int) -> None:
        stride = max(1, size // 2)
        last = max(0, len(text) - size)
        starts = list(range(0, last + 1, stride))
        if starts[-1] < last:
            starts.append(last)
        self.spans = [(s, min(len(text), s + size)) for s in starts]
        self.index = UnitIndex([text[s:e] for s, e in self.spans])

    def top1(self, query: str) -> Span:
        return self.spans[int(np.argmax(self.index.scores(query)))]


def coverage(evidence: Sequence[Span], returned: Iterable[Span]) -> float:
    """Fraction of evidence characters inside the union of returned spans."""
    covered = np.zeros(max((e for _, e in evidence), default=0), dtype=bool)
    for start, end in returned:
        covered[start:end] = True
    total = sum(e - s for s, e in evidence)
    inside = sum(int(covered[s:e].sum()) for s, e in evidence)
    return inside / total if total else 0.0


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else 0.0


def _load(path: Path) -> list[dict[str, object]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _ms(start: float) -> float:
    return (time.perf_counter() - start) * 1000.0


def run(limit: int | None, max_chars: int, window: int) -> tuple[Tally, Tally, int]:
    docs = {str(d["doc_id"]): str(d["text"]) for d in _load(DATA / "covidqa-dev.docs.jsonl")}
    questions = [q for q in _load(DATA / "covidqa-dev.questions.jsonl") if q["unlocated"] == 0]
    questions = questions[:limit] if limit else questions
    reader, ours, base = TextReader(), Tally(), Tally()
    parsed, windows = {}, {}
    for q in questions:
        doc_id, text = str(q["doc_id"]), docs[str(q["doc_id"])]
        if doc_id not in parsed:
            t0 = time.perf_counter()
            parsed[doc_id] = reader.parse(MemorySource(f"{doc_id}.txt", text.encode()))
            ours.build_ms.append(_ms(t0))
            t0 = time.perf_counter()
            windows[doc_id] = WindowBaseline(text, window)
            base.build_ms.append(_ms(t0))
        evidence = [(int(s), int(e)) for s, e in q["evidence"]]  # type: ignore[attr-defined]
        question = str(q["question"])
        t0 = time.perf_counter()
        batch = reader.locate(parsed[doc_id], ReadIntent(question, (question,)), max_chars)
        ours.query_ms.append(_ms(t0))
        spans = [(it.anchor.char_start, it.anchor.char_end) for it in batch.items]
        ours.exposed.append(sum(len(it.text) for it in batch.items))
        ours.hits += coverage(evidence, spans) >= HIT_COVERAGE
        t0 = time.perf_counter()
        span = windows[doc_id].top1(question)
        base.query_ms.append(_ms(t0))
        base.exposed.append(span[1] - span[0])
        base.hits += coverage(evidence, [span]) >= HIT_COVERAGE
    return ours, base, len(questions)


def big_document(megabytes: float, questions: int = 20) -> None:
    """Cold parse and query latency on a text made by concatenating the QA documents."""
    texts = [str(d["text"]) for d in _load(DATA / "covidqa-dev.docs.jsonl")]
    target = int(megabytes * 1_000_000)
    body = "\n\n".join(texts)
    while len(body) < target:
        body += "\n\n" + body
    body = body[:target]
    reader = TextReader()
    t0 = time.perf_counter()
    parsed = reader.parse(MemorySource("big.txt", body.encode()))
    parse_s = time.perf_counter() - t0
    asked = [str(q["question"]) for q in _load(DATA / "covidqa-dev.questions.jsonl")]
    latencies = []
    for question in asked[:questions]:
        t0 = time.perf_counter()
        reader.locate(parsed, ReadIntent(question, (question,)), 1500)
        latencies.append(_ms(t0))
    units = len(parsed.data["segmentation"].units)
    print(
        f"\n{len(body):,} chars ({units:,} units): parse {parse_s:.2f} s "
        f"(first parse in this process), median query {_median(latencies):.1f} ms"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--limit", type=int, default=None, help="first N questions only")
    parser.add_argument("--max-chars", type=int, default=1500, help="@intent budget")
    parser.add_argument("--window", type=int, default=1500, help="baseline window size")
    parser.add_argument("--big-mb", type=float, default=0.0, help="also time parse/query on an N MB text")
    args = parser.parse_args(argv)
    ours, base, n = run(args.limit, args.max_chars, args.window)
    print(f"COVID-QA dev, {n} questions with located evidence; hit = covers >= 80% of evidence chars\n")
    print("| method | hit rate | median exposed chars | median index build ms | median query ms |")
    print("|---|---|---|---|---|")
    print(ours.row(f"@intent (sentence BM25 + neighbours, max_chars={args.max_chars})", n))
    print(base.row(f"top-1 BM25 window ({args.window} chars, stride {args.window // 2})", n))
    if args.big_mb:
        big_document(args.big_mb)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
