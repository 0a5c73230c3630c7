#!/usr/bin/env python3
"""Folder reads over ../shared/data: DIR@scout and DIR@intent, cold and warm.

Each request goes grammar → protocol → Gate → Folder Reader → member Readers,
minus FUSE, as a mounted ``cat 'DIR@...'`` does. Cold = a fresh ArtifactCache
(every member parsed); a cold parse past the Folder Reader's time bound is
flagged ``partial-index`` and the next request continues (members already
parsed are warm), so cold is reported as the requests it took until the index
was complete. Warm = the same request again on a fresh episode.

    .venv/bin/python scripts/bench_folder.py [--runs 3] [--dir ../shared/data]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from readers.ops import OPERATIONS  # noqa: E402
from sparsefs.artifacts.cache import ArtifactCache  # noqa: E402
from sparsefs.protocol.access import Protocol, Served  # noqa: E402
from sparsefs.protocol.grammar import parse_suffix  # noqa: E402
from sparsefs.source.rootfs import SourceRoot  # noqa: E402

INTENTS = {
    "pdf/filings": "3M total net sales 2022; number of employees",
    "csv": "population of Germany",
    "logs/elastic-examples": "controller failover broker shutdown",
    ".": "dividends per share declared",
}


def serve(protocol: Protocol, folder: str, suffix: str) -> tuple[Served, float]:
    started = time.perf_counter()
    served = protocol.serve(folder, parse_suffix(suffix, OPERATIONS))
    return served, time.perf_counter() - started


def cold(root: SourceRoot, folder: str, suffix: str) -> tuple[Served, float, int]:
    protocol = Protocol(ArtifactCache(root))
    total, requests = 0.0, 0
    while True:
        served, seconds = serve(protocol, folder, suffix)
        total, requests = total + seconds, requests + 1
        if "partial-index" not in served.pack.flags or requests >= 20:
            return served, total, requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", default=str(ROOT.parent / "shared" / "data"))
    args = parser.parse_args()
    root = SourceRoot.open(args.dir)
    print("| folder | request | cold s (requests) | warm ms | pack chars | L | files read |")
    print("|---|---|---|---|---|---|---|")
    for folder, intent in INTENTS.items():
        rel = "" if folder == "." else folder
        for suffix in ("scout", f"intent={intent}"):
            colds = [cold(root, rel, suffix) for _ in range(args.runs)]
            served, _, requests = colds[-1]
            protocol = Protocol(ArtifactCache(root))
            while "partial-index" in serve(protocol, rel, suffix)[0].pack.flags:
                pass
            warms = [serve(protocol, rel, suffix + "&k=5" * (i % 2))[1] for i in range(args.runs * 2)]
            print(f"| {folder} | @{suffix[:40]} | {statistics.median(c[1] for c in colds):.2f} ({requests}) "
                  f"| {statistics.median(warms) * 1000:.1f} | {served.exposed_chars:,} | {served.full_view_chars:,} "
                  f"| {served.pack.scope.note[:60]} |")


if __name__ == "__main__":
    main()
