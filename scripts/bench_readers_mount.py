#!/usr/bin/env python3
"""The Readers issue's bars, end to end through a real mount (what a user's `cat` sees).

Workspace (under /tmp, built once): the 3M 2022 10-K (252 pages), a synthetic
1,000,000-row CSV and 100,000-row XLSX (scripts/bench_tables.py's
generators), the 10,000-line Apache log and a 1 GiB single-line file.

- cold: a fresh mount (fresh daemon: nothing parsed, pymupdf not imported),
  then one `cat` of the request; the time of that `cat`.
- warm: on the same mount, a different request on the same artifact (a new
  virtual path, so a new pack is built, but the parse is cached).

Medians of --runs runs; exposure is the pack's `exposure.pack_chars`.

    .venv/bin/python scripts/bench_readers_mount.py [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_tables import make_csv, make_xlsx  # noqa: E402

from tests import mountutil  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
WORK = Path("/tmp/sparsefs-bench-readers")

# (label, cold request, warm request, bar for cold seconds, bar for warm seconds)
CASES = [
    ("10-K 252 p intent", "3M_2022_10K.pdf@intent=total net sales 2022; number of employees",
     "3M_2022_10K.pdf@intent=research and development expenses", 3.0, 0.1),
    ("1M-row CSV sum", "rows1000000.csv@sum=price", "rows1000000.csv@sum=qty&where=region:north", 3.0, None),
    ("100k-row XLSX scout", "rows100000.xlsx@scout", "rows100000.xlsx@scout&k=5", 2.0, None),
    ("apache log count by status", "apache_logs@count&by=status", "apache_logs@filter=wp-login", None, None),
    ("1 GiB one-line file", "one-line.txt@intent=anything", "one-line.txt@scout", None, None),
]


def workspace() -> Path:
    src = WORK / "src"
    if (src / "rows100000.xlsx").exists():
        return src
    src.mkdir(parents=True, exist_ok=True)
    shutil.copy(DATA / "pdf" / "filings" / "3M_2022_10K.pdf", src)
    shutil.copy(DATA / "logs" / "elastic-examples" / "apache_logs", src)
    make_csv(src / "rows1000000.csv", 1_000_000, quoted=False)
    with open(src / "one-line.txt", "wb") as f:
        f.write(b"a" * 4096)
        f.truncate(1 << 30)
    make_xlsx(src / "rows100000.xlsx", 100_000)
    return src


def cat(mount: mountutil.Mount, name: str) -> tuple[float, dict[str, object]]:
    started = time.perf_counter()
    out = subprocess.run(["cat", name + "&format=json"], cwd=mount.mountpoint, capture_output=True,
                         timeout=120, check=True)
    return time.perf_counter() - started, json.loads(out.stdout)


def run_once(src: Path, cold_req: str, warm_req: str, n: int) -> tuple[float, float, dict[str, object]]:
    mnt, state = WORK / "mnt", WORK / f"state{n}"
    mnt.mkdir(exist_ok=True)
    shutil.rmtree(state, ignore_errors=True)
    mount = mountutil.start(src, mnt, state)
    try:
        cold, pack = cat(mount, cold_req)
        warm, _ = cat(mount, warm_req)
    finally:
        mountutil.stop(mount)
    return cold, warm, pack


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cases", default="", help="comma-separated case labels' first words (e.g. 1M-row)")
    args = parser.parse_args()
    wanted = [w.strip() for w in args.cases.split(",") if w.strip()]
    src = workspace()
    print(f"medians of {args.runs} runs; cold = fresh daemon; warm = another request, parse cached")
    print("| case | cold s | bar | warm ms | bar | decision | pack chars | L |")
    print("|---|---|---|---|---|---|---|---|")
    for n, (label, cold_req, warm_req, cold_bar, warm_bar) in enumerate(CASES):
        if wanted and label.split()[0] not in wanted:
            continue
        results = [run_once(src, cold_req, warm_req, n) for _ in range(args.runs)]
        cold = statistics.median(r[0] for r in results)
        warm = statistics.median(r[1] for r in results)
        pack = results[-1][2]
        exposure = pack["exposure"]
        assert isinstance(exposure, dict)
        print(f"| {label} | {cold:.2f} | {_bar(cold, cold_bar)} | {warm * 1000:.0f} | "
              f"{_bar(warm, warm_bar)} | {pack['decision']} | {exposure['pack_chars']:,} | "
              f"{exposure['full_view_chars']:,} |")


def _bar(value: float, bar: float | None) -> str:
    if bar is None:
        return "-"
    return f"≤ {bar:g} s {'pass' if value <= bar else 'FAIL'}"


if __name__ == "__main__":
    main()
