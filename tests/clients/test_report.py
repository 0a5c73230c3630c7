"""`sparsefs stats` / `sparsefs report`: the pack log summed per read unit, kind and episode."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from sparsefs.app.cli import main
from sparsefs.app.report import load, render_text
from sparsefs.store.stats import Stats

ENTRIES = [
    {"artifact": "a.md", "fingerprint": "f1", "episode": "e1", "exposed": 1000, "L": 10000, "decision": "sparse"},
    {"artifact": "a.md", "fingerprint": "f1", "episode": "e1", "exposed": 500, "L": 10000, "decision": "sparse"},
    {"artifact": "a.md", "fingerprint": "f1", "episode": None, "exposed": 300, "L": 10000, "decision": "preview"},
    {"artifact": "s.csv", "fingerprint": "f2", "episode": None, "exposed": 50, "L": 8000, "decision": "exact"},
    {"artifact": "r.pdf", "fingerprint": "f3", "episode": "e2", "exposed": 4000, "L": 4000, "decision": "fallback"},
]


def write_log(state: Path) -> None:
    state.mkdir(parents=True, exist_ok=True)
    lines = [orjson.dumps({"time": 1.0, **entry}) for entry in ENTRIES]
    (state / "log.jsonl").write_bytes(b"\n".join([*lines, b"{not json"]) + b"\n")


def sparsefs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sparsefs", *args], capture_output=True, text=True, timeout=60,
                          check=False)


def in_process(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """The same command through ``cli.main`` (no interpreter start-up)."""
    code = main(list(args))
    return code, capsys.readouterr().out


def test_units_count_one_full_read_each(tmp_path: Path) -> None:
    write_log(tmp_path)
    report = load(tmp_path / "log.jsonl")
    totals = report.totals()
    assert (totals.packs, totals.exposed, totals.full_view) == (5, 5850, 22000)  # the preview shares e1's read
    assert report.bad_lines == 1 and report.decisions()["fallback"] == 1
    kinds = report.by_kind()  # lines without a Reader: the one registered for the extension
    assert list(kinds) == ["text", "table", "pdf"] and kinds["text"].exposed == 1800
    assert kinds["table"].ratio == 0.0063
    assert [unit.key for unit in report.episodes()] == ["e1", "e2"]


def test_stats_and_report_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    write_log(state)
    summary = orjson.loads(sparsefs("stats", "--state-dir", str(state), "--json").stdout)
    assert summary["chars_saved"] == 22000 - 5850 and summary["packs_served"] == 5
    code, text = in_process(capsys, "stats", "--state-dir", str(state))
    assert code == 0 and "fallbacks to the full view: 1" in text and "e2" in text and "r.pdf" in text
    out = tmp_path / "out"
    result = sparsefs("report", "--state-dir", str(state), "-o", str(out))
    assert result.returncode == 0, result.stderr
    page = (out / "index.html").read_text()
    assert "<img src='chart.png'" in page and "<td>e1<td>a.md<td>2<td>1,500<td>10,000" in page
    assert "each file version at most once per read window" in page
    assert (out / "chart.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    empty = tmp_path / "empty"
    assert "no packs logged yet" in in_process(capsys, "stats", "--state-dir", str(empty))[1]
    assert in_process(capsys, "report", "--state-dir", str(empty), "-o", str(out))[0] == 1


def test_guard_lines_are_cards_not_packs_and_bad_lines_count_nothing(tmp_path: Path) -> None:
    guard = {"artifact": "big.pdf", "fingerprint": "f9", "episode": None, "action": "plain-read"}
    lines = [
        {**ENTRIES[0]},
        {**guard, "decision": "guard-card", "exposed": 600, "L": 90000},
        {**guard, "decision": "insisted", "exposed": 90000, "L": 90000},
        {**ENTRIES[1], "L": "oops"},  # malformed: nothing of it may count, not even its pack or exposure
        {**ENTRIES[1], "exposed": -5_000_000_000},
        {**ENTRIES[1], "exposed": True},
        [1, 2],
    ]
    (tmp_path / "log.jsonl").write_bytes(b"\n".join(orjson.dumps(line) for line in lines) + b"\n\n")
    report = load(tmp_path / "log.jsonl")
    totals = report.totals()
    assert report.bad_lines == 4
    assert (totals.packs, totals.cards, totals.insisted) == (1, 1, 1)
    assert (totals.exposed, totals.full_view) == (1000 + 600 + 90000, 10000 + 90000)
    assert report.decisions() == {"sparse": 1, "guard-card": 1, "insisted": 1}
    assert report.as_json()["packs_served"] == 1 and "packs served: 1  (sparse 1)\n" in render_text(report)
    assert report.as_json()["cards_served"] == 1 and report.as_json()["insisted_reads"] == 1
    assert "guard cards served: 1  insisted plain reads: 1" in render_text(report)


def test_a_kind_is_the_reader_never_a_virtual_name(tmp_path: Path) -> None:
    lines = [
        {**ENTRIES[3], "reader": "table/csv"},
        {**ENTRIES[3], "artifact": "b.xlsx", "reader": "table/xlsx"},
        {**ENTRIES[3], "artifact": "sales.csv@summ=population", "decision": "error"},  # an older log's line
        {**ENTRIES[3], "artifact": "sales.csv", "reader": None, "decision": "error"},  # refused before parsing
        {**ENTRIES[3], "artifact": "notes.txt", "reader": "log"},  # sniffed: the Reader wins over the extension
        {**ENTRIES[3], "artifact": "docs", "reader": "folder"},
        {**ENTRIES[3], "artifact": "blob.bin", "reader": None, "decision": "error"},
        {**ENTRIES[3], "artifact": "Makefile", "reader": None, "decision": "error"},
    ]
    (tmp_path / "log.jsonl").write_bytes(b"\n".join(orjson.dumps(line) for line in lines) + b"\n")
    kinds = load(tmp_path / "log.jsonl").by_kind()
    assert set(kinds) == {"table", "log", "folder", "bin", "(none)"} and kinds["table"].packs == 4


def test_without_the_report_extra_the_command_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write_log(tmp_path)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["report", "--state-dir", str(tmp_path), "-o", str(tmp_path / "out")]) == 2
    assert "pip install 'sparsefs[report]'" in capsys.readouterr().err and not (tmp_path / "out").exists()


FULL_FINGERPRINT = "9f" * 16  # a guard line logs the whole fingerprint, packs the first 12 characters
GUARD = {"artifact": "big.pdf", "episode": None, "action": "plain-read", "reader": "pdf"}
MIXED = [
    *ENTRIES[:2],  # a refine in the same episode: the old stats.json counted the whole file again
    ENTRIES[2],  # a preview of e1's version: no full read of its own
    ENTRIES[3], ENTRIES[4],
    {"artifact": "a.md", "fingerprint": "-", "episode": None, "exposed": 120, "L": 0, "decision": "error"},
    {**GUARD, "fingerprint": FULL_FINGERPRINT, "decision": "guard-card", "exposed": 600, "L": 90000},
    {**GUARD, "fingerprint": FULL_FINGERPRINT, "episode": "e3", "decision": "insisted", "exposed": 90000,
     "L": 90000},
]


@pytest.mark.parametrize("order", ["logged", "reversed"])
def test_stats_json_and_sparsefs_stats_agree_by_definition(tmp_path: Path, order: str) -> None:
    """The same lines, counted live for stats.json and from the log by `sparsefs stats`."""
    stats = Stats(tmp_path / "log.jsonl")
    for entry in MIXED if order == "logged" else MIXED[::-1]:
        if entry.get("action") == "plain-read":
            stats.record_guard(dict(entry), {})
        else:
            stats.record_pack(dict(entry))
    snapshot = stats.snapshot()
    stats.close()
    summary = load(tmp_path / "log.jsonl").as_json()
    assert snapshot["chars_exposed"] == summary["chars_exposed"] == 1000 + 500 + 300 + 50 + 4000 + 120 + 90600
    assert snapshot["full_read_chars"] == summary["full_read_chars"] == 10000 + 8000 + 4000 + 90000
    assert snapshot["chars_saved_vs_full_reads"] == summary["chars_saved"]
    assert snapshot["exposure_ratio"] == summary["exposure_ratio"] and snapshot["read_units"] == 7


def test_report_page_has_a_dated_title_and_the_saving_the_cli_prints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One function says the saving for `sparsefs stats`, the page's headline and the demo."""
    import html
    from datetime import UTC, datetime

    from sparsefs.app.report import headline, render_html

    write_log(tmp_path)
    sentence = headline(load(tmp_path / "log.jsonl").totals())
    assert sentence.startswith(f"Saved {22000 - 5850:,} characters (73.4%): the agent read 5,850 ")
    code, text = in_process(capsys, "stats", "--state-dir", str(tmp_path))
    assert code == 0 and text.splitlines()[0] == sentence
    page = render_html(load(tmp_path / "log.jsonl"), "chart.png", datetime(2026, 3, 4, 5, 6, tzinfo=UTC))
    assert "<title>SparseFS report, 2026-03-04 05:06 UTC</title>" in page
    assert f"<p class=headline>{html.escape(sentence)}</p>" in page
    assert in_process(capsys, "report", "--state-dir", str(tmp_path), "-o", str(tmp_path / "out"))[0] == 0
    written = (tmp_path / "out" / "index.html").read_text()
    assert f"<p class=headline>{html.escape(sentence)}</p>" in written
    assert f"<title>SparseFS report, {datetime.now(UTC):%Y-%m-%d}" in written


def test_stats_says_how_many_episodes_it_leaves_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = [{**ENTRIES[0], "episode": f"e{n}", "artifact": f"f{n}.md", "fingerprint": f"f{n}"} for n in range(25)]
    (tmp_path / "log.jsonl").write_bytes(b"\n".join(orjson.dumps({"time": 1.0, **line}) for line in lines) + b"\n")
    text = in_process(capsys, "stats", "--state-dir", str(tmp_path))[1]
    assert "(the newest 20 of 25 episodes; 5 older ones not shown: sparsefs stats --all, or --limit N)" in text
    assert " f4.md " not in text and " f5.md " in text
    every = in_process(capsys, "stats", "--state-dir", str(tmp_path), "--all")[1]
    assert all(f" f{n}.md " in every for n in range(25)) and "not shown" not in every
    three = in_process(capsys, "stats", "--state-dir", str(tmp_path), "--limit", "3")[1]
    assert " f21.md " not in three and " f22.md " in three and "22 older ones not shown" in three
