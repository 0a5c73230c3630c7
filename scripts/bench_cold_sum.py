#!/usr/bin/env python3
"""A cold exact ``@sum`` over a 1M-row CSV (issue 27's bar: 1 s), two source trees side by side.

Each measurement is a fresh process (``python -I``, cwd ``/``) that imports the tree given, reads the
CSV bytes, then times parse + ``@sum=price`` through the Tables Reader (the daemon's work for a cold
``cat 'rows.csv@sum=price'`` after it read the file), and a second ``@sum`` (warm, column cached).
Trees are interleaved round by round, so load drifts hit both; the table gives medians and the median
of per-round ratios (tree / first tree).

    .venv/bin/python scripts/bench_cold_sum.py --trees /path/to/base,/path/to/new [--rounds 5] [--rows 1000000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from bench_tables import TMP, make_csv  # noqa: E402

CHILD = """
import json, sys, time
sys.path.insert(0, {tree!r})
from readers.kit.source import MemorySource
from readers.ops import build_operation
from readers.table.reader import TableReader
data = open({path!r}, "rb").read()
reader, op = TableReader(), build_operation("sum", "price", {{}}, None)
started = time.perf_counter()
parsed = reader.parse(MemorySource("rows.csv", data))
parse = time.perf_counter() - started
result = reader.operate(parsed, op, 2000).items[0].text
cold = time.perf_counter() - started
again = time.perf_counter()
reader.operate(parsed, op, 2000)
print(json.dumps({{"parse": parse, "cold": cold, "warm": time.perf_counter() - again, "result": result[:60]}}))
"""


def measure(tree: str, path: Path) -> dict[str, float | str]:
    code = CHILD.format(tree=tree, path=str(path))
    out = subprocess.run([sys.executable, "-I", "-c", code], cwd="/", capture_output=True, text=True, check=True,
                         timeout=300)
    found: dict[str, float | str] = json.loads(out.stdout)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--trees", required=True, help="comma-separated source trees; the first is the reference")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    trees = [t.strip() for t in args.trees.split(",") if t.strip()]
    path = TMP / f"rows{args.rows}.csv"
    if not path.exists():
        TMP.mkdir(parents=True, exist_ok=True)
        make_csv(path, args.rows, quoted=False)
    runs: dict[str, list[dict[str, float | str]]] = {t: [] for t in trees}
    for n in range(args.rounds):
        for tree in trees[n % len(trees):] + trees[: n % len(trees)]:  # the order rotates per round
            runs[tree].append(measure(tree, path))
    print(f"{args.rounds} interleaved rounds, {args.rows:,} rows ({path.stat().st_size / 2**20:.1f} MiB)\n")
    print("| tree | parse | cold parse + @sum | warm @sum | cold vs first tree | result |")
    print("|---|---|---|---|---|---|")
    for tree in trees:
        mine, ref = runs[tree], runs[trees[0]]
        ratio = statistics.median(float(m["cold"]) / float(r["cold"]) for m, r in zip(mine, ref, strict=True))
        print(f"| {tree} | {_median(mine, 'parse')} | {_median(mine, 'cold')} | {_median(mine, 'warm')} "
              f"| {ratio:.2f}x | {mine[0]['result']} |")


def _median(runs: list[dict[str, float | str]], key: str) -> str:
    return f"{statistics.median(float(r[key]) for r in runs) * 1000:,.0f} ms"


if __name__ == "__main__":
    main()
