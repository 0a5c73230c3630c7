"""Source changes through real mounts: watched (inotify), checked on access (limit reached, --no-watch).

Every check compares with the source file read directly and with an
independently computed xxh3-128 of its bytes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import xxhash

from sparsefs.vfs.watcher import MAX_WATCHES_ENV
from tests import mountutil
from tests.clients.test_mount_clients import sh

Mount = mountutil.Mount
REPORT = "annual-report.md"
PACK = REPORT + "@intent=R&D expenses 2023&format=json"
CHANGED = "artifact-changed-since-last-read"


def stats(mount: Mount) -> dict[str, Any]:
    return dict(json.loads((mount.mountpoint / ".sparsefs" / "stats.json").read_bytes()))


def pack(mount: Mount) -> dict[str, Any]:
    return dict(json.loads(sh(["cat", str(mount.mountpoint / PACK)])))


def cat(mount: Mount, rel: str = REPORT) -> bytes:
    return subprocess.run(["cat", str(mount.mountpoint / rel)], capture_output=True, timeout=10, check=True).stdout


def rewrite_same_size(path: Path) -> bytes:
    """Change bytes in place without changing the size: the case a page cache keeps stale longest."""
    data = path.read_bytes()
    new = data.replace(b"million", b"MILLION") if b"million" in data else data.replace(b"MILLION", b"million")
    assert new != data and len(new) == len(data)
    with open(path, "r+b") as f:
        f.write(new)
    return new


def replace_atomically(path: Path, extra: bytes) -> bytes:
    """What editors do: write a new file, rename it over the old (another inode)."""
    new = path.read_bytes() + extra
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(new)
    os.replace(tmp, path)
    return new


def seconds_until(predicate: Callable[[], bool], timeout: float = 1.0) -> float | None:
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        if predicate():
            return time.perf_counter() - started
        time.sleep(0.002)
    return None


def assert_new_pack(before: dict[str, Any], after: dict[str, Any], source: bytes) -> None:
    assert xxhash.xxh3_128_hexdigest(source).startswith(after["fingerprint"])
    assert after["fingerprint"] != before["fingerprint"] and after["episode"] != before["episode"]
    assert CHANGED in after["flags"] and CHANGED not in before["flags"]


# ---- watched -------------------------------------------------------------------------------
def test_outside_edit_reaches_cat_and_a_new_pack_within_a_second(mirror: Mount) -> None:
    assert stats(mirror)["watcher"]["mode"] == "inotify"
    assert cat(mirror) == (mirror.source / REPORT).read_bytes()  # the kernel now caches it
    before = pack(mirror)
    new = rewrite_same_size(mirror.source / REPORT)
    plain = seconds_until(lambda: cat(mirror) == new)
    evidence = seconds_until(lambda: pack(mirror)["fingerprint"] != before["fingerprint"])
    print(f"\n{stats(mirror)['backend']}: plain read fresh after {plain}, pack after {evidence} s")
    assert plain is not None and evidence is not None, "not seen within 1 s"
    assert_new_pack(before, pack(mirror), new)


def test_write_through_an_in_place_mount_reaches_the_next_pack(in_place: Mount) -> None:
    assert stats(in_place)["watcher"]["mode"] == "inotify"  # watching the hidden tree through the fd
    before = pack(in_place)
    with open(in_place.mountpoint / REPORT, "ab") as f:
        f.write(b"\n## R&D outlook\nR&D expenses 2023 were restated to 51.0 million.\n")
    after = pack(in_place)  # no waiting: the write itself invalidated
    assert_new_pack(before, after, cat(in_place))
    assert "51.0 million" in json.dumps(after["evidence"])


WRITER = """
import os, sys
os.chdir(sys.argv[1])  # before the mount: from now on relative paths reach the hidden directory
print("ready", flush=True)
for n, _ in enumerate(sys.stdin):
    with open("live.log", "a") as f:
        f.write(f"line {n}\\n")
    print("written", flush=True)
