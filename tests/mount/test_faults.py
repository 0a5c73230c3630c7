"""Faults: a daemon SIGKILLed mid-write, a stale mountpoint, Readers that hang, blow up or crash.

Faulty Readers are planted in the daemon with a ``sitecustomize`` module given to
``mountutil.start(plugins=...)`` (written at test time): it registers Readers for ``.hang``,
``.blowup``, ``.crash`` and ``.raise`` files that do what their names say.
Their inputs are larger than the in-process threshold, so each parse runs in a
bounded child (sparsefs.artifacts.bounded); the tests check the caller gets an error
pack within the bound and that other requests carry on meanwhile.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from readers.base import ReaderError
from sparsefs.artifacts.bounded import BoundExceeded, Bounds, run_bounded
from sparsefs.artifacts.cache import ArtifactCache
from sparsefs.fuse import mounts
from sparsefs.source.rootfs import SourceRoot
from tests import mountutil
from tests.conftest import HANG_GUARD_S

Mount = mountutil.Mount
PARSE_BOUND_S = 4.0  # past FAST_S by enough that a request held up behind a hang fails the checks
FAST_S = 1.5  # what a request that waits for no parse may take on a loaded 2-core machine
FAULTY_READERS = """
import os, time
from readers import registry
from readers.text import TextReader


class Hang(TextReader):
    name = "hang"
    def accepts(self, name, head):
        return True
    def parse(self, source):
        time.sleep(3600)


class Blowup(Hang):
    name = "blowup"
    def parse(self, source):
        hoard = [bytearray(64 << 20)]
        while True:  # doubling, as a bomb grows: past the bound in a few steps, not after seconds of memset
            hoard.append(bytearray(len(hoard[-1]) * 2))


class Crash(Hang):
    name = "crash"
    def parse(self, source):
        os.abort()


class Raise(Hang):
    name = "raise"
    def parse(self, source):
        raise ValueError("a Reader bug")


for cls in (Hang, Blowup, Crash, Raise):
    registry.register(registry.Registration(cls.name, "sitecustomize:" + cls.__name__,
                                            extensions=frozenset({"." + cls.name})))
