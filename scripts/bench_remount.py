"""Benchmark what the parsed-artifact store saves after a remount (medians of several runs).

    .venv/bin/python scripts/bench_remount.py [--runs 5] [--rows 100000]

For four artifacts (the 252-page 3M 10-K PDF, a synthetic 100,000-row CSV
written under /tmp, the largest document of data/qa, and all 70 QMSum transcripts
in one markdown file) it times
one intent read (``ArtifactCache.load`` + ``Reader.locate``) three ways, each
on fresh objects per run:

- cold: a new cache without a store (read, hash, parse, build indexes, locate);
- store: a new cache over a store filled by an earlier session (the remount
  case: read, fingerprint from the table, load from disk, locate);
- warm: a second read on a cache that already holds the parse in memory.

The store is filled by one session that reads once and closes the store (so
indexes a Reader builds lazily on the first locate are saved too). The page
cache is warm for both the sources and the store files; after a reboot both
get slower by the disk read.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from readers.base import ReadIntent
from sparsefs.artifacts.cache import ArtifactCache
from sparsefs.source.rootfs import SourceRoot
from sparsefs.store.parsed import open_store

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
TMP = Path("/tmp/sparsefs-bench-remount")
OLD_NS = 1_600_000_000 * 10**9  # an mtime far from now: the fingerprint is not racy


def write_csv(path: Path, rows: int) -> None:
    rng = random.Random(5)
    regions, products = ["EU", "US", "APAC", "LATAM"], [f"product-{i:03d}" for i in range(200)]
    with path.open("w") as out:
        out.write("date,region,product,units,revenue,note\n")
        for i in range(rows):
            out.write(f"2023-{1 + i % 12:02d}-{1 + i % 28:02d},{rng.choice(regions)},{rng.choice(products)},"
                      f"{rng.randint(1, 500)},{rng.uniform(10, 9000):.2f},order {i} shipped via {rng.choice('ABC')}\n")


def largest_qa_doc() -> tuple[str, str]:
    """The longest document of data/qa and the first question about it."""
    best: dict[str, str] = {}
    for docs in sorted((DATA / "qa").glob("*.docs.jsonl")):
        with docs.open() as lines:
            for line in lines:
                record = json.loads(line)
                if len(record["text"]) > len(best.get("text", "")):
                    best = {"text": record["text"], "doc_id": record["doc_id"], "set": docs.name.split(".")[0]}
    with (DATA / "qa" / f"{best['set']}.questions.jsonl").open() as lines:
        question = next(q["question"] for q in map(json.loads, lines) if q["doc_id"] == best["doc_id"])
    return best["text"], question


def prepare(rows: int) -> dict[str, str]:
    """Source files under TMP/src and one intent each."""
    src = TMP / "src"
    shutil.rmtree(TMP, ignore_errors=True)
    src.mkdir(parents=True)
    shutil.copyfile(DATA / "pdf" / "filings" / "3M_2022_10K.pdf", src / "3M_2022_10K.pdf")
    write_csv(src / "sales.csv", rows)
    text, question = largest_qa_doc()
    (src / "qa-doc.md").write_text(text)
    with (DATA / "qa" / "qmsum.docs.jsonl").open() as lines:
        transcripts = [f"# {r['doc_id']}\n\n{r['text']}\n\n" for r in map(json.loads, lines)]
    (src / "qmsum-all.md").write_text("".join(transcripts))
    for path in src.iterdir():
        os.utime(path, ns=(OLD_NS, OLD_NS))
    return {
        "3M_2022_10K.pdf": "How much did 3M spend on research, development and related expenses in 2022?",
        "sales.csv": "revenue of product-042 in EU; units shipped via B",
        "qa-doc.md": question,
        "qmsum-all.md": "what did the group decide about the remote control buttons; budget",
    }


def intent_read(cache: ArtifactCache, rel: str, intent: str) -> int:
    artifact = cache.load(rel)
    slots = tuple(s.strip() for s in intent.split(";"))
    batch = artifact.reader.locate(artifact.parsed, ReadIntent(intent, slots), 4000)
    return len(batch.items)


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return (time.perf_counter() - started) * 1000


def bench(root: SourceRoot, rel: str, intent: str, runs: int) -> dict[str, float]:
    """Medians in ms; ``served`` is 0 when the store declined the artifact (its parse was too cheap)."""
    state = TMP / f"state-{rel}"
    store = open_store(state)
    intent_read(ArtifactCache(root, store=store), rel, intent)
    store.close()
    cold, loaded, warm, served = [], [], [], True
    for _ in range(runs):
        cache = ArtifactCache(root)
        cold.append(timed(lambda: intent_read(cache, rel, intent)))  # noqa: B023
        warm.append(timed(lambda: intent_read(cache, rel, intent)))  # noqa: B023
        store = open_store(state)
        remounted = ArtifactCache(root, store=store)
        loaded.append(timed(lambda: intent_read(remounted, rel, intent)))  # noqa: B023
        served = remounted.disk_loads == 1  # False: the parse was too cheap to store
        store.close()
    size = sum(p.stat().st_size for p in (state / "index" / "parsed").rglob("*") if p.is_file())
    return {"cold": statistics.median(cold), "store": statistics.median(loaded), "warm": statistics.median(warm),
            "mb": size / 2**20, "served": served, "src_mb": (TMP / "src" / rel).stat().st_size / 2**20}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rows", type=int, default=100_000)
    args = parser.parse_args()
    cases = prepare(args.rows)
    root = SourceRoot.open(str(TMP / "src"))
    print(f"intent read = ArtifactCache.load + Reader.locate; median of {args.runs} runs, ms\n")
    print("| artifact | source MB | store entry MB | cold | from store | warm memory | cold/store | store/warm |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for rel, intent in cases.items():
        r = bench(root, rel, intent, args.runs)
        store_ms = f"{r['store']:.1f}" if r["served"] else f"{r['store']:.1f} (not stored: parse too cheap)"
        print(f"| {rel} | {r['src_mb']:.1f} | {r['mb']:.1f} | {r['cold']:.1f} | {store_ms} | {r['warm']:.2f} "
              f"| {r['cold'] / r['store']:.1f}x | {r['store'] / r['warm']:.0f}x |")
    root.close()


if __name__ == "__main__":
    main()