"""


def test_in_place_a_writer_from_before_the_mount_is_seen_at_once(workspace: Path, tmp_path: Path,
                                                                  backend: str) -> None:
    """The watcher sees the hidden tree (it once watched the /proc magic link itself and saw nothing):
    stat and an open reader through the mount see each line within the watcher's latency."""
    (workspace / "live.log").write_text("")
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(workspace)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert writer.stdout is not None and writer.stdin is not None
    assert writer.stdout.readline().strip() == "ready"
    mount = mountutil.start(workspace, None, tmp_path / "state", backend=backend)
    late = []
    try:
        log = mount.mountpoint / "live.log"
        with open(log) as reader:
            seen = [reader.read()]

            def caught_up(expected: str) -> bool:
                seen.append(reader.read())
                return "".join(seen) == expected

            for n in range(10):
                writer.stdin.write("go\n")
                writer.stdin.flush()
                assert writer.stdout.readline().strip() == "written"
                expected = "".join(f"line {i}\n" for i in range(n + 1))
                size = seconds_until(lambda: os.stat(log).st_size == len(expected), timeout=2.0)  # noqa: B023
                fresh = seconds_until(lambda: caught_up(expected), timeout=2.0)  # noqa: B023
                late += [] if size is not None and fresh is not None and max(size, fresh) < 0.5 else [(n, size, fresh)]
    finally:
        writer.stdin.close()
        writer.wait(timeout=10)
        mountutil.stop(mount)
    assert not late, f"lines seen late or never (line, stat s, read s): {late}"


# ---- checked on access ------------------------------------------------------------------------
@contextmanager
def tiny_watch_limit(spare: int = 1) -> Iterator[None]:
    """Daemons started inside get room for ``spare`` watches (1: the source root, not its subdirectories).

    Injected (``SPARSEFS_MAX_WATCHES``, the daemon's own share of the per-user budget): past it a daemon
    behaves as at the kernel's limit. This test used to lower the machine-wide fs.inotify.max_user_watches,
    which every other process of the machine shares: no test may change a machine-wide setting (issue 28).
    """
    saved = os.environ.get(MAX_WATCHES_ENV)
    os.environ[MAX_WATCHES_ENV] = str(spare)
    try:
        yield
    finally:
        if saved is None:
            del os.environ[MAX_WATCHES_ENV]
        else:
            os.environ[MAX_WATCHES_ENV] = saved


@pytest.fixture(params=["watch-limit", "no-watch"])
def unwatched(request: pytest.FixtureRequest, workspace: Path, tmp_path: Path, backend: str) -> Iterator[Mount]:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if request.param == "no-watch":
        mount = mountutil.start(workspace, mnt, tmp_path / "state", "--no-watch", backend=backend)
    else:
        with tiny_watch_limit():  # one watch: the root's; its subdirectories cannot be watched
            mount = mountutil.start(workspace, mnt, tmp_path / "state", backend=backend)
    try:
        with mountutil.hang_guard(mount, 60):
            yield mount
    finally:
        mountutil.stop(mount)


def test_without_watches_the_next_read_still_sees_an_outside_edit(unwatched: Mount) -> None:
    watcher = stats(unwatched)["watcher"]
    assert watcher["mode"] == "on-access" and watcher["watches"] == 0
    assert "--no-watch" in watcher["reason"] or "max_user_watches" in watcher["reason"]
    source = unwatched.source / REPORT
    assert cat(unwatched) == source.read_bytes()
    before = pack(unwatched)
    new = rewrite_same_size(source)
    assert cat(unwatched) == new  # no waiting: the open itself checks
    new = replace_atomically(source, b"\nAppendix: restated.\n")
    assert cat(unwatched) == new
    assert_new_pack(before, pack(unwatched), new)


def test_doctor_names_the_unwatched_mount_and_the_fix(unwatched: Mount) -> None:
    out = subprocess.run([sys.executable, "-m", "sparsefs", "doctor"], capture_output=True, text=True,
                         timeout=60, check=False).stdout
    line = next(line for line in out.splitlines() if f"mount {unwatched.mountpoint}:" in line)
    assert "checked on each open" in line
    if "--no-watch" not in line:  # the limit hit, and the fix for the limit that was hit: this daemon's share
        assert "watch limit reached" in line and "SPARSEFS_MAX_WATCHES=1" in line and "max_user_watches" in line
        assert "raise SPARSEFS_MAX_WATCHES" in out.split(line, 1)[1].strip().splitlines()[0]
