"""The Python API without a mount: the same grammar, packs, episodes and log as a mount."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import orjson
import pytest

from sparsefs import ReadFailed, Workspace, request_name
from sparsefs.app.reading import split_target
from sparsefs.protocol.grammar import parse_suffix
from sparsefs.store.state import StateDirBusy, StateLock


@pytest.fixture
def ws(workspace: Path, tmp_path: Path) -> Workspace:
    return Workspace(workspace, tmp_path / "state", timeout=5)


def test_request_name_round_trips_through_the_grammar() -> None:
    text = "R&D 50% of k=3 a/b; headcount&scope=x"
    name = request_name("report.md", "intent", text, {"k": 3, "where": "region:EU/West"})
    request = parse_suffix(name.split("@", 1)[1])
    assert request.argument == text and request.options["k"] == "3" and request.options["where"] == "region:EU/West"
    assert "/" not in name
    with pytest.raises(ReadFailed, match="unknown option"):
        request_name("report.md", "intent", "x", {"colour": "red"})


def test_split_target_keeps_slashes_of_the_suffix(workspace: Path) -> None:
    assert split_target(workspace, "nested/deeper/leaf.txt@intent=a/b/c") == "nested/deeper/leaf.txt@intent=a%2Fb%2Fc"
    assert split_target(workspace, "annual-report.md") == "annual-report.md"
    with pytest.raises(ReadFailed, match="outside the root"):
        split_target(workspace, "/etc/passwd@raw")


def test_ask_serves_a_pack_and_an_episode_survives_the_next_workspace(ws: Workspace, tmp_path: Path) -> None:
    first = ws.ask("annual-report.md", "intent", "R&D expenses 2023", fmt="json")
    data = first.json()
    assert first.route == "in-process" and data["decision"] == "sparse" and "48.2 million" in first.text
    again = Workspace(ws.root, tmp_path / "state").ask("annual-report.md", "refine", "engineers/staff", fmt="json")
    assert again.json()["episode"] == data["episode"]
    assert again.json()["exposure"]["episode_exposed"] > data["exposure"]["episode_exposed"]
    lines = [orjson.loads(line) for line in (tmp_path / "state" / "log.jsonl").read_bytes().splitlines()]
    assert [line["action"] for line in lines] == ["intent", "refine"] and lines[0]["L"] > lines[0]["exposed"] > 0


def test_the_same_name_reads_the_same_frozen_bytes(ws: Workspace) -> None:
    name = "annual-report.md@intent=headcount at year end"
    assert ws.read(name).content == ws.read(name).content
    assert ws.read("annual-report.md@bogus=1").text.startswith("annual-report.md@bogus=1: error: ")  # not a crash


def test_raw_preview_and_plain_reads_are_faithful(ws: Workspace, workspace: Path) -> None:
    data = (workspace / "annual-report.md").read_bytes()
    assert ws.raw("annual-report.md") == data
    assert ws.raw("annual-report.md", 10, 50) == data[10:50]
    assert ws.raw("annual-report.md", len(data) - 5, len(data) + 100) == data[-5:]
    assert "preview" in ws.preview("annual-report.md").text
    with pytest.raises(ReadFailed, match="byte range"):
        ws.raw("annual-report.md", 9, 3)


def test_nothing_outside_the_root_is_reachable(ws: Workspace, workspace: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET\n")
    os.symlink(secret, workspace / "link.txt")
    with pytest.raises(OSError):
        ws.raw("link.txt")
    with pytest.raises(OSError):
        ws.read("../secret.txt@raw")
    pack = ws.read("link.txt@intent=outside").text
    assert ": error: " in pack.splitlines()[0] and "TOP-SECRET" not in pack


def test_a_with_block_holds_the_state_lock(ws: Workspace, tmp_path: Path) -> None:
    with ws:
        assert ws.route == "in-process"
        ws.ask("notes.txt", "scout")
        with pytest.raises(StateDirBusy):
            StateLock(tmp_path / "state").acquire()
        with pytest.raises(ReadFailed, match="not released"):
            Workspace(ws.root, tmp_path / "state", timeout=0.2).ask("notes.txt", "scout")
    lock = StateLock(tmp_path / "state")
    lock.acquire()
    lock.release()


def test_a_reader_waits_for_a_short_holder(ws: Workspace, tmp_path: Path) -> None:
    lock = StateLock(tmp_path / "state")
    lock.acquire()
    timer = threading.Timer(0.3, lock.release)
    timer.start()
    try:
        assert ws.ask("notes.txt", "scout").route == "in-process"
    finally:
        timer.cancel()
        lock.release()


def test_in_process_reads_use_the_daemons_core_and_keep_warm(workspace: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARSEFS_PARSE_SECONDS", "7")
    ws = Workspace(workspace, tmp_path / "state", keep_warm=True)
    with ws:
        assert ws._held is not None and ws._held.local is not None
        artifacts = ws._held.local.core.artifacts
        assert artifacts.bounds is not None and artifacts.bounds.seconds == 7  # compose.build_core's bounds
        ws.ask("annual-report.md", "intent", "R&D")
        parses = artifacts.parses
    assert ws.ask("annual-report.md", "refine", "staff").route == "in-process"
    assert ws._warm is not None and ws._warm.artifacts is artifacts
    assert artifacts.parses == parses  # the next call found the parse in memory
    ws.close()
