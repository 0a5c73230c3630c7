#!/usr/bin/env python3
"""How late `tail -f .sparsefs/log.jsonl` shows a pack's line, per backend and revision (issue 25.9).

Each revision's committed packages (a snapshot, imported ahead of the editable install) mount the demo
workspace; `tail -n 0 -s POLL -f` follows the live log while packs are read at irregular intervals (0-2 s
apart, so some land while the kernel still holds the log's size); the lag is from the line's own time stamp
to tail printing it. GNU tail polls a FUSE file every POLL seconds, so POLL is the floor.

    .venv/bin/python scripts/bench_live_log.py --revs 6d5ab4e,HEAD --backends kernel,mfusepy --reads 12
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
from bench_fuse import snapshot_dir  # noqa: E402

VENV_PY = REPO / ".venv" / "bin" / "python"
DEMO = REPO / "sparsefs" / "demo"


def lags(rev: str, backend: str, reads: int, poll: float) -> list[float]:
    _, code = snapshot_dir(rev)
    env = os.environ | {"PYTHONPATH": str(code)}
    with tempfile.TemporaryDirectory(prefix="sparsefs-live-log-") as tmp:
        src, mnt = Path(tmp) / "src", Path(tmp) / "mnt"
        shutil.copytree(DEMO, src)
        mnt.mkdir()
        subprocess.run([str(VENV_PY), "-m", "sparsefs", "mount", str(src), str(mnt), "--state-dir",
                        str(Path(tmp) / "state"), "--backend", backend], env=env, check=True, timeout=120,
                       capture_output=True, cwd="/")
        try:
            return _follow(mnt, reads, poll)
        finally:
            subprocess.run([str(VENV_PY), "-m", "sparsefs", "umount", str(mnt)], env=env, timeout=60,
                           capture_output=True, check=False, cwd="/")


def _follow(mnt: Path, reads: int, poll: float) -> list[float]:
    (mnt / "annual-report.md@scout").read_bytes()  # parsed once: the reads below build quickly
    tail = subprocess.Popen(["tail", "-n", "0", "-s", str(poll), "-f", str(mnt / ".sparsefs" / "log.jsonl")],
                            stdout=subprocess.PIPE)
    assert tail.stdout is not None
    os.set_blocking(tail.stdout.fileno(), False)
    out: list[float] = []
    try:
        time.sleep(1.0)
        for n in range(reads):
            wanted = f"question {n} about revenue".encode()
            (mnt / f"annual-report.md@intent={wanted.decode()}").read_bytes()
            got, deadline = b"", time.monotonic() + 15
            while wanted not in got and time.monotonic() < deadline:
                got += tail.stdout.read() or b""
                time.sleep(0.005)
            line = next(json.loads(one) for one in got.splitlines() if wanted in one)
            out.append(time.time() - line["time"])
            time.sleep((n * 0.37) % 2.0)
    finally:
        tail.kill()
        tail.wait(timeout=5)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--revs", default="6d5ab4e,HEAD")
    parser.add_argument("--backends", default="kernel,mfusepy")
    parser.add_argument("--reads", type=int, default=12)
    parser.add_argument("--poll", type=float, default=0.1)
    args = parser.parse_args()
    print(f"tail -s {args.poll}; {args.reads} packs each; lag = tail printing the line - its time stamp\n")
    print("| backend | revision | median lag (s) | max lag (s) |")
    print("|---|---|---:|---:|")
    for backend in args.backends.split(","):
        for rev in args.revs.split(","):
            found = lags(rev, backend, args.reads, args.poll)
            print(f"| {backend} | {rev} | {statistics.median(found):.2f} | {max(found):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
