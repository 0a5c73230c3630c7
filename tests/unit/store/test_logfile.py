"""log.jsonl in whole lines or not at all, on a real full filesystem (a small tmpfs under the test's directory)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from sparsefs.app.report import load
from sparsefs.store import logfile
from sparsefs.store.logfile import PackLog
from tests.fullfs import small_fs


def entry(n: int, pad: int = 0) -> bytes:
    return orjson.dumps({"time": float(n), "artifact": f"f{n}.md", "fingerprint": "abc", "episode": None,
                         "exposed": 10, "L": 100, "decision": "preview", "pad": "x" * pad}) + b"\n"


def whole_lines(path: Path) -> list[dict[str, object]]:
    data = path.read_bytes()
    assert not data or data.endswith(b"\n"), "the log ends inside a line"
    return [orjson.loads(line) for line in data.splitlines()]


def test_a_torn_tail_is_repaired_at_open(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    log.write_bytes(entry(1) + entry(2)[:17])  # a crash (or an older version on a full disk) mid-line
    PackLog(log).close()
    assert log.read_bytes() == entry(1)
    log.write_bytes(entry(1) + entry(2).rstrip(b"\n"))  # a whole line that lost only its newline is kept
    writer = PackLog(log)
    assert writer.append(entry(3))
    writer.close()
    assert [line["time"] for line in whole_lines(log)] == [1.0, 2.0, 3.0]


def test_a_full_disk_gets_whole_lines_or_none_and_nothing_is_lost(tmp_path: Path) -> None:
    with small_fs(tmp_path / "fs", "64k") as fs:
        log = fs.path / "log.jsonl"
        writer = PackLog(log)
        assert writer.append(entry(1))
        fs.fill()
        size = log.stat().st_size
        # the log's last page has room for ~4 KiB: this line fits partly, which used to leave a torn line
        assert not writer.append(entry(2, pad=8000))
        assert log.stat().st_size == size and whole_lines(log) == [orjson.loads(entry(1))]
        assert not writer.append(entry(3))  # it would fit the page's slack, but comes after line 2: it waits
        assert writer.waiting == 2 and writer.failed_since is not None and log.stat().st_size == size
        fs.free()
        assert writer.flush()  # stats.json's next snapshot does this: no need to wait for the next pack
        assert [line["time"] for line in whole_lines(log)] == [1.0, 2.0, 3.0]
        assert writer.append(entry(4))
        assert [line["time"] for line in whole_lines(log)] == [1.0, 2.0, 3.0, 4.0]  # in order, each whole
        assert writer.waiting == 0 and writer.failed_since is None
        writer.close()


def test_lines_past_the_waiting_bound_are_recorded_by_one_not_saved_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logfile, "MAX_WAITING_BYTES", 7000)  # two of the lines below
    with small_fs(tmp_path / "fs", "64k") as fs:
        log = fs.path / "log.jsonl"
        writer = PackLog(log)
        assert writer.append(entry(1))
        fs.fill()
        for n in range(2, 12):
            writer.append(entry(n, pad=3000), exposed=10, cost=100)
        waiting, lost, written = writer.waiting, writer.lost.lines, len(whole_lines(log))
        assert waiting == 2 and lost >= 7 and written + waiting + lost == 11 and writer.lost_total == lost
        fs.free()
        assert writer.append(entry(20))
        writer.close()
        lines = whole_lines(log)
        marker = [line for line in lines if line["decision"] == "not-saved"]
        assert len(marker) == 1 and marker[0]["lines"] == lost and marker[0]["exposed"] == 10 * lost
        assert len(lines) == written + waiting + 1 + 1
        report = load(log)
        assert report.lines_not_saved == lost and report.bad_lines == 0
        assert report.totals().exposed == 10 * (written + waiting + 1) + 10 * lost  # all the mount served
