"""Benchmark the JSON, JSONL and Log Readers: cold parse and warm requests, medians of several runs.

Real files come from ../shared/data; the big synthetic ones (~60 MB each) are
written under /tmp/sparsefs-bench the first time. Usage::

    .venv/bin/python scripts/bench_json_logs.py [--runs 3] [--small-only]

Cold = a fresh ``parse``; warm = requests on the parsed object reused. The
first intent read builds the BM25 index, so it is reported apart ("locate
first") from the warm median.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from readers.base import Parsed, Reader, ReaderError, ReadIntent
from readers.jsondata.jsonl import JsonlReader
from readers.jsondata.reader import JsonReader
from readers.kit.source import MemorySource
from readers.logs.reader import LogReader
from readers.ops import Operation, parse_where

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
LOGS = DATA / "logs" / "elastic-examples"
BIG = Path("/tmp/sparsefs-bench")


def big_json() -> Path:
    path = BIG / "big.json"
    if not path.exists():
        rng = random.Random(1)
        items = [
            {"id": i, "name": f"item {i}", "tags": [rng.choice(["red", "green", "blue"]) for _ in range(3)],
             "price": round(rng.random() * 100, 2),
             "meta": {"created": f"2020-01-{i % 28 + 1:02d}T10:00:00", "owner": {"login": f"user{i % 977}"}},
             "text": "lorem ipsum dolor sit amet " * 3}
            for i in range(230_000)
        ]
        path.write_bytes(orjson.dumps({"data": {"items": items}}))
    return path


def repeated(source: Path, name: str, times: int) -> Path:
    path = BIG / name
    if not path.exists():
        path.write_bytes(source.read_bytes() * times)
    return path


def median_s(fn: Callable[[], Any], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def bench(reader: Reader, path: Path, intent: ReadIntent, operation: Operation, anchor: str, runs: int) -> None:
    data = path.read_bytes()
    source = MemorySource(path.name, data)
    cold = median_s(lambda: reader.parse(source), runs)
    parsed: Parsed = reader.parse(source)
    started = time.perf_counter()
    try:
        reader.locate(parsed, intent, 2000)
        first = f"{time.perf_counter() - started:8.3f}"
    except ReaderError as err:  # a bounded refusal is a result too
        first = f"refused ({type(err).__name__}, {time.perf_counter() - started:.3f} s)"
    warm = {
        "preview": median_s(lambda: reader.preview(parsed, 2000), runs),
        "focus": median_s(lambda: reader.focus(parsed, anchor), runs),
        "operate": median_s(lambda: reader.operate(parsed, operation, 2000), runs),
    }
    if not first.startswith("refused"):
        warm["locate"] = median_s(lambda: reader.locate(parsed, intent, 2000), runs)
    mb = len(data) / 2**20
    cells = "  ".join(f"{k} {v * 1000:7.1f} ms" for k, v in warm.items())
    print(f"{reader.name:5} {path.name[:34]:34} {mb:6.1f} MB  parse {cold:6.3f} s ({cold * 1000 / mb:5.0f} ms/MB)  "
          f"locate first {first} s  warm: {cells}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--small-only", action="store_true")
    args = parser.parse_args()
    runs = args.runs
    json_reader, jsonl_reader, log_reader = JsonReader(), JsonlReader(), LogReader()
    issues = ReadIntent("issue title", ("issue title",))
    bench(json_reader, DATA / "json" / "octokit-fixtures" / "paginate-issues.raw-fixture.json", issues,
          Operation("path", "$[*].response[*].number"), "$[15].response", runs)
    peers = ReadIntent("unhealthy peers", ("unhealthy peers",))
    active = Operation("filter", where=parse_where("connections.active>=3"), since="2015-10-31T00:10")
    bench(jsonl_reader, LOGS / "nginxplus_json_logs.jsonl", peers, active, "L100-120", runs)
    errors = ReadIntent("no replica online", ("no replica online",))
    bench(log_reader, LOGS / "apache_logs", ReadIntent("kibana dashboard", ("kibana dashboard",)),
          Operation("count", by="status"), "L120-180", runs)
    bench(log_reader, LOGS / "kafka0_state-change.log.2016-12-19-16", errors,
          Operation("filter", where=parse_where("level:ERROR")), "L120-180", runs)
    if args.small_only:
        return
    BIG.mkdir(exist_ok=True)
    scoped = ReadIntent("owner user12", ("owner user12",), scope="$.data.items[1000:3000]")
    bench(json_reader, big_json(), scoped, Operation("sum", "$.data.items[*].price"), "$.data.items[123456]", runs)
    bench(jsonl_reader, repeated(LOGS / "nginxplus_json_logs.jsonl", "big.jsonl", 20),
          ReadIntent("unhealthy peers", ("unhealthy peers",), scope="L1-2000"), active, "L9000-9010", runs)
    bench(log_reader, repeated(LOGS / "apache_logs", "big_apache_logs", 25),
          ReadIntent("kibana dashboard", ("kibana dashboard",), scope="L1-20000"),
          Operation("filter", r"\.php", where=parse_where("status>=400")), "L120000-120060", runs)


if __name__ == "__main__":
    main()
