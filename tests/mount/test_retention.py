"""The cache's retention bound and `sparsefs clean` (issue 28.7): idle state directories go, parsed entries
unused past the age go, nothing a live mount or a read holds is ever removed, and clean says what stayed."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparsefs.store import retention
from sparsefs.store.parsed import StoreConfig, open_store
from sparsefs.store.state import StateLock
from tests import mountutil
from tests.conftest import HANG_GUARD_S

OLD = time.time() - 40 * retention.DAY_S


def _state_dir(root: Path, name: str, age: float | None = None) -> Path:
    """A state directory as a mount leaves it (lock, log, database, a parse), last used ``age`` ago."""
    path = root / name
    (path / "index" / "parsed").mkdir(parents=True)
    for file in ("mount.lock", "log.jsonl", "state.sqlite", "index/index.sqlite", "index/parsed/x.txt"):
        (path / file).write_text("the parsed text of a private document\n")
    if age is not None:
        for file in [path, *path.rglob("*")]:
            os.utime(file, (age, age))
    return path


def run_cli(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sparsefs", *args], capture_output=True, text=True, timeout=120,
                          check=False, cwd="/", env={**os.environ, "XDG_CACHE_HOME": str(cache)})


def test_sweep_removes_idle_state_and_keeps_fresh_and_held(tmp_path: Path) -> None:
    idle, fresh = _state_dir(tmp_path, "0" * 16, OLD), _state_dir(tmp_path, "1" * 16)
    held, mine = _state_dir(tmp_path, "2" * 16, OLD), _state_dir(tmp_path, "not-a-state-dir", OLD)
    lock = StateLock(held)
    lock.acquire()
    try:
        os.utime(held / "mount.lock", (OLD, OLD))  # held, yet looking idle: still never removed
        assert retention.in_use(held) and not retention.in_use(idle)
        outcome = retention.sweep(tmp_path, 30)
    finally:
        lock.release()
    assert [path for path, _ in outcome.removed] == [idle] and outcome.busy == [held]
    assert not idle.exists() and fresh.exists() and held.exists() and mine.exists()
    assert retention.sweep(tmp_path, 0).removed == []  # 0: keep forever
    assert retention.sweep(tmp_path, 50).removed == []  # 40 days idle is within 50


def test_retention_age_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(retention.RETAIN_ENV, raising=False)
    assert retention.retain_days() == 30
    monkeypatch.setenv(retention.RETAIN_ENV, "7.5")
    assert retention.retain_days() == 7.5 and StoreConfig().entry_days == 7.5
    monkeypatch.setenv(retention.RETAIN_ENV, "a week")
    assert retention.retain_days() == 30  # a typo keeps the default, it neither stops a mount nor keeps forever


def test_parsed_entries_unused_past_the_age_are_dropped_at_open(tmp_path: Path) -> None:
    from readers.base import Parsed

    store = open_store(tmp_path, StoreConfig(min_parse_seconds=0))
    for fingerprint in ("a" * 32, "b" * 32):
        store.save(fingerprint, "text-md", Parsed("private text " + fingerprint, "text", {}), 1.0)
    store.close()
    db = sqlite3.connect(tmp_path / "index" / "index.sqlite")
    with db:
        db.execute("UPDATE parsed SET last_used=? WHERE fingerprint=?", (int(OLD * 1e9), "a" * 32))
    db.close()
    again = open_store(tmp_path, StoreConfig(entry_days=30))
    assert mountutil.wait_for(lambda: again.load("a" * 32, "text-md") is None, timeout=10)
    loaded = again.load("b" * 32, "text-md")
    assert loaded is not None and loaded.full_view == "private text " + "b" * 32
    assert not list(tmp_path.rglob(f"{'a' * 32}.*"))  # the text itself is gone from disk
    again.close()


def test_clean_keeps_what_a_live_mount_uses_and_removes_the_rest(workspace: Path, tmp_path: Path,
                                                                 backend: str) -> None:
    cache = tmp_path / "cache"
    root = cache / "sparsefs"
    idle, recent = _state_dir(root, "0" * 16, OLD), _state_dir(root, "1" * 16)
    (root / "onnx").mkdir()
    (root / "onnx" / "model.onnx").write_bytes(b"derived")
    live_state = root / ("f" * 16)
    mount = mountutil.start(workspace, None, live_state, backend=backend)
    try:
        with mountutil.hang_guard(mount, HANG_GUARD_S):
            report = workspace / "annual-report.md@intent=R&D expenses"
            assert "48.2 million" in report.read_text()
            dry = run_cli("clean", "--dry-run", cache=cache)
            assert dry.returncode == 1 and f"would remove {idle} " in dry.stdout and idle.exists()
            older = run_cli("clean", "--older-than", "30", cache=cache)
            assert older.returncode == 0 and not idle.exists() and recent.exists(), older.stdout
            everything = run_cli("clean", cache=cache)
            assert everything.returncode == 1 and not recent.exists() and not (root / "onnx").exists()
            assert (f"kept {live_state}: in use by the mount at {workspace} (pid {mount.process.pid}); sparsefs "
                    f"umount {workspace}, then run sparsefs clean again") in everything.stdout
            assert live_state.exists() and "48.2 million" in report.read_text()  # the mount serves on
    finally:
        mountutil.stop(mount)
    after = run_cli("clean", cache=cache)
    assert after.returncode == 0 and f"removed {live_state} " in after.stdout and not root.exists()


def test_clean_state_dir_refuses_a_folder_it_did_not_write(tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "thesis.md").write_text("keep me")
    result = run_cli("clean", "--state-dir", str(folder), cache=tmp_path / "cache")
    assert result.returncode == 2 and "holds no SparseFS state" in result.stdout
    assert (folder / "thesis.md").read_text() == "keep me"
    custom = _state_dir(tmp_path, "custom")
    result = run_cli("clean", "--state-dir", str(custom), cache=tmp_path / "cache")
    assert result.returncode == 0 and not custom.exists()


def test_a_mount_start_sweeps_idle_state_of_other_sources(workspace: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch, backend: str) -> None:
    root = tmp_path / "cache" / "sparsefs"
    idle, recent = _state_dir(root, "0" * 16, OLD), _state_dir(root, "1" * 16)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the daemon inherits it
    mount = mountutil.start(workspace, None, tmp_path / "state", backend=backend)
    try:
        assert mountutil.wait_for(lambda: not idle.exists(), timeout=20)
        assert recent.exists()
    finally:
        mountutil.stop(mount)
