"""Bookkeeping through a real mount (issue 18): `.sparsefs/stats.json` and `sparsefs stats` count the same
characters saved, and the per-kind table names Readers, never virtual names."""

from __future__ import annotations

import json
import subprocess
import sys

from tests import mountutil
from tests.mount.test_mount_errors import SALES

Mount = mountutil.Mount
REPORT = "annual-report.md"
READS = [
    f"{REPORT}@intent=R&D expenses 2023",
    f"{REPORT}@refine=headcount at year end",  # the same episode: one full read, not two
    f"{REPORT}@scout",  # a preview of the version the episode reads: no full read of its own
    f"{REPORT}@intent=R&D expenses 2023",  # a frozen re-read: the same bytes, counted once
    f"{REPORT}@focus=L99999",  # an error pack: its characters against no full read
    f"{REPORT}@intnet=revenue",  # refused by the grammar: counted under the file's kind
    "sales.csv@summ=population",
    "sales.csv@sum=revenue&where=region:EU",
    "sales.csv@intent=EU revenue",
    "nested@scout",
]



def test_stats_json_and_sparsefs_stats_agree_and_kinds_are_readers(mirror: Mount) -> None:
    mnt = mirror.mountpoint
    (mnt / "sales.csv").write_text(SALES)
    for name in READS:
        assert (mnt / name).read_bytes()
    logged = len((mnt / ".sparsefs" / "log.jsonl").read_bytes().splitlines())
    assert logged == len(READS) - 1  # the re-read is not logged
    # mfusepy may show a stats.json snapshot up to the attribute timeout old
    assert mountutil.wait_for(lambda: mountutil.stats_json(mnt)["packs_served"] == logged, timeout=10)
    live = mountutil.stats_json(mnt)
    result = subprocess.run([sys.executable, "-m", "sparsefs", "stats", str(mnt), "--json"], capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["packs_served"] == live["packs_served"] == logged
    assert summary["chars_exposed"] == live["chars_exposed"] > 0
    assert summary["chars_saved"] == live["chars_saved_vs_full_reads"]
    assert set(summary["by_kind"]) == {"text", "table", "folder"}, summary["by_kind"]
    assert summary["full_read_chars"] == live["full_read_chars"] > summary["chars_exposed"]
    assert summary["exposure_ratio"] == live["exposure_ratio"]
    assert summary["by_kind"]["table"]["packs"] == 3 and summary["by_kind"]["text"]["packs"] == 5
