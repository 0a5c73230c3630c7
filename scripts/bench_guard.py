#!/usr/bin/env python3
"""An unmodified agent's shell reads, replayed on a real mount with and without the guard.

The QA documents (COVID-QA papers, QMSum meeting transcripts) are written as
files in a temporary workspace (``docs/<doc_id>.txt``), mirrored by a SparseFS
mount. For one question per document, a naive agent runs a fixed sequence:

    head -n 20 docs/D.txt                   # a peek
    grep -n -i -m 5 WORD docs/D.txt         # WORD: the question's longest word
    cat docs/D.txt                          # the broad read

Exposure is the characters those commands print (what lands in the agent's
context). Three agents:

- *no guard*: the mount without ``--guard-pid``;
- *guard, insists*: the guard is on (this process is the guarded root, so its
  ``cat`` children are carded); after a card the agent just runs ``cat`` again;
- *guard, follows*: after a card it runs the card's first suggestion,
  ``cat 'docs/D.txt@intent=<the question>'``.

``evidence shown`` is the share of questions whose annotated evidence is
visible in the agent's output (>= 80% of the evidence's characters, counted by
lines of the evidence found verbatim in the output). Documents under the
threshold (16,000 characters) are never carded; they are counted apart.

    .venv/bin/python scripts/bench_guard.py [--limit N] [--rounds 3] [--backend kernel]
    .venv/bin/python scripts/bench_guard.py --pdf-open-only --backend kernel    # a cold 250-page PDF
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sparsefs.artifacts.cache import ArtifactCache
from sparsefs.guard.card import MARK
from sparsefs.guard.policy import DEFAULT_THRESHOLD, Guard, GuardConfig
from sparsefs.protocol.access import Protocol
from sparsefs.source.rootfs import SourceRoot
from sparsefs.store.stats import Stats
from tests import mountutil

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "qa"
FILING = DATA.parent / "pdf" / "filings" / "3M_2022_10K.pdf"  # 252 pages
SETS = ("covidqa-dev", "qmsum")
AGENTS = ("no guard", "guard, insists", "guard, follows")


@dataclass(frozen=True)
class Task:
    doc: str
    question: str
    evidence: tuple[str, ...]
    length: int


@dataclass
class Tally:
    exposed: list[int] = field(default_factory=list)
    shown: int = 0
    cat_ms: list[float] = field(default_factory=list)


def load(name: str, limit: int | None) -> tuple[dict[str, str], list[Task]]:
    docs = {r["doc_id"]: r["text"] for r in map(json.loads, (DATA / f"{name}.docs.jsonl").open())}
    tasks: dict[str, Task] = {}
    for record in map(json.loads, (DATA / f"{name}.questions.jsonl").open()):
        doc = record["doc_id"]
        if record["unlocated"] or doc in tasks or doc not in docs:
            continue
        tasks[doc] = Task(doc, record["question"], tuple(record["evidence_text"]), len(docs[doc]))
    chosen = sorted(tasks.values(), key=lambda t: t.doc)[:limit]
    return {t.doc: docs[t.doc] for t in chosen}, chosen


def keyword(question: str) -> str:
    return max(re.findall(r"[A-Za-z][A-Za-z-]+", question), key=len, default="the")


def shell(command: list[str], cwd: Path) -> tuple[str, float]:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, timeout=120, check=False)
    return done.stdout.decode("utf-8", "replace"), (time.perf_counter() - start) * 1000


def shown(output: str, evidence: Sequence[str]) -> bool:
    """>= 80% of the evidence characters appear, line by line, verbatim in the output."""
    flat = " ".join(output.split())
    lines = [" ".join(line.split()) for text in evidence for line in text.splitlines() if line.strip()]
    total = sum(len(line) for line in lines)
    return total > 0 and sum(len(line) for line in lines if line in flat) >= 0.8 * total


def replay(mnt: Path, task: Task, agent: str, tally: Tally) -> None:
    path = f"docs/{task.doc}.txt"
    outputs = [
        shell(["head", "-n", "20", path], mnt)[0],
        shell(["grep", "-n", "-i", "-m", "5", keyword(task.question), path], mnt)[0],
    ]
    text, ms = shell(["cat", path], mnt)
    tally.cat_ms.append(ms)
    outputs.append(text)
    if text.startswith(MARK):
        follow = ["cat", f"{path}@intent={task.question.replace('%', '%25').replace('/', '%2F')}"]
        outputs.append(shell(follow if agent == "guard, follows" else ["cat", path], mnt)[0])
    tally.exposed.append(sum(len(out) for out in outputs))
    tally.shown += shown("\n".join(outputs), task.evidence)


def run_agent(src: Path, tasks: list[Task], agent: str, backend: str | None) -> tuple[Tally, dict[str, int]]:
    with tempfile.TemporaryDirectory(prefix="bench-guard-") as tmp:
        mnt = Path(tmp) / "mnt"
        mnt.mkdir()
        guard = [] if agent == "no guard" else [f"--guard-pid={os.getpid()}"]
        mount = mountutil.start(src, mnt, Path(tmp) / "state", *guard, backend=backend)
        try:
            tally = Tally()
            for task in tasks:
                replay(mnt, task, agent, tally)
            stats = json.loads((mnt / ".sparsefs" / "stats.json").read_text())
        finally:
            mountutil.stop(mount)
    return tally, {key: int(value) for key, value in stats.items() if key.startswith("guard_")}


def report(name: str, tasks: list[Task], rounds: list[dict[str, tuple[Tally, dict[str, int]]]]) -> None:
    big = sum(task.length > DEFAULT_THRESHOLD for task in tasks)
    print(
        f"\n{name}: {len(tasks)} documents/questions ({big} over {DEFAULT_THRESHOLD:,} chars), "
        f"median document {statistics.median(t.length for t in tasks):,.0f} chars, {len(rounds)} rounds"
    )
    print("| agent | total chars exposed | median per question | evidence shown | median `cat` ms | cards / insisted |")
    print("|---|---:|---:|---:|---:|---:|")
    base = sum(rounds[0]["no guard"][0].exposed)
    for agent in AGENTS:
        tally, stats = rounds[0][agent]
        total = sum(tally.exposed)
        ms = statistics.median(statistics.median(r[agent][0].cat_ms) for r in rounds)
        print(
            f"| {agent} | {total:,} ({total / base:.1%}) | {statistics.median(tally.exposed):,.0f} "
            f"| {tally.shown}/{len(tasks)} | {ms:.1f} | {stats.get('guard_cards', 0)} / "
            f"{stats.get('guard_insisted_reads', 0)} |"
        )
    for agent in AGENTS:
        if any(r[agent][0].exposed != rounds[0][agent][0].exposed for r in rounds):
            print(f"note: exposure of '{agent}' differed between rounds")


def open_cost(backend: str | None, files: int = 500, rounds: int = 31) -> None:
    """Warm open+read+close of small files by a guarded root (this process) vs an unguarded mount of the
    same files, both mounted at once and timed side by side in every round; the median of per-round ratios."""
    with tempfile.TemporaryDirectory(prefix="bench-guard-open-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        for n in range(files):
            (src / f"f{n}.txt").write_text(f"small file {n}\n")
        mounts = {}
        for label, guard in (("no guard", []), ("guarded", [f"--guard-pid={os.getpid()}"])):
            (Path(tmp) / label).mkdir()
            mounts[label] = mountutil.start(
                src, Path(tmp) / label, Path(tmp) / f"state-{label}", *guard, backend=backend
            )
        try:
            times = _side_by_side(mounts, files, rounds)
        finally:
            for mount in mounts.values():
                mountutil.stop(mount)
    ratios = sorted(g / b for b, g in zip(times["no guard"], times["guarded"], strict=True))
    base, guarded = (statistics.median(times[k]) for k in ("no guard", "guarded"))
    low, _, high = statistics.quantiles(ratios, n=4)
    print(
        f"\nopen+read+close of a small file, warm, by a guarded process ({files} files x {rounds} rounds, "
        f"{backend or 'auto'} backend):"
    )
    print(
        f"no guard {base:.1f} us, guarded {guarded:.1f} us; per-round ratio median x{statistics.median(ratios):.2f}, "
        f"quartiles x{low:.2f}-x{high:.2f}, range x{ratios[0]:.2f}-x{ratios[-1]:.2f}"
    )


def decide_cost(files: int = 500, rounds: int = 21) -> None:
    """The guard's own work per open (no FUSE): ``Guard.card`` on small files by a guarded root process."""
    with tempfile.TemporaryDirectory(prefix="bench-guard-decide-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        for n in range(files):
            (src / f"f{n}.txt").write_text(f"small file {n}\n")
        root, stats = SourceRoot.open(str(src)), Stats(Path(tmp) / "state" / "log.jsonl")
        child = subprocess.Popen(["sleep", "300"])
        guard = Guard(GuardConfig(pids=frozenset({child.pid})), root, Protocol(ArtifactCache(root)), stats, "/m")
        try:
            runs = [_decide_all(guard, child.pid, files) for _ in range(rounds + 1)][1:]
        finally:
            child.kill()
            child.wait()
            guard.close()
            stats.close()
            root.close()
    print(
        f"\nguard decision per open of a small file by a guarded root, in-process ({files} files x {rounds} rounds): "
        f"median {statistics.median(runs):.1f} us, range {min(runs):.1f}-{max(runs):.1f} us"
    )


def _decide_all(guard: Guard, pid: int, files: int) -> float:
    start = time.perf_counter()
    for n in range(files):
        guard.card(f"f{n}.txt", os.O_RDONLY, pid)
    return (time.perf_counter() - start) / files * 1e6


def pdf_open(backend: str | None, rounds: int = 3) -> None:
    """A cold 250-page filing: two carded ``cat``s of two copies at once (this process is the guarded root),
    while another thread reads a small file through the mount in a loop; fresh mount per round."""
    print(f"\ncold guarded cat of two copies of {FILING.name} at once, {backend or 'auto'} backend:")
    for _ in range(rounds):
        with tempfile.TemporaryDirectory(prefix="bench-guard-pdf-") as tmp:
            src, mnt = Path(tmp) / "src", Path(tmp) / "mnt"
            (src / "docs").mkdir(parents=True)
            mnt.mkdir()
            for name in ("a.pdf", "b.pdf"):
                shutil.copy(FILING, src / "docs" / name)
            (src / "docs" / "small.txt").write_text("small\n")
            mount = mountutil.start(src, mnt, Path(tmp) / "state", f"--guard-pid={os.getpid()}", backend=backend)
            try:
                took, worst, cards = _pdf_round(mnt / "docs")
            finally:
                mountutil.stop(mount)
        print(f"both cats {took:.0f} ms ({cards}/2 cards); worst small read meanwhile {worst:.0f} ms")


def _pdf_round(docs: Path) -> tuple[float, float, int]:
    worst, stop = [0.0], threading.Event()

    def small() -> None:
        while not stop.is_set():
            worst[0] = max(worst[0], shell(["cat", str(docs / "small.txt")], docs)[1])

    reader = threading.Thread(target=small)
    reader.start()
    start = time.perf_counter()
    with ThreadPoolExecutor(2) as pool:
        outputs = list(pool.map(lambda name: shell(["cat", name], docs)[0], ("a.pdf", "b.pdf")))
    took = (time.perf_counter() - start) * 1000
    time.sleep(0.5)
    stop.set()
    reader.join()
    return took, worst[0], sum(out.startswith(MARK) for out in outputs)


def _side_by_side(mounts: dict[str, mountutil.Mount], files: int, rounds: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {label: [] for label in mounts}
    for round_ in range(rounds + 1):
        for label, mount in mounts.items():
            took = _read_all(mount.mountpoint, files)
            if round_:  # the first round warms the kernel's and the daemon's caches
                times[label].append(took)
    return times


def _read_all(mnt: Path, files: int) -> float:
    """Microseconds per open+read+close."""
    start = time.perf_counter()
    for n in range(files):
        (mnt / f"f{n}.txt").read_bytes()
    return (time.perf_counter() - start) / files * 1e6


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=None, help="documents per QA set (default: all)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backend", default=None, help="kernel or mfusepy (default: auto)")
    parser.add_argument("--open-cost-only", action="store_true", help="only the per-open overhead")
    parser.add_argument("--pdf-open-only", action="store_true", help="only the cold 250-page PDF open")
    args = parser.parse_args(argv)
    if args.pdf_open_only:
        pdf_open(args.backend)
        return 0
    if args.open_cost_only:
        decide_cost()
        open_cost(args.backend)
        return 0
    for name in SETS:
        docs, tasks = load(name, args.limit)
        with tempfile.TemporaryDirectory(prefix="bench-guard-src-") as tmp:
            src = Path(tmp)
            (src / "docs").mkdir()
            for doc, text in docs.items():
                (src / "docs" / f"{doc}.txt").write_text(text)
            rounds = [
                {agent: run_agent(src, tasks, agent, args.backend) for agent in AGENTS} for _ in range(args.rounds)
            ]
        report(name, tasks, rounds)
    pdf_open(args.backend)
    decide_cost()
    open_cost(args.backend)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
