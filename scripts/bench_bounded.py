"""The parse bound's own costs: the parent's peak RSS for a large result, and a fork at daemon sizes.

A bounded parse reads the child's pickled result into one buffer and unpickles it; past
``Bounds.result_bytes`` it stops reading and kills the child. Each size runs in a fresh process
(peak RSS is per process). The fork time is measured with the parent's heap grown to each size
(a daemon with that much parsed in memory): os.fork copies the page tables, so it grows with RSS.

Usage:
  .venv/bin/python scripts/bench_bounded.py [--result-mb 600 200] [--rss-mb 80 1400] [--forks 5]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sparsefs.artifacts.bounded import BoundExceeded, Bounds, run_bounded


def peak_mib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10


def one_result(mib: int) -> str:
    before, started = peak_mib(), time.monotonic()
    try:
        got = f"returned {len(run_bounded(lambda: b'x' * (mib << 20), Bounds(), 'bench')) >> 20} MiB"
    except BoundExceeded as err:
        got = f"refused ({err.message})"
    return (
        f"result {mib} MiB: {got}; parent peak RSS {before} -> {peak_mib()} MiB in {time.monotonic() - started:.2f} s"
    )


def fork_ms(rss_mib: int, forks: int) -> str:
    ballast = [bytearray(os.urandom(1 << 20)) for _ in range(rss_mib)]  # touched: resident
    times = []
    for _ in range(forks):
        started = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        times.append((time.perf_counter() - started) * 1000)
        os.waitpid(pid, 0)
    del ballast
    return f"fork at ~{rss_mib} MiB RSS: median {statistics.median(times):.1f} ms of {forks}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--result-mb", type=int, nargs="*", default=[600, 200])
    parser.add_argument("--rss-mb", type=int, nargs="*", default=[80, 1400])
    parser.add_argument("--forks", type=int, default=5)
    parser.add_argument("--one", nargs=2, help=argparse.SUPPRESS)  # internal: one measurement in this process
    args = parser.parse_args()
    if args.one:
        kind, mib = args.one[0], int(args.one[1])
        print(one_result(mib) if kind == "result" else fork_ms(mib, args.forks), flush=True)
        return
    runs = [("result", mib) for mib in args.result_mb] + [("fork", mib) for mib in args.rss_mb]
    for kind, mib in runs:
        cmd = [sys.executable, __file__, "--forks", str(args.forks), "--one", kind, str(mib)]
        subprocess.run(cmd, check=True, timeout=300)


if __name__ == "__main__":
    main()