"""


# ---- the bound itself, in process ----


def test_a_parse_past_its_time_bound_is_stopped() -> None:
    started = time.monotonic()
    with pytest.raises(BoundExceeded, match=r"0\.5 s bound"):
        run_bounded(lambda: time.sleep(60), Bounds(seconds=0.5), "test Reader")
    assert time.monotonic() - started < 5


def test_a_parse_past_its_memory_bound_is_stopped() -> None:
    def hoard() -> None:
        chunks = []
        while True:
            chunks.append(bytearray(32 << 20))

    with pytest.raises(BoundExceeded, match="memory bound"):
        run_bounded(hoard, Bounds(seconds=30, memory_bytes=256 << 20), "test Reader")


def test_results_reader_errors_crashes_and_bugs_cross_the_bound() -> None:
    assert run_bounded(lambda: {"a": [1, 2]}, Bounds(), "x") == {"a": [1, 2]}

    def refuse() -> None:
        raise ReaderError("not this one", hint="ask another")

    with pytest.raises(ReaderError, match="not this one") as raised:
        run_bounded(refuse, Bounds(), "x")
    assert raised.value.hint == "ask another"
    with pytest.raises(BoundExceeded, match="SIGABRT"):
        run_bounded(os.abort, Bounds(), "x")
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        run_bounded(lambda: 1 // 0, Bounds(), "x")


def test_a_version_that_overran_is_answered_at_once_the_next_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "big.txt").write_text("words and more words\n" * 20_000)
    root = SourceRoot.open(str(tmp_path))
    cache = ArtifactCache(root, bounds=Bounds(seconds=0.5))
    calls = []
    from readers.text import TextReader

    def slow(self: TextReader, source: object) -> None:
        calls.append(1)  # counted in the parent only when the parse runs here, so count the attempts below
        time.sleep(60)

    monkeypatch.setattr(TextReader, "parse", slow)
    try:
        for expected_seconds in (0.5, 0.0):
            started = time.monotonic()
            with pytest.raises(BoundExceeded):
                cache.load("big.txt")
            assert time.monotonic() - started < expected_seconds + 1.5
        assert not calls  # the parse ran in a child (then not at all): never in the daemon itself
    finally:
        root.close()


def test_a_hung_parse_holds_up_no_other_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Parse locks were 16 shared stripes: a hung parse blocked every version whose key fell in its
    stripe. The second file is chosen to collide with the first under that old scheme."""
    import xxhash

    from readers.text import TextReader

    real_parse = TextReader.parse
    monkeypatch.setattr(
        TextReader, "parse", lambda self, src: time.sleep(60) if src.name == "hang.txt" else real_parse(self, src)
    )
    hang = "hanging words\n" * 30_000
    (tmp_path / "hang.txt").write_text(hang)
    stripe = hash((xxhash.xxh3_128_hexdigest(hang.encode()), "text-txt")) % 16
    other = next(
        text
        for text in (f"other words {i}\n" for i in range(10_000))
        if hash((xxhash.xxh3_128_hexdigest(text.encode()), "text-txt")) % 16 == stripe
    )
    (tmp_path / "other.txt").write_text(other)
    root = SourceRoot.open(str(tmp_path))
    cache = ArtifactCache(root, bounds=Bounds(seconds=3))
    try:
        failures: list[BaseException] = []
        thread = threading.Thread(target=_load_expecting_overrun, args=(cache, "hang.txt", failures))
        thread.start()
        time.sleep(0.3)
        started = time.monotonic()
        assert "other words" in cache.load("other.txt").parsed.full_view
        assert time.monotonic() - started < FAST_S
        thread.join()
        assert len(failures) == 1 and isinstance(failures[0], BoundExceeded)
    finally:
        root.close()


def _load_expecting_overrun(cache: ArtifactCache, rel: str, failures: list[BaseException]) -> None:
    try:
        cache.load(rel)
    except BoundExceeded as err:
        failures.append(err)


# ---- faulty Readers inside a mounted daemon ----


@pytest.fixture
def faulty_mount(workspace: Path, tmp_path: Path, backend: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Mount]:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "sitecustomize.py").write_text(textwrap.dedent(FAULTY_READERS))
    monkeypatch.setenv("SPARSEFS_PARSE_SECONDS", str(PARSE_BOUND_S))
    monkeypatch.setenv("SPARSEFS_PARSE_MEMORY_MB", "512")
    for kind in ("hang", "blowup", "crash", "raise"):
        (workspace / f"bad.{kind}").write_text("some text to parse\n" * 20_000)  # past the in-process threshold
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    mount = mountutil.start(workspace, mnt, tmp_path / "state", backend=backend, plugins=plugins)
    try:
        with mountutil.hang_guard(mount, HANG_GUARD_S):
            yield mount
    finally:
        mountutil.stop(mount)


