"""Daemon memory through the hostile corpus and the large shared data files, and how long an unmount takes.

One mirror mount of a corpus made of tests/mount/test_hostile.py's inputs (bombs, a 2 GB sparse file, an 8 MiB line,
...) and every file of /work/shared/data (hard links, nothing copied). Each file is read with a few suffixes
(intent, scout, full, an exact operation) by ``head -c 256K``; a thread samples the daemon's RSS (alone, and
with its parse children) every 0.1 s. Then ``sparsefs umount`` is timed. Prints JSON: peak and final RSS,
the kernel's high-water mark (VmHWM), the parsed-artifact budget the daemon reports in stats.json, and the
umount time.

Usage:
  .venv/bin/python scripts/bench_memory.py [--backend kernel] [--memory-mb N] [--passes 1] [--only hostile|data]
      [--json out.json]
  Run it with another checkout's interpreter to measure that checkout's daemon (mountutil starts the daemon
  with ``sys.executable``); leave --memory-mb out for a daemon that has no such option.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests import mountutil  # noqa: E402
from tests.mount.test_hostile import COMMITTED, GENERATED, HOSTILE  # noqa: E402

DATA = ROOT.parent.parent / "shared" / "data" if (ROOT.parent.parent / "shared").is_dir() else Path("/work/shared/data")
SUFFIXES = ("@intent=revenue growth 2023 risk", "@scout", "@full", "@count")


def build_corpus(base: Path, parts: tuple[str, ...] = ("hostile", "data")) -> Path:
    """hostile/ (generated as the test does) and data/ (hard links to the shared data: no copy)."""
    src = base / "src"
    src.mkdir(parents=True)
    if "hostile" in parts:
        hostile = src / "hostile"
        hostile.mkdir()
        for name in COMMITTED:
            shutil.copy(HOSTILE / name, hostile / name)
        for name, make in GENERATED.items():
            make(hostile / name)
    if "data" in parts:
        subprocess.run(["cp", "-al", str(DATA), str(src / "data")], check=True, timeout=120)
    return src


def status_kib(pid: int, key: str) -> int:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in text.splitlines() if line.startswith(key)), 0)


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


class Sampler(threading.Thread):
    """Peak RSS of the daemon (alone; and with its parse children) every 0.1 s."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak, self.peak_with_children = pid, 0, 0
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(0.1):
            own = status_kib(self.pid, "VmRSS:")
            self.peak = max(self.peak, own)
            self.peak_with_children = max(self.peak_with_children,
                                          own + sum(status_kib(c, "VmRSS:") for c in children(self.pid)))


def read_all(mnt: Path, src: Path) -> tuple[int, float]:
    """Every file with every suffix; (reads, seconds)."""
    reads, started = 0, time.monotonic()
    for path in sorted(p for p in src.rglob("*") if p.is_file()):
        rel = path.relative_to(src)
        for suffix in SUFFIXES:
            subprocess.run(["head", "-c", str(256 * 1024), str(mnt / f"{rel}{suffix}")], capture_output=True,
                           timeout=120, check=False)
            reads += 1
    return reads, time.monotonic() - started


def run(backend: str, memory_mb: int | None, passes: int, parts: tuple[str, ...]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as base_name:
        base = Path(base_name)
        src = build_corpus(base, parts)
        mnt = base / "mnt"
        mnt.mkdir()
        extra = ["--memory-mb", str(memory_mb)] if memory_mb else []
        mount = mountutil.start(src, mnt, base / "state", *extra, backend=backend)
        try:
            return measure(mount, src, passes)
        finally:
            mountutil.stop(mount)


def measure(mount: mountutil.Mount, src: Path, passes: int) -> dict[str, Any]:
    pid = mount.process.pid
    sampler = Sampler(pid)
    sampler.start()
    timings = [read_all(mount.mountpoint, src) for _ in range(passes)]
    stats = json.loads((mount.mountpoint / ".sparsefs" / "stats.json").read_bytes())
    sampler.halt.set()
    sampler.join()
    final, hwm = status_kib(pid, "VmRSS:"), status_kib(pid, "VmHWM:")
    started = time.monotonic()
    umount = subprocess.run([sys.executable, "-m", "sparsefs", "umount", str(mount.mountpoint)],
                            capture_output=True, text=True, timeout=600, check=False)
    umount_s = time.monotonic() - started
    mount.process.wait(timeout=600)
    return {
        "backend": stats.get("backend"), "reads": sum(r for r, _ in timings),
        "seconds_per_pass": [round(s, 1) for _, s in timings],
        "daemon_peak_rss_mib": round(sampler.peak / 1024), "daemon_hwm_mib": round(hwm / 1024),
        "peak_with_parse_children_mib": round(sampler.peak_with_children / 1024),
        "final_rss_mib": round(final / 1024), "memory": stats.get("memory"),
        "umount_s": round(umount_s, 2), "umount_rc": umount.returncode,
        "umount_out": (umount.stdout + umount.stderr).strip()[-300:], "load": os.getloadavg(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="kernel")
    parser.add_argument("--memory-mb", type=int, default=None, help="the daemon's --memory-mb (default: its own)")
    parser.add_argument("--passes", type=int, default=1)
    parser.add_argument("--only", choices=("hostile", "data"), help="one half of the corpus")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args()
    result = run(args.backend, args.memory_mb, args.passes, (args.only,) if args.only else ("hostile", "data"))
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
