#!/usr/bin/env python3
"""Intent latency with the dense extra, end to end through a real mount (issue 6's latency bars).

Workspace (under /tmp): the 3M 2022 10-K (252 pages) and the longest COVID-QA
dev document as a .txt. Each run mounts afresh (fresh daemon and state dir:
nothing parsed, no model loaded) and times one `cat` per request:

- cold: the first intent on the artifact (parse, model load, shortlist embedding);
- 2nd: a new question right after it, while the background warm-up
  (sparsefs.artifacts.warmup) has just started;
- warm-up: how long the background warm-up took (the daemon's log line);
- warm: new questions after the warm-up (median), each a new virtual path,
  so a new pack is built; the query is embedded, the units come from the cache;
- served: the configuration the selector chose (the pack's configuration line).

Reports medians over --runs runs and the daemon's RSS at the end of a run.

    .venv/bin/python scripts/bench_dense_mount.py [--runs 3] [--backend auto]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests import mountutil  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
WORK = Path("/tmp/sparsefs-bench-dense")
FILING = "3M_2022_10K.pdf"
PAPER = "covidqa-longest.txt"
QUESTIONS = {
    FILING: [
        "How much did 3M spend on research and development in 2022?",
        "How many people did 3M employ at the end of 2022?",
        "When will 3M exit PFAS manufacturing?",
        "Who audited 3M's internal control over financial reporting?",
        "Where are 3M's principal executive offices?",
        "How many shareholders of record did 3M have in January 2023?",
        "What are 3M's reportable business segments?",
    ],
}
WARMUP_LINE = re.compile(r"dense warm-up: (\d+) units in ([\d.]+) s")


@dataclass
class Run:
    cold: float
    second: float
    warmup_s: float | None
    units: int
    warm: list[float] = field(default_factory=list)
    served: str = ""
    rss_mib: float = 0.0


def workspace() -> Path:
    src = WORK / "src"
    if src.exists():
        return src
    src.mkdir(parents=True)
    shutil.copy(DATA / "pdf" / "filings" / FILING, src / FILING)
    docs = [json.loads(line) for line in (DATA / "qa" / "covidqa-dev.docs.jsonl").open()]
    longest = max(docs, key=lambda d: len(d["text"]))
    (src / PAPER).write_text(longest["text"], encoding="utf-8")
    questions = [json.loads(line) for line in (DATA / "qa" / "covidqa-dev.questions.jsonl").open()]
    mine = [q["question"] for q in questions if q["doc_id"] == longest["doc_id"]]
    (WORK / "paper-questions.json").write_text(json.dumps(mine[:7]))
    return src


def cat(mnt: Path, name: str, question: str) -> tuple[float, dict[str, object]]:
    path = f"{name}@intent={quote(question, safe=' ,?')}&format=json"
    started = time.perf_counter()
    out = subprocess.run(["cat", path], cwd=mnt, capture_output=True, timeout=300, check=True)
    return time.perf_counter() - started, json.loads(out.stdout)


def warmed(mount: mountutil.Mount, count: int, timeout: float = 600.0) -> list[tuple[int, float]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [(int(u), float(s)) for u, s in WARMUP_LINE.findall(mount.stderr())]
        if len(found) >= count:
            return found
        time.sleep(0.2)
    return [(int(u), float(s)) for u, s in WARMUP_LINE.findall(mount.stderr())]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def run_once(src: Path, name: str, questions: list[str], n: int, backend: str) -> Run:
    mnt, state = WORK / "mnt", WORK / f"state{n}"
    mnt.mkdir(exist_ok=True)
    shutil.rmtree(state, ignore_errors=True)
    mount = mountutil.start(src, mnt, state, "--verbose", backend=None if backend == "auto" else backend)
    try:
        cold, pack = cat(mnt, name, questions[0])
        second, _ = cat(mnt, name, questions[1])
        done = warmed(mount, 1)
        run = Run(cold, second, done[0][1] if done else None, done[0][0] if done else 0)
        run.warm = [cat(mnt, name, q)[0] for q in questions[2:]]
        run.served = str(pack.get("configuration") or "")
        run.rss_mib = rss_mib(mount.process.pid)
    finally:
        mountutil.stop(mount)
    return run


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms" if seconds < 10 else f"{seconds:,.1f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--backend", default="auto")
    args = parser.parse_args()
    src = workspace()
    questions = dict(QUESTIONS, **{PAPER: json.loads((WORK / "paper-questions.json").read_text())})
    print("| artifact | cold | 2nd question (warm-up running) | warm-up | warm (new question, median) "
          "| served | daemon RSS |")
    print("|---|---|---|---|---|---|---|")
    for name in (FILING, PAPER):
        runs = [run_once(src, name, questions[name], n, args.backend) for n in range(args.runs)]
        warm = statistics.median(t for r in runs for t in r.warm)
        warmups = [r.warmup_s for r in runs if r.warmup_s is not None]
        warmup = f"{statistics.median(warmups):.1f} s ({runs[0].units:,} units)" if warmups else "not seen"
        print(f"| {name} | {_ms(statistics.median(r.cold for r in runs))} "
              f"| {_ms(statistics.median(r.second for r in runs))} | {warmup} | {_ms(warm)} "
              f"| {runs[0].served.split(' (')[0]} | {statistics.median(r.rss_mib for r in runs):,.0f} MiB |")


if __name__ == "__main__":
    main()
