"""A full state disk (issue 25.2), through a real mount on both backends: the state directory is a small tmpfs
under the test's directory, filled to its last page while the mount runs. Packs are served from memory, the
log holds whole lines only, what was not saved is said once (stats.json, `sparsefs stats`, `sparsefs doctor`),
and once space returns the waiting lines are written in order."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests import mountutil
from tests.conftest import HANG_GUARD_S, is_pack
from tests.fullfs import small_fs

REPORT = "annual-report.md"
READS = [
    f"{REPORT}@intent=R&D expenses 2023",  # parsed before the disk filled; a new episode now
    f"{REPORT}@refine=headcount at year end",
    "notes.txt@intent=product sync decisions",  # never parsed before: the parse cannot be stored
    "fresh.md@intent=harbor platform launch",
    "fresh.md@scout",
    "src@intent=forecast",
]



def _whole_lines(log: Path) -> list[dict[str, Any]]:
    data = log.read_bytes()
    assert data.endswith(b"\n"), "log.jsonl ends inside a line"
    return [json.loads(line) for line in data.splitlines()]


def _run(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "sparsefs", *args], capture_output=True, text=True, timeout=60,
                          check=False)
    return done.stdout + done.stderr


def test_a_full_state_disk_serves_from_memory_and_keeps_the_log_whole(
    workspace: Path, tmp_path: Path, backend: str
) -> None:
    (workspace / "fresh.md").write_text("# Harbor\n\n" + "The Harbor platform launch moved to May. " * 400)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with small_fs(tmp_path / "state", "8m") as fs:
        mount = mountutil.start(workspace, mnt, fs.path, backend=backend, stderr_dir=tmp_path)
        try:
            with mountutil.hang_guard(mount, HANG_GUARD_S):
                _full_disk_session(mnt, fs)
        finally:
            mountutil.stop(mount)
        text = mount.stderr()
        assert "Traceback" not in text and " ERROR " not in text, text
        assert text.count("log.jsonl cannot be written") == 1, text  # said once in the daemon's log too


def _full_disk_session(mnt: Path, fs: Any) -> None:
    log = fs.path / "log.jsonl"
    assert is_pack((mnt / f"{REPORT}@scout").read_bytes())
    fs.fill()
    for name in READS:
        assert is_pack((mnt / name).read_bytes()), name
    served = 1 + len(READS)
    while len(_whole_lines(log)) == served and served < 60:  # until the log's last page has no room left
        assert is_pack((mnt / f"fresh.md@intent=launch week {served}").read_bytes())
        served += 1
    assert mountutil.wait_for(lambda: mountutil.stats_json(mnt)["packs_served"] == served, timeout=10)
    stats = mountutil.stats_json(mnt)
    missing = stats["not_saved"]
    assert missing["log_lines_waiting"] >= 1 and missing["log_lines_lost"] == 0
    assert missing["summary"].startswith("not saved in ") and "packs are served from memory" in missing["summary"]
    assert len(_whole_lines(log)) + missing["log_lines_waiting"] == served  # whole lines, none torn
    said = _run("stats", str(mnt))
    assert said.count("NOTE: not saved in ") == 1 and f"packs served: {served - missing['log_lines_waiting']}" in said
    doctor = [line for line in _run("doctor").splitlines() if f"mount {mnt} state" in line]
    assert len(doctor) == 1 and "log lines waiting in memory" in doctor[0], "\n".join(doctor)
    assert stats["error_packs"] == 0

    fs.free()
    assert is_pack((mnt / f"{REPORT}@focus=L1-3").read_bytes())  # the first line written after: the rest first
    lines = _whole_lines(log)
    assert len(lines) == served + 1 and [line["time"] for line in lines] == sorted(line["time"] for line in lines)
    assert mountutil.wait_for(lambda: mountutil.stats_json(mnt)["packs_served"] == served + 1, timeout=10)
    after = mountutil.stats_json(mnt)
    assert after.get("not_saved", {}).get("log_lines_waiting", 0) == 0
    done = subprocess.run([sys.executable, "-m", "sparsefs", "stats", str(mnt), "--json"], capture_output=True,
                          text=True, timeout=60, check=True)
    summary = json.loads(done.stdout)
    assert summary["chars_exposed"] == after["chars_exposed"] and summary["full_read_chars"] == after["full_read_chars"]
    _episodes_charge_what_was_served(mnt, lines)


def _episodes_charge_what_was_served(mnt: Path, lines: list[dict[str, Any]]) -> None:
    """Each episode's E is exactly what its sparse packs served: nothing charged twice or for nothing."""
    episodes = list((mnt / ".sparsefs" / "episodes").iterdir())
    assert episodes
    for path in episodes:
        record = json.loads(path.read_bytes())
        served = [line["exposed"] for line in lines if line["episode"] == record["id"] and line["decision"] == "sparse"]
        assert record["exposed_sparse"] == sum(served), (record, served)


def test_a_mount_starts_on_a_full_state_disk(workspace: Path, tmp_path: Path, backend: str) -> None:
    """The lock's pid and mount.json cannot be written: the mount says so and serves (it waited 30 s for its own
    leaked lock, then failed)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with small_fs(tmp_path / "state", "1m") as fs:
        fs.fill()
        mount = mountutil.start(workspace, mnt, fs.path, backend=backend, stderr_dir=tmp_path)
        try:
            with mountutil.hang_guard(mount, HANG_GUARD_S):
                assert is_pack((mnt / f"{REPORT}@intent=R&D expenses").read_bytes())
                assert mountutil.wait_for(lambda: mountutil.stats_json(mnt)["packs_served"] == 1, timeout=10)
                assert mountutil.stats_json(mnt)["not_saved"]["log_lines_waiting"] == 1
        finally:
            mountutil.stop(mount)
        assert "No space left on device" in mount.stderr()
