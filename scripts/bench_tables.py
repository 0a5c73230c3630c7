"""Benchmark the Tables Reader on synthetic files under /tmp (medians of several runs).

    .venv/bin/python scripts/bench_tables.py [--runs 5] [--rows 1000000] [--xlsx-rows 100000]

Measures, on fresh bytes each time (cold = parse + request, warm = the parsed
object reused):

- exact @sum over a 1,000,000-row, 5-column CSV (ints, floats, text), once
  without any quote character and once with quoted text fields (the csv path);
  bar: cold <= 3 s, exposing < 500 characters;
- ``@scout`` of a 100,000-row XLSX written with openpyxl write_only; bar: <= 2 s;
- the peak RSS of a fresh process that parses the plain 1M-row CSV and sums a
  column (VmHWM), and the first intent read on it (which builds the BM25
  row index) with that process's peak RSS afterwards.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import random
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from readers.base import Parsed
from readers.kit.source import MemorySource
from readers.ops import build_operation
from readers.table.reader import TableReader

TMP = Path("/tmp/sparsefs-bench-tables")
REGIONS = ["EU", "US", "APAC", "LATAM", "Middle East, Africa"]


def make_csv(path: Path, rows: int, quoted: bool) -> None:
    rng = random.Random(7)
    regions = REGIONS if quoted else REGIONS[:4]
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "region", "qty", "price", "note"])
        for i in range(rows):
            price, note = f"{rng.uniform(0, 1000):.2f}", f"item {rng.randrange(10000)}"
            writer.writerow([i + 1, rng.choice(regions), rng.randrange(1, 100), price, note])


def make_xlsx(path: Path, rows: int) -> None:
    import openpyxl  # type: ignore[import-untyped]

    rng = random.Random(7)
    book = openpyxl.Workbook(write_only=True)
    sheet = book.create_sheet("Sales")
    sheet.append(["id", "region", "product", "qty", "price", "date"])
    start = dt.date(2020, 1, 1)
    for i in range(rows):
        day = start + dt.timedelta(days=rng.randrange(1000))
        product, price = f"prod-{rng.randrange(500)}", round(rng.uniform(1, 1000), 2)
        sheet.append([i + 1, rng.choice(REGIONS), product, rng.randrange(1, 100), price, day])
    book.save(path)


def timed(fn: Callable[[], object], runs: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(runs):
        started = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def bench_sum(path: Path, runs: int) -> None:
    reader, data = TableReader(), path.read_bytes()
    op = build_operation("sum", "price", {}, None)

    def cold() -> int:
        parsed = reader.parse(MemorySource(path.name, data))
        return sum(len(i.text) for i in reader.operate(parsed, op, 2000).items)

    cold_s, exposed = timed(cold, runs)
    parsed: Parsed = reader.parse(MemorySource(path.name, data))
    parse_s, _ = timed(lambda: reader.parse(MemorySource(path.name, data)), runs)
    reader.operate(parsed, op, 2000)
    warm_s, _ = timed(lambda: reader.operate(parsed, op, 2000), runs)
    group = build_operation("sum", "price", {"by": "region", "where": "qty>=50"}, 5)
    group_s, _ = timed(lambda: reader.operate(parsed, group, 2000), runs)
    text = reader.operate(parsed, op, 2000).items[0].text
    print(f"{path.name}: {len(data) / 2**20:.1f} MiB; cold parse+sum {cold_s:.2f} s (parse alone {parse_s:.2f} s), "
          f"warm sum {warm_s * 1000:.0f} ms, warm sum by region where qty>=50 {group_s * 1000:.0f} ms; "
          f"exposed {exposed} chars: {text}")


def bench_scout(path: Path, runs: int) -> None:
    reader, data = TableReader(), path.read_bytes()

    def cold() -> int:
        return len(reader.preview(reader.parse(MemorySource(path.name, data)), 2000))

    cold_s, chars = timed(cold, runs)
    parsed = reader.parse(MemorySource(path.name, data))
    warm_s, _ = timed(lambda: reader.preview(parsed, 2000), runs)
    print(f"{path.name}: {len(data) / 2**20:.1f} MiB; cold parse+@scout {cold_s:.2f} s, "
          f"warm @scout {warm_s * 1000:.0f} ms, {chars} chars")


def peak_rss_mib() -> float:
    """VmHWM (reset by exec, unlike ru_maxrss, which keeps the forking parent's peak)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure_rss(path: Path) -> None:
    """Run in a fresh process: parse + sum, then the first intent read; print peak RSS after each."""
    from readers.base import ReaderError, ReadIntent

    reader, data = TableReader(), path.read_bytes()
    parsed = reader.parse(MemorySource(path.name, data))
    reader.operate(parsed, build_operation("sum", "price", {}, None), 2000)
    rss = peak_rss_mib()
    print(f"peak RSS after parse + sum of {path.name}: {rss:.0f} MiB")
    started = time.perf_counter()
    try:
        reader.locate(parsed, ReadIntent("item 4242 APAC", ("item 4242 APAC",)), 1500)
    except ReaderError as err:
        print(f"first @intent: refused in {time.perf_counter() - started:.3f} s ({err.message})")
        return
    took = time.perf_counter() - started
    rss = peak_rss_mib()
    print(f"first @intent (builds the BM25 row index): {took:.2f} s; peak RSS then {rss:.0f} MiB")


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--rss-of":
        measure_rss(Path(sys.argv[2]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--xlsx-rows", type=int, default=100_000)
    args = parser.parse_args()
    TMP.mkdir(parents=True, exist_ok=True)
    for quoted in (False, True):
        path = TMP / f"rows{args.rows}{'-quoted' if quoted else ''}.csv"
        if not path.exists():
            make_csv(path, args.rows, quoted)
        bench_sum(path, args.runs)
    subprocess.run([sys.executable, __file__, "--rss-of", str(TMP / f"rows{args.rows}.csv")], check=True)
    small = TMP / "rows200000.csv"
    if not small.exists():
        make_csv(small, 200_000, quoted=False)
    subprocess.run([sys.executable, __file__, "--rss-of", str(small)], check=True)
    xlsx = TMP / f"rows{args.xlsx_rows}.xlsx"
    if not xlsx.exists():
        make_xlsx(xlsx, args.xlsx_rows)
    bench_scout(xlsx, args.runs)


if __name__ == "__main__":
    main()
