#!/usr/bin/env python3
"""Cold and warm intent reads of the PDF Reader on the real filings and papers.

Cold = parse from bytes (extraction, segmentation, BM25 index) + locate;
warm = locate on the already-parsed object (what a cached daemon does).
Each is the median of ``--runs`` runs (pymupdf is imported once, before
timing: it is a daemon start-up cost, reported on its own). Also reported:
where the cold time goes (text extraction vs segmentation + index), L (the
full view's length) and the characters a read exposes, a table read's cost,
and the preview's size.

    .venv/bin/python scripts/bench_pdf.py [--runs 5] [--budget 2000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

_started = time.perf_counter()
import pymupdf  # noqa: E402, F401

IMPORT_S = time.perf_counter() - _started

from readers.base import Parsed, ReadIntent  # noqa: E402
from readers.kit.source import MemorySource  # noqa: E402
from readers.pdf.extract import extract  # noqa: E402
from readers.pdf.reader import PdfReader  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "pdf"
INTENTS = {
    "3M_2022_10K.pdf": "How much did 3M spend on research, development and related expenses in 2022?",
    "BOEING_2022_10K.pdf": "What was Boeing's total backlog at the end of 2022?",
    "AMAZON_2019_10K.pdf": "What were Amazon's net sales of AWS in 2019?",
    "PEPSICO_2023Q1_EARNINGS.pdf": "organic revenue growth guidance for 2023",
}
PAPER_INTENT = "What dataset was used for evaluation?"


def median_s(runs: int, work: Callable[[], object]) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def bench(path: Path, intent: str, runs: int, budget: int) -> None:
    reader, data = PdfReader(), path.read_bytes()
    read = ReadIntent(intent, (intent,))

    def cold() -> Parsed:
        parsed = reader.parse(MemorySource(path.name, data))
        reader.locate(parsed, read, budget)
        return parsed

    cold_s = median_s(runs, cold)
    extract_s = median_s(runs, lambda: extract(data))
    parsed = cold()
    warm_s = median_s(max(runs, 20), lambda: reader.locate(parsed, read, budget))
    batch = reader.locate(parsed, read, budget)
    exposed = sum(len(item.text) for item in batch.items)
    table = ReadIntent(intent + " table", (intent + " table",))
    parsed_for_tables = reader.parse(MemorySource(path.name, data))  # fresh: no cached tables
    table_s = median_s(1, lambda: reader.locate(parsed_for_tables, table, budget))
    pages = parsed.data["pages"].pages
    print(
        f"{path.name:32} {pages:4} p  {len(data) / 2**20:5.2f} MiB  L={len(parsed.full_view):>9,}  "
        f"cold {cold_s * 1000:6.0f} ms (extract {extract_s * 1000:5.0f})  warm {warm_s * 1000:6.1f} ms  "
        f"exposed {exposed:>5,} ({exposed / len(parsed.full_view):.2%} of L)  "
        f"table read {table_s * 1000:5.0f} ms  scout {len(reader.preview(parsed, 2000))}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--budget", type=int, default=2000)
    args = parser.parse_args()
    print(f"import pymupdf: {IMPORT_S * 1000:.0f} ms (once per daemon); medians of {args.runs} runs")
    for name, intent in INTENTS.items():
        bench(DATA / "filings" / name, intent, args.runs, args.budget)
    for path in sorted((DATA / "papers").glob("*.pdf")):
        bench(path, PAPER_INTENT, args.runs, args.budget)


if __name__ == "__main__":
    main()