def _read_pack(path: Path, timeout: float = 30) -> tuple[bytes, float]:
    started = time.monotonic()
    result = subprocess.run(["cat", str(path)], capture_output=True, timeout=timeout, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout, time.monotonic() - started


def test_faulty_readers_get_error_packs_and_the_mount_carries_on(faulty_mount: Mount) -> None:
    mnt = faulty_mount.mountpoint
    expected = {
        "hang": b"did not finish within its 4 s bound",
        "blowup": b"memory bound",
        "crash": b"died",
        "raise": b"internal error",
    }
    for kind, message in expected.items():
        out, seconds = _read_pack(mnt / f"bad.{kind}@intent=anything")
        assert b": error: " in out and message in out, (kind, out[:500])
        assert seconds < PARSE_BOUND_S + 5, (kind, seconds)
    again, seconds = _read_pack(mnt / "bad.hang@scout")
    assert b"4 s bound" in again and seconds < FAST_S  # not parsed again
    assert faulty_mount.process.poll() is None


def test_other_requests_proceed_while_a_reader_hangs(faulty_mount: Mount, backend: str) -> None:
    """Plain I/O, writes to existing files and packs in other folders go on. (Creating or renaming in the
    hung pack's own folder waits for the bound: the kernel holds that folder's lock during a lookup; with
    mfusepy, libfuse 3.14 also serialises a first lookup of a sibling name, see test_mount_backends.)"""
    mnt = faulty_mount.mountpoint
    (mnt / "scratch.txt").write_text("before\n")
    if backend == "mfusepy":  # its first lookups in the hung pack's folder wait: look them up before
        os.stat(mnt / "nested" / "deeper" / "leaf.txt")
    hung: list[bytes] = []
    thread = threading.Thread(target=lambda: hung.append(_read_pack(mnt / "bad.hang@intent=x")[0]))
    thread.start()
    time.sleep(0.3)  # the hang is under way
    slowest = {"plain": 0.0, "sibling": 0.0, "pack": 0.0, "write": 0.0}
    while thread.is_alive():
        for kind, request in (
            ("plain", lambda: (mnt / "nested" / "deeper" / "leaf.txt").read_bytes()),
            ("sibling", lambda: (mnt / "notes.txt").read_bytes()),
            ("pack", lambda: (mnt / "nested" / "deeper" / "leaf.txt@full").read_bytes()),
            ("write", lambda: _overwrite(mnt / "scratch.txt", b"still writable\n")),
        ):
            started = time.monotonic()
            request()
            slowest[kind] = max(slowest[kind], time.monotonic() - started)
        time.sleep(0.05)
    thread.join()
    assert hung and b"4 s bound" in hung[0]
    if backend == "mfusepy":
        del slowest["sibling"]
    assert max(slowest.values()) < FAST_S, f"requests waited behind the hung Reader: {slowest}"


def _overwrite(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)  # no O_CREAT: no lock on the folder
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


# ---- SIGKILL of the daemon ----

WRITER = r"""
import os, sys, hashlib
path, tmp, final = sys.argv[1:4]
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
for i in range(1_000_000):
    record = (f"{i:08d} " + hashlib.sha256(str(i).encode()).hexdigest() * 63 + "\n").encode()
    try:
        os.write(fd, record)
        os.fsync(fd)
        if i % 10 == 9:  # an editor's atomic save: new content fully written and synced, then renamed over
            with open(tmp, "w") as f:
                f.write(f"version {i}\n" * 100)
                f.flush()
                os.fsync(f.fileno())
            os.rename(tmp, final)
    except OSError:
        break
    print(i, flush=True)
"""


def _check_records(data: bytes) -> int:
    """The number of complete, intact records at the start of ``data`` (a torn last one is allowed)."""
    import hashlib

    lines = data.split(b"\n")
    for i, line in enumerate(lines[:-1]):
        expected = f"{i:08d} " + hashlib.sha256(str(i).encode()).hexdigest() * 63
        assert line.decode() == expected, f"record {i} corrupt"
    return len(lines) - 1


def test_sigkill_mid_write_loses_nothing_fsynced_and_a_remount_recovers(
    workspace: Path, tmp_path: Path, backend: str
) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    state = tmp_path / "state"
    crashed = mountutil.start(workspace, mnt, state, backend=backend)
    try:
        assert b": error: " not in (mnt / "notes.txt@intent=harbor route").read_bytes()  # an episode to keep
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(mnt / "log.txt"), str(mnt / "save.tmp"), str(mnt / "saved.txt")],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert writer.stdout is not None
        confirmed = -1
        for line in writer.stdout:
            confirmed = int(line)
            if confirmed >= 200:
                break
        os.kill(crashed.process.pid, signal.SIGKILL)
        crashed.process.wait(timeout=10)
        for line in writer.stdout:  # whatever it confirmed after the kill (passthrough writes bypass the daemon)
            confirmed = int(line)
        writer.wait(timeout=30)
        records = _check_records((workspace / "log.txt").read_bytes())
        assert records >= confirmed + 1, f"fsync'ed {confirmed + 1} records, {records} survived"
        saved = (workspace / "saved.txt").read_text()
        assert saved == saved.splitlines()[0] + "\n" + (saved.splitlines()[0] + "\n") * 99  # old or new, whole
        with pytest.raises(OSError) as raised:
            os.stat(mnt / "notes.txt")
        assert raised.value.errno == errno.ENOTCONN
        _remount_same_state(workspace, mnt, state, backend)
    finally:
        mountutil.stop(crashed)
    assert not mounts.find_mount(mnt)


