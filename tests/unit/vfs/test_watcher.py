"""Source-change detection without a mount: the on-access check, the watcher's modes, doctor's verdicts."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from sparsefs.app import doctor
from sparsefs.source import freshness
from sparsefs.source.freshness import Freshness
from sparsefs.source.rootfs import SourceRoot
from sparsefs.store.stats import Stats
from sparsefs.vfs import watcher as watcher_module
from sparsefs.vfs.core import Core
from sparsefs.vfs.watcher import SourceWatcher, watch_source
from tests.mountutil import wait_for

DIRS = ("", "a", "a/b", "a/b/c", "d")  # five directories: five watches


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    for rel in DIRS:
        (src / rel).mkdir(parents=True, exist_ok=True)
    (src / "a" / "b" / "f.txt").write_text("first\n")
    return src


class Recorder:
    def __init__(self) -> None:
        self.changes: list[str] = []
        self.event = threading.Event()

    def __call__(self, rel: str) -> None:
        self.changes.append(rel)
        self.event.set()


@pytest.fixture
def core(tree: Path, tmp_path: Path) -> Iterator[tuple[Core, Recorder]]:
    root = SourceRoot.open(str(tree))
    stats = Stats(tmp_path / "state" / "log.jsonl")
    made = Core(root, stats)
    recorder = Recorder()
    made.on_source_change = recorder  # type: ignore[method-assign]
    yield made, recorder
    made.freshness.stop()
    stats.close()
    root.close()


# ---- the on-access check ------------------------------------------------------------
def fresh_for(tree: Path) -> tuple[Freshness, Recorder]:
    recorder = Recorder()
    return Freshness(recorder, lambda rel: os.lstat(tree / rel)), recorder


def test_on_access_check_reports_exactly_the_changes(tree: Path) -> None:
    guard, recorder = fresh_for(tree)
    guard.check_on_access("--no-watch: test")
    path = tree / "a" / "b" / "f.txt"
    assert guard.check("a/b/f.txt") is not None and recorder.changes == []  # first sight at start: trusted
    guard.check("a/b/f.txt")
    assert recorder.changes == []
    path.write_text("second, longer\n")  # size and mtime change
    guard.check("a/b/f.txt")
    guard.check("a/b/f.txt")
    assert recorder.changes == ["a/b/f.txt"]
    stamp = path.stat()
    path.write_text("SECOND, LONGER\n")  # same size ...
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # ... and mtime restored: ctime still moves
    guard.check("a/b/f.txt")
    assert recorder.changes == ["a/b/f.txt"] * 2
    (tree / "new.txt").write_text("x")
    os.replace(tree / "new.txt", path)  # another inode
    guard.check("a/b/f.txt")
    assert recorder.changes == ["a/b/f.txt"] * 3
    assert guard.check("a/b/missing@intent=x") is None and len(recorder.changes) == 3
    assert guard.state()["checks"] == 6 and guard.state()["changes_found"] == 3


def test_entered_at_runtime_an_unseen_path_counts_as_changed_once(tree: Path) -> None:
    guard, recorder = fresh_for(tree)
    guard.watching(lambda: 5, lambda: None)
    guard.check_on_access("inotify queue overflowed", caches_may_be_stale=True)
    guard.check("a/b/f.txt")
    guard.check("a/b/f.txt")
    assert recorder.changes == ["a/b/f.txt"]


def test_forgetting_paths_makes_unseen_ones_suspect(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(freshness, "MAX_REMEMBERED", 1)
    (tree / "g.txt").write_text("g")
    guard, recorder = fresh_for(tree)
    guard.check_on_access("--no-watch: test")
    guard.check("a/b/f.txt")
    guard.check("g.txt")  # evicts a/b/f.txt
    assert recorder.changes == []
    guard.check("a/b/f.txt")
    assert recorder.changes == ["a/b/f.txt"]


def test_the_first_reason_stays_and_a_second_switch_is_refused(tree: Path) -> None:
    guard, _ = fresh_for(tree)
    assert guard.state()["mode"] == "off"
    assert guard.check_on_access("first")
    assert not guard.check_on_access("second")
    assert guard.state()["reason"] == "first" and guard.state()["watches"] == 0


def test_hooks_only_act_in_on_access_mode(tree: Path) -> None:
    guard, recorder = fresh_for(tree)
    try:
        guard.watching(lambda: 5, lambda: None)
        guard.check_open("a/b/f.txt")
        assert guard.checks == 0
        guard.check_on_access("limit", caches_may_be_stale=True)
        guard.check_open("a/b/f.txt")
        assert guard.checks == 1 and recorder.changes == ["a/b/f.txt"]
    finally:
        guard.stop()


def test_each_core_has_its_own_freshness(core: tuple[Core, Recorder], tmp_path: Path, tree: Path) -> None:
    """No module-level table keyed by the core: a second core (an MCP call beside a mount) is unaffected."""
    made, recorder = core
    root = SourceRoot.open(str(tree))
    other = Core(root, Stats(tmp_path / "other" / "log.jsonl"))
    try:
        made.freshness.check_on_access("--no-watch: test", caches_may_be_stale=True)
        assert other.freshness.mode == "off"
        handle = made.open("/a/b/f.txt", os.O_RDONLY)
        made.release("/a/b/f.txt", handle.fh)
        assert recorder.changes == ["a/b/f.txt"] and other.freshness.checks == 0
    finally:
        other.stats.close()
        root.close()


def test_kernel_hook_lets_go_of_a_replaced_file(tree: Path) -> None:
    guard, _ = fresh_for(tree)
    let_go: list[object] = []
    files = SimpleNamespace(nodes=SimpleNamespace(path=lambda nodeid: "/a/b/f.txt"),
                            gone_from_tree=let_go.append)
    try:
        guard.check_on_access("--no-watch: test")
        node = SimpleNamespace(nodeid=7, ino=(tree / "a" / "b" / "f.txt").stat().st_ino)
        freshness.check_kernel_open(guard, files, node)
        assert let_go == []
        (tree / "new.txt").write_text("x")
        os.replace(tree / "new.txt", tree / "a" / "b" / "f.txt")
        freshness.check_kernel_open(guard, files, node)
        assert let_go == [node]
    finally:
        guard.stop()


def test_suggested_limit_leaves_room() -> None:
    assert freshness.suggested_watch_limit(10, 8192) == 524288
    assert freshness.suggested_watch_limit(300_000, 8192) == 2_097_152  # 4x the need, rounded up to 2^k
    assert freshness.suggested_watch_limit(0, 1_000_000) == 2_097_152


# ---- the watcher -------------------------------------------------------------------------
def test_watching_covers_every_directory_and_reports_changes_fast(core: tuple[Core, Recorder], tree: Path) -> None:
    made, recorder = core
    guard = watch_source(made, str(tree), enabled=True)
    state = made.stats.snapshot()["watcher"]
    assert state["mode"] == "inotify" and state["watches"] == len(DIRS) and state["reason"] == ""
    started = time.perf_counter()
    (tree / "a" / "b" / "f.txt").write_text("changed\n")
    assert recorder.event.wait(1.0), "no change reported within 1 s"
    assert "a/b/f.txt" in recorder.changes
    assert time.perf_counter() - started < 1.0
    (tree / "d" / "e").mkdir()  # a new directory is watched too
    assert wait_for(lambda: guard.state()["watches"] == len(DIRS) + 1, timeout=2)
    recorder.event.clear()
    (tree / "d" / "e" / "g.txt").write_text("g")
    assert recorder.event.wait(1.0) and wait_for(lambda: "d/e/g.txt" in recorder.changes, timeout=1)


def test_the_watcher_follows_directories_and_reports_names_with_their_directory(tree: Path, tmp_path: Path) -> None:
    changes: list[str] = []
    watcher = SourceWatcher(str(tree), changes.append)
    watcher.start()
    try:
        (tree / "a" / "new.txt").write_text("x")
        assert wait_for(lambda: {"a/new.txt", "a"} <= set(changes), timeout=2)  # the listing of 'a' changed
        os.chmod(tree / "d", 0o700)
        assert wait_for(lambda: "d" in changes, timeout=2)  # attributes too
        os.rename(tree / "a", tree / "z")  # a directory moved within the tree keeps its watches, renamed
        assert wait_for(lambda: {"a", "z", ""} <= set(changes), timeout=2) and watcher.watches() == len(DIRS)
        changes.clear()
        (tree / "z" / "b" / "c" / "g.txt").write_text("g")
        assert wait_for(lambda: "z/b/c/g.txt" in changes, timeout=2)
        os.rename(tree / "z", tmp_path / "away")  # moved out: its three watches are given back
        assert wait_for(lambda: watcher.watches() == len(DIRS) - 3, timeout=2)
        (tree / "n" / "m").mkdir(parents=True)  # new directories, and what they already hold, are watched
        assert wait_for(lambda: watcher.watches() == len(DIRS) - 1, timeout=2)
        changes.clear()
        (tree / "n" / "m" / "h.txt").write_text("h")
        assert wait_for(lambda: "n/m/h.txt" in changes, timeout=2)
    finally:
        watcher.stop()
        watcher.stop()  # twice is harmless


def test_the_echo_of_a_removal_through_the_mount_is_skipped_once(tree: Path) -> None:
    """rm -rf through the mount: the kernel and the core already dropped what each removal changed."""
    changes: list[str] = []
    watcher = SourceWatcher(str(tree), changes.append)
    watcher.echoes = freshness.Echoes()
    watcher.start()
    try:
        for name in ("one.txt", "two.txt"):
            (tree / "a" / name).write_text("x")
        assert wait_for(lambda: {"a/one.txt", "a/two.txt"} <= set(changes), timeout=2)
        changes.clear()
        watcher.echoes.expect("a/one.txt")  # as Core.unlink does
        os.unlink(tree / "a" / "one.txt")
        os.unlink(tree / "a" / "two.txt")  # removed outside: reported with its directory
        assert wait_for(lambda: {"a/two.txt", "a"} <= set(changes), timeout=2)
        assert "a/one.txt" not in changes
        (tree / "a" / "one.txt").write_text("again")  # an outside create of the same name still comes
        os.unlink(tree / "a" / "one.txt")  # and so does its removal: each echo is expected once
        assert wait_for(lambda: changes.count("a/one.txt") >= 1, timeout=2)
    finally:
        watcher.stop()


def test_echoes_expire() -> None:
    echoes = freshness.Echoes()
    echoes.expect("x")
    assert echoes.take("x") and not echoes.take("x")
    echoes.expect("y")
    echoes.ECHO_S = -1.0
    echoes.expect("z")
    assert not echoes.take("z")


def test_no_watch_means_checked_on_access(core: tuple[Core, Recorder], tree: Path) -> None:
    made, _ = core
    watch_source(made, str(tree), enabled=False)
    state = made.stats.snapshot()["watcher"]
    assert state["mode"] == "on-access" and state["reason"].startswith("--no-watch") and state["watches"] == 0


def _failing_for(name: bytes) -> object:
    original = watcher_module._add_watch

    def add_watch(fd: int, path: bytes, mask: int) -> int:
        if path.endswith(name):
            raise OSError(errno.ENOSPC, "inotify watch limit reached")
        return original(fd, path, mask)

    return add_watch


def test_a_subdirectory_that_cannot_be_watched_means_on_access(core: tuple[Core, Recorder], tree: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    made, _ = core
    monkeypatch.setattr(watcher_module, "_add_watch", _failing_for(b"/a/b/c"))
    guard = watch_source(made, str(tree), enabled=True)
    state = made.stats.snapshot()["watcher"]
    assert state["mode"] == "on-access" and "max_user_watches" in state["reason"] and "'a/b/c'" in state["reason"]
    assert state["watches"] == 0
    assert wait_for(lambda: guard.directories == len(DIRS), timeout=2)


def test_a_late_directory_that_cannot_be_watched_switches_and_unwatches(
        core: tuple[Core, Recorder], tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made, recorder = core
    monkeypatch.setattr(watcher_module, "_add_watch", _failing_for(b"/late"))
    before = {t.ident for t in threading.enumerate()}
    guard = watch_source(made, str(tree), enabled=True)
    assert guard.mode == "inotify"
    (tree / "late").mkdir()
    assert wait_for(lambda: guard.mode == "on-access", timeout=2)
    assert "'late'" in guard.reason
    assert wait_for(lambda: {t.ident for t in threading.enumerate()} <= before | {threading.get_ident()}, timeout=5)
    recorder.changes.clear()
    made.freshness.check_open("a/b/f.txt")  # pages may have been cached while watched: suspect once
    made.freshness.check_open("a/b/f.txt")
    assert recorder.changes == ["a/b/f.txt"]


def test_lost_events_switch_to_on_access(tree: Path) -> None:
    troubles: list[str] = []
    watcher = SourceWatcher(str(tree), lambda rel: None, troubles.append)
    watcher.start()
    try:
        watcher._process(watcher_module._EVENT.pack(-1, watcher_module.IN_Q_OVERFLOW, 0, 0))
    finally:
        watcher.stop()
    assert len(troubles) == 1 and "overflowed" in troubles[0]


def test_watch_root_failure_is_on_access_not_an_error(core: tuple[Core, Recorder], tmp_path: Path) -> None:
    made, _ = core
    guard = watch_source(made, str(tmp_path / "no-such-dir"), enabled=True)
    assert guard.mode == "on-access" and guard.reason


def test_stats_report_off_without_a_watcher(tmp_path: Path) -> None:
    stats = Stats(tmp_path / "log.jsonl")
    try:
        assert stats.snapshot()["watcher"]["mode"] == "off"
    finally:
        stats.close()


# ---- doctor ---------------------------------------------------------------------------------
def test_doctor_verdicts_per_mode() -> None:
    watched = doctor._watcher_check("m", {"mode": "inotify", "watches": 12, "reason": "", "max_user_watches": 8192})
    assert watched.ok and "12 directories" in watched.detail
    limited = doctor._watcher_check("m", {
        "mode": "on-access", "watches": 0, "directories": 300_000, "max_user_watches": 8192,
        "reason": "inotify watch limit reached: fs.inotify.max_user_watches=8192"})
    assert not limited.ok and "needs 300000 watches" in limited.detail
    assert "sysctl fs.inotify.max_user_watches=2097152" in limited.fix
    instances = doctor._watcher_check("m", {"mode": "on-access", "reason": "inotify instance limit reached: "
                                            "fs.inotify.max_user_instances=128"})
    assert "max_user_instances=1024" in instances.fix
    chosen = doctor._watcher_check("m", {"mode": "on-access", "reason": "--no-watch: checked"})
    assert chosen.ok and "--no-watch" in chosen.detail


def test_doctor_never_hangs_on_a_mount_that_does_not_answer(tmp_path: Path) -> None:
    (tmp_path / ".sparsefs").mkdir()
    os.mkfifo(tmp_path / ".sparsefs" / "stats.json")  # a read that never returns, like a hung daemon
    started = time.monotonic()
    check = doctor.check_mount(str(tmp_path), timeout_s=0.3)
    assert time.monotonic() - started < 2
    assert not check.ok and "no answer" in check.detail and "umount" in check.fix


def test_doctor_reads_a_stats_file(tmp_path: Path) -> None:
    (tmp_path / ".sparsefs").mkdir()
    (tmp_path / ".sparsefs" / "stats.json").write_text('{"watcher": {"mode": "inotify", "watches": 3}}')
    assert doctor.check_mount(str(tmp_path)).ok
    (tmp_path / ".sparsefs" / "stats.json").write_text('{"backend": "kernel"}')
    assert "does not report" in doctor.check_mount(str(tmp_path)).detail


def test_watches_in_use_counts_this_process_watches(tree: Path) -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    fd = libc.inotify_init1(os.O_CLOEXEC)
    assert fd >= 0
    try:
        mine = str(os.getpid())  # other processes (parallel test runs) would make a machine-wide count move
        before = doctor._process_watches(mine)
        for rel in DIRS:
            assert libc.inotify_add_watch(fd, os.fsencode(tree / rel), 0x2) >= 0  # IN_MODIFY
        assert doctor._process_watches(mine) - before == len(DIRS)
        assert doctor.watches_in_use() >= len(DIRS)
    finally:
        os.close(fd)
