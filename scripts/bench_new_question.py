#!/usr/bin/env python3
"""A new question on a 10-K while the dense warm-up runs (issue 27 item 4's bar: 20 ms), trees side by side.

Each measurement is a fresh process (``python -I``, cwd ``/``) that imports the tree given, parses the
3M 2022 10-K (252 pages), answers one hybrid intent (model load, first shortlist), then, in mode
``warmup``, starts the real background warm-up (sparsefs.artifacts.warmup) and waits for its start
delay; in mode ``idle`` no warm-up runs; mode ``warmtime`` times the whole warm-up of the filing
instead (seconds, shown as ms). It then times ten new hybrid questions in process (the
daemon's work for a ``cat 'report.pdf@intent=...'`` on a parsed artifact) and hashes each pack, so
trees and modes can be checked to give the same packs. Trees and modes are interleaved per round;
the table gives the median over rounds of each run's median question and whether every pack
equals the first run's.

    .venv/bin/python scripts/bench_new_question.py --trees /path/to/base,/path/to/new [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

FILING = "/work/shared/data/pdf/filings/3M_2022_10K.pdf"
QUESTIONS = [
    "How much did 3M spend on research and development in 2022?", "How many people did 3M employ at the end of 2022?",
    "When will 3M exit PFAS manufacturing?", "Who audited 3M's internal control over financial reporting?",
    "Where are 3M's principal executive offices?", "How many shareholders of record did 3M have in January 2023?",
    "What are 3M's reportable business segments?", "What was 3M's operating margin in 2022?",
    "What is 3M's dividend per share?", "How much goodwill did 3M record?",
]

CHILD = """
import hashlib, json, sys, time
sys.path.insert(0, {tree!r})
from readers.base import ReadIntent
from readers.kit.source import MemorySource
from readers.pdf.reader import PdfReader
from readers.retrieval import dense
reader = PdfReader()
parsed = reader.parse(MemorySource("3M.pdf", open({path!r}, "rb").read()))
def ask(q):
    return reader.locate(parsed, ReadIntent(text=q, slots=(q,), method="hybrid"), 1500)
ask("annual report of the company")
if {mode!r} in ("warmup", "warmtime"):
    from sparsefs.artifacts.warmup import DenseWarmer
    warmer = DenseWarmer()
    started = time.perf_counter()
    warmer.submit(parsed)
    time.sleep(0.7)
if {mode!r} == "warmtime":
    while not warmer.done:
        time.sleep(0.05)
    print(json.dumps({{"times": [time.perf_counter() - started], "packs": []}}))
    sys.exit(0)
times, packs, embedded = [], [], []
for q in {questions!r}:
    started = time.perf_counter()
    batch = ask(q)
    times.append(time.perf_counter() - started)
    packs.append(hashlib.sha256(repr([(i.anchor, i.text) for i in batch.items]).encode()).hexdigest()[:16])
print(json.dumps({{"times": times, "packs": packs}}))
if {mode!r} == "warmup":
    warmer.close()
"""


def measure(tree: str, mode: str) -> tuple[list[float], list[str]]:
    code = CHILD.format(tree=tree, path=FILING, mode=mode, questions=QUESTIONS)
    out = subprocess.run([sys.executable, "-I", "-c", code], cwd="/", capture_output=True, text=True, check=True,
                         timeout=600)
    found = json.loads(out.stdout.strip().splitlines()[-1])
    return [float(t) for t in found["times"]], [str(p) for p in found["packs"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--trees", required=True, help="comma-separated source trees; the first is the reference")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", default="idle,warmup")
    args = parser.parse_args()
    trees = [t.strip() for t in args.trees.split(",") if t.strip()]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    medians: dict[tuple[str, str], list[float]] = {(t, m): [] for t in trees for m in modes}
    reference: list[str] | None = None
    same = {key: True for key in medians}
    for _ in range(args.rounds):
        for mode in modes:
            for tree in trees:
                times, packs = measure(tree, mode)
                medians[(tree, mode)].append(statistics.median(times) * 1000)
                reference = reference or packs or None
                same[(tree, mode)] &= packs == reference
    print("| tree | mode | median new question | packs equal the first run's |")
    print("|---|---|---|---|")
    for (tree, mode), values in medians.items():
        print(f"| {tree} | {mode} | {statistics.median(values):,.0f} ms ({', '.join(f'{v:.0f}' for v in values)}) "
              f"| {'-' if mode == 'warmtime' else 'yes' if same[(tree, mode)] else 'NO'} |")


if __name__ == "__main__":
    main()
