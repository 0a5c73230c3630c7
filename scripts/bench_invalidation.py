#!/usr/bin/env python3
"""Invalidation latency: how long after a change a read through the mount sees it.

For each backend (kernel, mfusepy) and mode (inotify watcher; on-access
checking, which ``--no-watch`` and an exhausted inotify budget both use), a
mirror mount of the demo workspace; then, per trial, ``annual-report.md`` is
rewritten in place at the same size (the case a page cache keeps stale
longest), either in the source (outside the mount) or through the mount, and
the time from the end of that write until

* (a) a plain read through the mount returns the new bytes, and
* (b) an ``@intent`` pack (JSON) carries the new fingerprint (xxh3-128 of the
  new bytes, computed here)

is measured by polling every 0.1 ms. Two kinds of change: in place at the same
size, and a replace (new file renamed over the old: another inode, another
size — what editors do). Medians and p90 over the trials, and how often the
very first read after the write was already fresh (then the latency is just
the cost of that read). Last, the cost of the on-access check itself:
open+read+close of a small file, per mode.

    scripts/bench_invalidation.py [--trials 20] [--backend kernel|mfusepy|both]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import xxhash

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests import mountutil  # noqa: E402

DEMO = ROOT / "sparsefs" / "demo"
REPORT = "annual-report.md"
PACK = REPORT + "@intent=R&D expenses 2023&format=json"
TIMEOUT_S = 3.0
MODES = {"inotify": (), "on-access": ("--no-watch",)}


def flip(path: Path) -> bytes:
    """Rewrite ``path`` in place, same size: 'million' <-> 'MILLION'."""
    new = _flipped(path.read_bytes())
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, new, 0)
    finally:
        os.close(fd)
    return new


def replace(path: Path) -> bytes:
    """What editors do: write a new file beside it and rename it over (another inode, new size)."""
    data = _flipped(path.read_bytes())
    new = data + b"x\n" if len(data) % 2 else data[:-2] if data.endswith(b"x\n") else data + b"\n"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(new)
    os.replace(tmp, path)
    return new


def _flipped(data: bytes) -> bytes:
    return data.replace(b"million", b"MILLION") if b"million" in data else data.replace(b"MILLION", b"million")


CHANGES: dict[str, Callable[[Path], bytes]] = {"in place": flip, "replace": replace}


def read_plain(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def pack_fingerprint(path: Path) -> str:
    with open(path, "rb") as f:
        return str(json.loads(f.read())["fingerprint"])


def wait(predicate: Callable[[], bool]) -> tuple[float, bool]:
    """Seconds until ``predicate()`` (inf past TIMEOUT_S), and whether the very first try was true."""
    started = time.perf_counter()
    first = True
    while not predicate():
        first = False
        if time.perf_counter() - started > TIMEOUT_S:
            return float("inf"), False
        time.sleep(0.0001)
    return time.perf_counter() - started, first


def trial(mount: mountutil.Mount, change: Callable[[Path], bytes], through_mount: bool) -> tuple[float, ...]:
    """One change timed to a fresh plain read, another (separately) to a fresh pack."""
    target = (mount.mountpoint if through_mount else mount.source) / REPORT
    plain, pack = mount.mountpoint / REPORT, mount.mountpoint / PACK
    new = change(target)
    plain_s, plain_first = wait(lambda: read_plain(plain) == new)
    expected = xxhash.xxh3_128_hexdigest(change(target))
    pack_s, pack_first = wait(lambda: expected.startswith(pack_fingerprint(pack)))
    return plain_s, pack_s, plain_first, pack_first


def open_read_close_us(path: Path, rounds: int) -> float:
    samples = []
    for _ in range(rounds):
        started = time.perf_counter_ns()
        fd = os.open(path, os.O_RDONLY)
        os.read(fd, 65536)
        os.close(fd)
        samples.append(time.perf_counter_ns() - started)
    return statistics.median(samples) / 1000


def check_cost(backend: str, work: Path, rounds: int = 15, per_round: int = 300) -> str:
    """open+read+close of a small file, inotify vs on-access mounts side by side, rounds interleaved."""
    mounts = {mode: _mount(backend, mode, work, "cost") for mode in MODES}
    try:
        per_mode: dict[str, list[float]] = {mode: [] for mode in MODES}
        for _ in range(rounds):
            for mode, mount in mounts.items():
                per_mode[mode].append(open_read_close_us(mount.mountpoint / "notes.txt", per_round))
        ratios = [a / w for a, w in zip(per_mode["on-access"], per_mode["inotify"], strict=True)]
    finally:
        for mount in mounts.values():
            mountutil.stop(mount)
    watched, checked = (statistics.median(per_mode[mode]) for mode in MODES)
    return (f"{backend:8} open+read+close of a small file: inotify {watched:.1f} µs, on-access {checked:.1f} µs, "
            f"ratio {statistics.median(ratios):.2f} (median of {rounds} interleaved rounds)")


def _mount(backend: str, mode: str, work: Path, tag: str) -> mountutil.Mount:
    src, mnt = work / f"{backend}-{mode}-{tag}-src", work / f"{backend}-{mode}-{tag}-mnt"
    shutil.copytree(DEMO, src)
    mnt.mkdir()
    return mountutil.start(src, mnt, work / f"{backend}-{mode}-{tag}-state", *MODES[mode], backend=backend)


def summary(values: list[float]) -> str:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return f"{statistics.median(ordered) * 1000:8.2f} {p90 * 1000:8.2f}"


def run_mount(backend: str, mode: str, trials: int, work: Path) -> list[str]:
    mount = _mount(backend, mode, work, "latency")
    mnt = mount.mountpoint
    rows = []
    try:
        read_plain(mnt / REPORT)
        pack_fingerprint(mnt / PACK)
        watcher = json.loads((mnt / ".sparsefs" / "stats.json").read_bytes())["watcher"]["mode"]
        assert watcher == mode, f"expected {mode}, the mount says {watcher}"
        for (kind, change), through_mount in itertools.product(CHANGES.items(), (False, True)):
            results = [trial(mount, change, through_mount) for _ in range(trials)]
            where = f"{kind}, {'mount' if through_mount else 'outside'}"
            firsts = f"{sum(r[2] for r in results):>3}/{trials} {sum(r[3] for r in results):>3}/{trials}"
            rows.append(f"{backend:8} {mode:10} {where:18} {summary([r[0] for r in results])} "
                        f"{summary([r[1] for r in results])}  {firsts}")
    finally:
        mountutil.stop(mount)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--backend", choices=("kernel", "mfusepy", "both"), default="both")
    args = parser.parse_args()
    backends = ("kernel", "mfusepy") if args.backend == "both" else (args.backend,)
    print(f"{'backend':8} {'mode':10} {'change':18} {'plain ms':>8} {'p90':>8} {'pack ms':>8} {'p90':>8}"
          "  fresh at 1st read (plain, pack)")
    with tempfile.TemporaryDirectory(prefix="bench-inval-") as tmp:
        for backend in backends:
            for mode in MODES:
                for row in run_mount(backend, mode, args.trials, Path(tmp)):
                    print(row, flush=True)
        for backend in backends:
            print(check_cost(backend, Path(tmp)), flush=True)


if __name__ == "__main__":
    main()
