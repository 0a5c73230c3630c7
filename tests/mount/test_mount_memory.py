"""The daemon's memory cap through a real mount (issue 25.8): the large shared data files read under a small
cap keep the daemon's peak RSS under it, parses beyond the cap leave memory, and the parsed store serves
an evicted one again (docs/SEMANTICS.md, "Memory"; numbers in docs/BENCHMARKS.md, scripts/bench_memory.py)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import mountutil
from tests.conftest import DATA, HANG_GUARD_S, is_pack

CAP_MB = 768  # the smallest cap: the reserve (448 MiB) leaves 160 MiB of parses, which these files overflow
LARGE = ("qa/financebench-dev.docs.jsonl", "qa/qmsum.docs.jsonl", "qa/qmsum.questions.jsonl",
         "qa/covidqa-dev.docs.jsonl", "csv/elastic-examples/zip_codes.csv", "logs/elastic-examples/apache_logs",
         "logs/elastic-examples/nginxplus_json_logs.jsonl", "pdf/filings/3M_2022_10K.pdf",
         "pdf/filings/BOEING_2022_10K.pdf")
AS_TEXT = {"financebench.txt": "qa/financebench-dev.docs.jsonl", "qmsum.md": "qa/qmsum.docs.jsonl"}
"""The largest files again under names another Reader parses: same bytes, parses of their own."""


@pytest.fixture
def capped(tmp_path: Path, backend: str) -> Iterator[mountutil.Mount]:
    src, mnt = tmp_path / "src", tmp_path / "mnt"
    for name, rel in {**{rel: rel for rel in LARGE}, **AS_TEXT}.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(DATA / rel, src / name)  # the shared data is read, never copied, where the disk allows
        except OSError:
            shutil.copy(DATA / rel, src / name)
    mnt.mkdir()
    mount = mountutil.start(src, mnt, tmp_path / "state", "--memory-mb", str(CAP_MB), backend=backend)
    try:
        with mountutil.hang_guard(mount, HANG_GUARD_S * 3):
            yield mount
    finally:
        mountutil.stop(mount)


def _stats(mount: mountutil.Mount) -> dict[str, Any]:
    return dict(json.loads((mount.mountpoint / ".sparsefs" / "stats.json").read_bytes()))


def test_large_files_under_a_small_cap_stay_under_it_and_come_back_from_the_store(
        capped: mountutil.Mount) -> None:
    mnt = capped.mountpoint
    for rel in (*LARGE, *AS_TEXT):
        assert is_pack((mnt / f"{rel}@intent=revenue growth and risk in 2022").read_bytes()[:4096]), rel
    # mfusepy may show a stats.json snapshot up to its attribute timeout old: wait for the counts
    assert mountutil.wait_for(lambda: _stats(capped)["memory"]["evictions"] > 0, timeout=10), _stats(capped)
    memory = _stats(capped)["memory"]
    assert memory["cap_mib"] == CAP_MB and memory["set_by"] == "--memory-mb"
    assert memory["parsed_mib"] <= memory["parsed_budget_mib"], json.dumps(memory)
    assert _stats(capped)["artifacts_loaded_from_disk"] == 0  # each file was parsed once, none reloaded yet
    pack = (mnt / f"{LARGE[0]}@intent=operating margin of 3M").read_bytes()  # evicted first: from the store
    assert is_pack(pack) and b": error: " not in pack.splitlines()[0]
    assert mountutil.wait_for(lambda: _stats(capped)["artifacts_loaded_from_disk"] == 1, timeout=10)
    peak_mib = _status_kib(capped.process.pid, "VmHWM:") >> 10  # the kernel's high-water mark: no sampling
    assert peak_mib < CAP_MB, (peak_mib, _stats(capped)["memory"])


def _status_kib(pid: int, key: str) -> int:
    text = Path(f"/proc/{pid}/status").read_text()
    return next(int(line.split()[1]) for line in text.splitlines() if line.startswith(key))