def _remount_same_state(workspace: Path, mnt: Path, state: Path, backend: str) -> None:
    again = mountutil.start(workspace, mnt, state, backend=backend)  # the dead daemon's lock and database
    try:
        assert "stale SparseFS mount" in again.stderr() and "unmounting it first" in again.stderr()
        assert (mnt / "log.txt").read_bytes() == (workspace / "log.txt").read_bytes()
        pack = (mnt / "notes.txt@intent=harbor route").read_bytes()
        assert b": error: " not in pack and b"harbor" in pack.lower()
        episodes = os.listdir(mnt / ".sparsefs" / "episodes")
        assert episodes, "the episode of the killed daemon was lost"
    finally:
        mountutil.stop(again)


def test_a_parse_child_dies_with_its_daemon_and_keeps_nothing_alive(faulty_mount: Mount) -> None:
    """SIGKILL the daemon during a hanging parse: the mount answers ENOTCONN at once, and within seconds no
    process of the daemon's session is left (its parse child moved to a process group of its own, not to
    another session) and none holds the daemon's log open. Children of SIGKILLed daemons used to run on for
    the parse's hour, holding the log, deaf to SIGTERM."""
    mnt, daemon = faulty_mount.mountpoint, faulty_mount.process.pid
    reader = subprocess.Popen(
        ["cat", str(mnt / "bad.hang@intent=x")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    assert mountutil.wait_for(lambda: _session(daemon) - {daemon}, timeout=10), "no parse child started"
    os.kill(daemon, signal.SIGKILL)
    faulty_mount.process.wait(timeout=10)
    started = time.monotonic()
    with pytest.raises(OSError) as raised:
        os.stat(mnt / "notes.txt")
    assert raised.value.errno == errno.ENOTCONN and time.monotonic() - started < 1
    try:
        gone = mountutil.wait_for(lambda: not _session(daemon) and not _holders(faulty_mount.stderr_path), 10)
        assert gone, f"left behind: {_session(daemon)}, holding the log: {_holders(faulty_mount.stderr_path)}"
    finally:
        for pid in _session(daemon):  # never leave them to the rest of the suite
            os.kill(pid, signal.SIGKILL)
    reader.wait(timeout=10)  # the blocked caller is freed too


def _processes() -> Iterator[tuple[int, list[str]]]:
    """(pid, the fields of /proc/PID/stat after the command name) of every live process."""
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue  # gone meanwhile
            if fields[0] not in ("Z", "X"):
                yield int(entry.name), fields


def _session(sid: int) -> set[int]:
    """Live processes of session ``sid`` (the daemon leads its own: mountutil starts it in a new session)."""
    return {pid for pid, fields in _processes() if int(fields[3]) == sid}


def _holders(path: Path) -> set[int]:
    """Processes with ``path`` open."""
    found = set()
    for pid, _ in _processes():
        with contextlib.suppress(OSError):
            if any(os.readlink(fd.path) == str(path) for fd in os.scandir(f"/proc/{pid}/fd")):
                found.add(pid)
    return found
