#!/usr/bin/env python3
"""Repeated characters per task with and without the evidence record (issue 5).

Replays every document's question set of the shared QA sets twice, side by
side in one run (see tests/replay.py): ``record`` asks the first question
with @intent and every later one with @refine (the episode's evidence record
keeps delivered spans out), ``no-record`` asks each with a fresh @intent.
Prints, per QA set and mode: tasks, reads, median and total exposed and
repeated characters per task, and the hit rate (annotated evidence >= 80%
covered by what the task has exposed so far).

    .venv/bin/python scripts/bench_episodes.py [--limit N]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sparsefs.artifacts.cache import ArtifactCache
from sparsefs.protocol.access import Protocol
from sparsefs.source.rootfs import SourceRoot
from sparsefs.store.state import StateDB
from sparsefs.store.stats import Stats
from sparsefs.vfs.core import Core
from tests.replay import TaskResult, load_tasks, replay, write_workspace

MODES = ("no-record", "record")
DEMO = Path(__file__).resolve().parents[1] / "sparsefs" / "demo"


def run_set(name: str, limit: int | None) -> dict[str, list[TaskResult]]:
    tasks = load_tasks(name, limit)
    results: dict[str, list[TaskResult]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory() as tmp:
        written = list(write_workspace(Path(tmp), tasks))
        root = SourceRoot.open(tmp)
        cache = ArtifactCache(root)  # parsed once, shared by both modes: only the episodes differ
        for rel, task in written:
            for mode in MODES:
                results[mode].append(replay(Protocol(cache), rel, task, mode))
        root.close()
    return results


def row(name: str, mode: str, results: list[TaskResult]) -> str:
    reads = sum(len(r.reads) for r in results)
    exposed = [r.exposed for r in results]
    repeated = [r.repeated for r in results]
    hits = sum(r.hits for r in results)
    share = sum(repeated) / sum(exposed) if sum(exposed) else 0.0
    before, after = _sparse_repeats(results)
    fallbacks = sum(read.served.pack.decision == "fallback" for r in results for read in r.reads)
    return (f"| {name} | {mode} | {len(results)} | {reads} | {statistics.median(exposed):,.0f} | "
            f"{statistics.median(repeated):,.0f} | {sum(repeated):,} of {sum(exposed):,} ({share:.1%}) | "
            f"{before:,} / {after:,} | {fallbacks} | {hits / reads:.1%} |")


def _sparse_repeats(results: list[TaskResult]) -> tuple[int, int]:
    """Characters sparse packs repeated, before and after the task's first fallback to the full view."""
    before = after = 0
    for result in results:
        fell_back = False
        for read in result.reads:
            if read.served.pack.decision == "sparse":
                after += read.repeated_chars if fell_back else 0
                before += 0 if fell_back else read.repeated_chars
            fell_back |= read.served.pack.decision == "fallback"
    return before, after


def state_cost(runs: int = 3, reads: int = 60) -> None:
    """Median time of a new intent read through the core, without and with the state database."""
    for _ in range(runs):
        without, with_state = (_median_read_ms(False, reads), _median_read_ms(True, reads))
        print(f"new intent read of the demo report: {without:.2f} ms without state, {with_state:.2f} ms with")


def _median_read_ms(with_state: bool, reads: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(DEMO, Path(tmp) / "src")
        root, stats = SourceRoot.open(str(Path(tmp) / "src")), Stats(Path(tmp) / "state" / "log.jsonl")
        state = StateDB.in_dir(Path(tmp) / "state") if with_state else None
        core = Core(root, stats, state=state)
        times: list[float] = []
        for n in range(reads + 1):
            started = time.perf_counter()
            core.evidence.lookup(f"annual-report.md@intent=revenue growth {n}")
            times.append(time.perf_counter() - started)
        stats.close()
        root.close()
        if state is not None:
            state.close()
    return statistics.median(times[1:]) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="documents per QA set")
    parser.add_argument("--state-cost", action="store_true", help="also time new intent reads with/without state")
    args = parser.parse_args()
    print("| QA set | agent | tasks | reads | median exposed / task | median repeated / task | "
          "repeated of exposed (all tasks) | repeated in sparse packs (before / after a fallback) | fallbacks | "
          "hit (cumulative) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in ("covidqa-dev", "qmsum"):
        started = time.perf_counter()
        results = run_set(name, args.limit)
        for mode in MODES:
            print(row(name, mode, results[mode]))
        print(f"<!-- {name}: {time.perf_counter() - started:.1f} s -->")
    if args.state_cost:
        state_cost()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
