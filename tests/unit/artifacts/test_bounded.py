"""sparsefs.artifacts.bounded and the ArtifactCache's use of it: the review findings of issue 9, one test each.

Forking a threaded daemon copies only the forking thread, so a lock another
thread holds stays held in the child; the result is read back under a size
bound; children run at most SLOTS at a time, in their own process group, and
are killed and reaped whatever happens in the parent.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pymupdf
import pytest

from readers import registry
from readers.pdf.extract import MUPDF_LOCK, extract
from sparsefs.artifacts import bounded
from sparsefs.artifacts import cache as artifacts
from sparsefs.artifacts.bounded import SLOTS, BoundExceeded, Bounds, run_bounded
from sparsefs.artifacts.cache import ArtifactCache
from sparsefs.source.rootfs import SourceRoot


def _held_meanwhile(lock: Any, seconds: float) -> threading.Thread:
    held = threading.Event()

    def hold() -> None:
        with lock:
            held.set()
            time.sleep(seconds)

    thread = threading.Thread(target=hold)
    thread.start()
    held.wait()
    return thread


def _small_pdf() -> bytes:
    doc: Any = pymupdf.open()  # type: ignore[no-untyped-call]
    doc.new_page().insert_text((72, 72), "Revenue grew in 2023.")
    return bytes(doc.tobytes())


@pytest.mark.parametrize("lock", ["mupdf", "registry"])
def test_a_lock_held_by_another_thread_at_fork_does_not_hang_the_child(lock: str) -> None:
    data = _small_pdf()
    work: Callable[[], Any] = (lambda: extract(data).view) if lock == "mupdf" else registry.registrations
    thread = _held_meanwhile(MUPDF_LOCK if lock == "mupdf" else registry._lock, 0.3)
    try:
        result = run_bounded(work, Bounds(seconds=3), "test Reader")
    finally:
        thread.join()
    assert result


def test_a_result_past_its_size_bound_is_dropped_and_the_child_stopped() -> None:
    with pytest.raises(BoundExceeded, match="larger than 4 MiB") as raised:
        run_bounded(lambda: b"x" * (64 << 20), Bounds(seconds=10, result_bytes=4 << 20), "test Reader")
    assert raised.value.lasting


def test_the_cache_bounds_results_by_its_character_budget(tmp_path: Path) -> None:
    root = SourceRoot.open(str(tmp_path))
    try:
        assert ArtifactCache(root, max_parsed_chars=1 << 20, bounds=Bounds()).bounds == Bounds(result_bytes=2 << 20)
    finally:
        root.close()


def test_at_most_slots_children_parse_at_once() -> None:
    outcomes: list[object] = []
    threads = [
        threading.Thread(target=lambda: outcomes.append(run_bounded(lambda: time.sleep(0.4), Bounds(), "x")))
        for _ in range(SLOTS + 1)
    ]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(outcomes) == SLOTS + 1 and time.monotonic() - started >= 0.8  # one waited for a slot
    assert bounded.default_memory_bytes() <= Bounds.memory_bytes


def test_an_unpicklable_result_is_reported_as_such() -> None:
    with pytest.raises(RuntimeError, match="could not be sent back"):
        run_bounded(lambda: threading.Lock(), Bounds(), "test Reader")


def _write_to_parent(data: bytes, status: int) -> None:
    """In the child: the pipe to the parent is its only descriptor past stderr."""
    out = max(int(fd) for fd in os.listdir("/proc/self/fd") if int(fd) > 2 and os.path.exists(f"/proc/self/fd/{fd}"))
    os.write(out, data)
    os._exit(status)


@pytest.mark.parametrize(("status", "message"), [(3, r"died \(exit status 3\)"), (0, "could not be read")])
def test_a_partial_or_garbled_result_is_a_bound_error(status: int, message: str) -> None:
    with pytest.raises(BoundExceeded, match=message):
        run_bounded(lambda: _write_to_parent(b"\x80\x05garbage", status), Bounds(), "test Reader")


def test_the_child_and_what_it_started_are_killed_whatever_happens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pids = tmp_path / "pids"

    def spawn_and_hang() -> None:
        import subprocess

        grandchild = subprocess.Popen(["sleep", "60"])
        pids.write_text(f"{os.getpid()} {grandchild.pid}")
        time.sleep(60)

    def interrupted(fd: int, bounds: Bounds) -> tuple[bytearray, str | None]:
        while not pids.exists() or " " not in pids.read_text():
            time.sleep(0.02)
        raise KeyboardInterrupt

    monkeypatch.setattr(bounded, "_collect", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_bounded(spawn_and_hang, Bounds(seconds=5), "test Reader")
    for pid in map(int, pids.read_text().split()):
        time.sleep(0.1)  # the grandchild is reaped by init
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


@pytest.mark.parametrize(("lasting", "attempts"), [(False, 2), (True, 1)])
def test_only_a_lasting_overrun_is_remembered_for_good(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lasting: bool, attempts: int
) -> None:
    """A timeout once stuck: a PDF parsed while the machine was busy answered "did not finish" until edited."""
    calls: list[str] = []

    def overrun(fn: Callable[[], Any], bounds: Bounds, what: str) -> None:
        calls.append(what)
        raise BoundExceeded("over", lasting=lasting)

    monkeypatch.setattr(artifacts, "run_bounded", overrun)
    monkeypatch.setattr(artifacts, "_TRANSIENT_OVERRUN_S", 0.0)
    (tmp_path / "big.txt").write_text("words and more words\n" * 20_000)
    root = SourceRoot.open(str(tmp_path))
    try:
        cache = ArtifactCache(root, bounds=Bounds())
        for _ in range(2):
            with pytest.raises(BoundExceeded):
                cache.load("big.txt")
        assert len(calls) == attempts
    finally:
        root.close()


def test_a_late_older_version_and_a_removed_path_keep_the_current_parse(tmp_path: Path) -> None:
    path = tmp_path / "a.txt"
    path.write_text("first version\n")
    root = SourceRoot.open(str(tmp_path))
    try:
        cache = ArtifactCache(root)
        old = cache.load("a.txt")
        time.sleep(0.01)
        path.write_text("second, longer version\n")
        cache.mark_dirty("a.txt")
        new = cache.load("a.txt")
        with cache._lock:  # the load of the old version finishing after the new one's
            cache._supersede("a.txt", artifacts._parse_key(old.fingerprint, old.reader, "a.txt"), old.key[4])
        assert artifacts._parse_key(new.fingerprint, new.reader, "a.txt") in cache._parsed
        path.unlink()
        cache.mark_dirty("a.txt")
        assert "a.txt" not in cache._current and not cache._holders
    finally:
        root.close()


def test_waiting_past_the_bound_for_a_slot_is_not_an_overrun(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bounded, "_SLOTS", threading.BoundedSemaphore(1))
    bounded._SLOTS.acquire()
    with pytest.raises(bounded.SlotsBusy, match="parse slots"):
        run_bounded(lambda: 1, Bounds(seconds=0.1), "test Reader")


# ---- the child never outlives its daemon (issue 18) ----


def _patient(fd: int, bounds: Bounds) -> tuple[bytearray, str | None]:
    """A parent that never stops its child: reads until the child closes the pipe."""
    payload = bytearray()
    while chunk := os.read(fd, 1 << 20):
        payload += chunk
    return payload, None


def _spin_ignoring_alarms() -> None:
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    while True:
        pass


@pytest.mark.parametrize("work", [lambda: time.sleep(60), _spin_ignoring_alarms], ids=["sleeping", "spinning"])
def test_the_child_stops_itself_past_its_bound_even_with_every_signal_blocked(
    monkeypatch: pytest.MonkeyPatch, work: Callable[[], None]
) -> None:
    """Its own alarm (wall clock) and RLIMIT_CPU, from a thread that blocks every signal (as libfuse's do)."""
    monkeypatch.setattr(bounded, "_collect", _patient)
    monkeypatch.setattr(bounded, "CHILD_GRACE_S", 0.5)
    raised: list[BaseException] = []

    def blocked() -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        try:
            run_bounded(work, Bounds(seconds=0.5), "test Reader")
        except BaseException as err:  # noqa: BLE001 - checked below
            raised.append(err)

    started = time.monotonic()
    thread = threading.Thread(target=blocked)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive() and time.monotonic() - started < 10
    assert isinstance(raised[0], BoundExceeded) and "0.5 s bound" in str(raised[0])


def test_the_child_holds_no_fd_of_the_daemon() -> None:
    """stdin, stdout and stderr (the daemon's log) are /dev/null; nothing else but the pipe and the listing."""
    def fds() -> dict[int, str]:
        return {int(fd): os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
                if os.path.exists(f"/proc/self/fd/{fd}")}

    held = run_bounded(fds, Bounds(seconds=10), "test Reader")
    assert held[0] == held[1] == held[2] == os.devnull
    assert all(target.startswith("pipe:") for fd, target in held.items() if fd > 2), held


DAEMON = """
import sys, time
from sparsefs.artifacts.bounded import Bounds, run_bounded
print("parsing", flush=True)
run_bounded(lambda: time.sleep(120), Bounds(seconds=120), "test Reader")
"""


def test_the_child_dies_with_its_daemon() -> None:
    daemon = subprocess.Popen([sys.executable, "-c", DAEMON], stdout=subprocess.PIPE, start_new_session=True)
    child = 0
    try:
        assert daemon.stdout is not None and daemon.stdout.readline() == b"parsing\n"
        children = Path(f"/proc/{daemon.pid}/task/{daemon.pid}/children")
        deadline = time.monotonic() + 10
        while not children.read_text().split() and time.monotonic() < deadline:
            time.sleep(0.02)
        child = int(children.read_text().split()[0])
        daemon.kill()
        daemon.wait(timeout=10)
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not _alive(child), "the parse child outlived its daemon"
    finally:
        daemon.kill()
        daemon.wait(timeout=10)
        if child and _alive(child):
            os.kill(child, signal.SIGKILL)  # never left to the rest of the suite


def test_a_child_whose_daemon_died_before_it_asked_to_die_with_it_exits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bounded.os, "getpid", lambda: 1)  # as if its parent were already another process
    with pytest.raises(BoundExceeded, match=rf"exit status {bounded.ORPHANED}"):
        run_bounded(lambda: time.sleep(60), Bounds(seconds=10), "test Reader")


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False
