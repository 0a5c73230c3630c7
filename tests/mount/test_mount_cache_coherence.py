"""The kernel keeps listings, entries, attributes and negative entries for long (issue 19): never stale.

The kernel backend caches directory listings in the kernel (no OPENDIR), and
keeps entries, attributes and negative entries for a day while the source is
watched. Every change made outside the mount must still be seen through it
within the watcher's latency (tests allow 2 s), every change through it at
once, and when watching stops while mounted the kernel must drop everything.
Both backends are held to the same expectations.
"""

from __future__ import annotations

import json
import mmap
import os
import stat
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from sparsefs.fuse import pagecache
from tests import mountutil
from tests.conftest import kernel_family
from tests.mount.test_mount_invalidation import tiny_watch_limit

Mount = mountutil.Mount
FRESH_WITHIN_S = 2.0
SHORT_TIMEOUT_S = 6.0  # the short attribute timeout (5 s), and a margin


def within(predicate: Callable[[], bool], timeout: float = FRESH_WITHIN_S) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def listing(path: Path) -> list[str]:
    return sorted(os.listdir(path))


def test_a_cached_listing_follows_outside_creates_removes_and_renames(mirror: Mount) -> None:
    mnt, src = mirror.mountpoint, mirror.source
    for _ in range(2):
        assert listing(mnt / "nested") == listing(src / "nested")  # now cached by the kernel
    (src / "nested" / "new.txt").write_text("new\n")
    assert within(lambda: "new.txt" in listing(mnt / "nested"))
    os.rename(src / "nested" / "new.txt", src / "nested" / "renamed.txt")
    assert within(lambda: listing(mnt / "nested") == listing(src / "nested"))
    os.unlink(src / "nested" / "renamed.txt")
    (src / "nested" / "sub").mkdir()
    assert within(lambda: listing(mnt / "nested") == listing(src / "nested"))
    os.rename(src / "nested" / "deeper", src / "moved")
    assert within(lambda: listing(mnt) == listing(src) and listing(mnt / "moved") == ["leaf.txt"])


def test_changes_through_the_mount_are_listed_at_once(mirror: Mount) -> None:
    mnt = mirror.mountpoint
    before = listing(mnt / "nested")
    (mnt / "nested" / "made.txt").write_text("x")
    assert listing(mnt / "nested") == sorted([*before, "made.txt"])
    os.rename(mnt / "nested" / "made.txt", mnt / "nested" / "kept.txt")
    assert listing(mnt / "nested") == sorted([*before, "kept.txt"])
    os.unlink(mnt / "nested" / "kept.txt")
    assert listing(mnt / "nested") == before


def test_a_name_seen_absent_appears_when_created_outside(mirror: Mount) -> None:
    mnt, src = mirror.mountpoint, mirror.source
    for _ in range(3):
        assert not (mnt / "later.txt").exists() and not (mnt / "nested" / "later").exists()
    (src / "later.txt").write_text("here\n")
    (src / "nested" / "later").mkdir()
    assert within(lambda: (mnt / "later.txt").exists() and (mnt / "nested" / "later").is_dir())
    assert (mnt / "later.txt").read_text() == "here\n"


def test_outside_attribute_changes_reach_stat(mirror: Mount, backend: str) -> None:
    mnt, src = mirror.mountpoint, mirror.source
    assert os.stat(mnt / "notes.txt").st_mode & 0o777 == os.stat(src / "notes.txt").st_mode & 0o777
    os.chmod(src / "notes.txt", 0o640)
    os.utime(src / "README.md", ns=(1_000_000_000, 2_000_000_000))
    os.chown(src / "nested", 4321, 8765)
    assert within(lambda: os.stat(mnt / "notes.txt").st_mode & 0o777 == 0o640)
    assert within(lambda: os.stat(mnt / "README.md").st_mtime_ns == 2_000_000_000)
    assert within(lambda: os.stat(mnt / "nested").st_uid == 4321)
    # inotify reports a link made or removed outside by its new or removed name only, never the inode's
    # other names: the kernel backend stats a new name and refreshes the inode at once; otherwise a
    # file with several links keeps the short timeout (docs/SEMANTICS.md, "Cache coherence").
    os.link(src / "notes.txt", src / "nested" / "link.txt")
    assert within(lambda: os.stat(mnt / "notes.txt").st_nlink == 2, timeout=FRESH_WITHIN_S if kernel_family(backend)
                  else SHORT_TIMEOUT_S)
    os.unlink(src / "nested" / "link.txt")
    assert within(lambda: os.stat(mnt / "notes.txt").st_nlink == 1, timeout=SHORT_TIMEOUT_S)


def test_the_control_tree_is_never_cached(mirror: Mount, backend: str) -> None:
    """Listings of .sparsefs are live on both backends; its snapshots are on the kernel backend, and up to
    the attribute timeout (5 s) old with mfusepy (docs/SEMANTICS.md, "Control tree")."""
    mnt = mirror.mountpoint
    before = listing(mnt / ".sparsefs" / "episodes")
    (mnt / "annual-report.md@intent=headcount at year end").read_bytes()
    assert len(listing(mnt / ".sparsefs" / "episodes")) == len(before) + 1
    first = json.loads((mnt / ".sparsefs" / "stats.json").read_bytes())["packs_served"]
    (mnt / "annual-report.md@intent=R&D expenses").read_bytes()
    assert within(lambda: json.loads((mnt / ".sparsefs" / "stats.json").read_bytes())["packs_served"] == first + 1,
                  timeout=0.0 if kernel_family(backend) else 6.0)


def test_when_watching_stops_the_kernel_forgets_what_it_cached(workspace: Path, tmp_path: Path,
                                                               backend: str) -> None:
    """inotify runs out while mounted (a new directory cannot be watched): everything cached long is dropped."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with tiny_watch_limit(spare=sum(1 for _ in os.walk(workspace)) + 2):
        mount = mountutil.start(workspace, mnt, tmp_path / "state", backend=backend)
    try:
        with mountutil.hang_guard(mount, 60):
            assert json.loads((mnt / ".sparsefs" / "stats.json").read_bytes())["watcher"]["mode"] == "inotify"
            listing(mnt / "nested")
            assert not (mnt / "nested" / "gone-later.txt").exists()
            os.stat(mnt / "notes.txt")
            for n in range(8):  # more new directories than watches left: the watcher gives up
                (workspace / f"extra{n}").mkdir()
            assert within(lambda: json.loads((mnt / ".sparsefs" / "stats.json").read_bytes())
                          ["watcher"]["mode"] == "on-access", timeout=10)
            os.chmod(workspace / "notes.txt", 0o604)
            (workspace / "nested" / "gone-later.txt").write_text("x")
            assert within(lambda: os.stat(mnt / "notes.txt").st_mode & 0o777 == 0o604, timeout=6)
            assert within(lambda: "gone-later.txt" in listing(mnt / "nested"), timeout=6)
            assert within(lambda: (mnt / "nested" / "gone-later.txt").exists(), timeout=6)
    finally:
        mountutil.stop(mount)


def test_small_files_read_again_stay_fresh(mirror: Mount) -> None:
    """Read-only opens of small files use the page cache while watched (kernel backend, issue 19): an
    outside rewrite that keeps the size and mtime's second is seen within the watcher's latency, and
    writes through the mount at once, whether or not a reader holds the file open."""
    mnt, src = mirror.mountpoint, mirror.source
    for _ in range(2):
        assert (mnt / "notes.txt").read_bytes() == (src / "notes.txt").read_bytes()  # pages now cached
    data = (src / "notes.txt").read_bytes()
    (src / "notes.txt").write_bytes(data.swapcase())  # same size
    assert within(lambda: (mnt / "notes.txt").read_bytes() == data.swapcase())
    with open(mnt / "notes.txt", "ab") as out:  # beside no reader: kernel passthrough
        out.write(b"appended\n")
    assert (mnt / "notes.txt").read_bytes() == data.swapcase() + b"appended\n"
    with open(mnt / "notes.txt", "rb") as held:  # a page-cache open: writes beside it go through the daemon
        with open(mnt / "notes.txt", "r+b") as out:
            out.write(b"X")
        assert held.read() == b"X" + (data.swapcase() + b"appended\n")[1:]
    assert (src / "notes.txt").read_bytes()[:1] == b"X"


def test_a_file_first_opened_write_only_reads_back(mirror: Mount) -> None:
    """The first open of a node keeps its fd; a write-only one cannot serve the page cache's reads."""
    mnt = mirror.mountpoint
    fd = os.open(mnt / "nested" / "w.txt", os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"written\n")
    os.close(fd)
    fd = os.open(mnt / "README.md", os.O_WRONLY | os.O_APPEND)
    os.write(fd, b"tail\n")
    os.close(fd)
    assert (mnt / "nested" / "w.txt").read_bytes() == b"written\n"
    assert (mnt / "README.md").read_bytes() == (mirror.source / "README.md").read_bytes()
    assert (mnt / "README.md").read_bytes().endswith(b"tail\n")


def test_a_name_removed_through_the_mount_and_made_again_outside_appears(mirror: Mount) -> None:
    """The watcher skips the echo of a removal made through the mount, never a later outside create."""
    mnt, src = mirror.mountpoint, mirror.source
    for rel in ("nested/again.txt", "nested/again-dir/f"):
        (mnt / rel).parent.mkdir(exist_ok=True)
        (mnt / rel).write_text("first\n")
    os.unlink(mnt / "nested" / "again.txt")
    os.unlink(mnt / "nested" / "again-dir" / "f")
    os.rmdir(mnt / "nested" / "again-dir")
    for _ in range(3):  # now remembered as absent (negative entries, kernel backend)
        assert not (mnt / "nested" / "again.txt").exists() and not (mnt / "nested" / "again-dir").exists()
    (src / "nested" / "again.txt").write_text("second\n")
    (src / "nested" / "again-dir").mkdir()
    assert within(lambda: (mnt / "nested" / "again.txt").exists() and (mnt / "nested" / "again-dir").is_dir())
    assert (mnt / "nested" / "again.txt").read_text() == "second\n"
    assert "again.txt" in listing(mnt / "nested")


def test_a_page_cache_open_reads_its_file_after_the_name_is_gone(mirror: Mount) -> None:
    """A page-cache open holds no fd until its first READ; unlinking or renaming over the name through
    the mount must not leave it without one (its first open here was write-only)."""
    mnt = mirror.mountpoint
    for name, gone in (("u.txt", lambda p: os.unlink(p)), ("r.txt", lambda p: os.rename(mnt / "other.txt", p))):
        (mnt / "other.txt").write_bytes(b"other\n")
        fd = os.open(mnt / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(fd, name.encode() * 100)
        os.close(fd)
        with open(mnt / name, "rb") as held:
            gone(mnt / name)
            assert held.read() == name.encode() * 100


def _kinds_seen(path: Path, seconds: float) -> tuple[set[str], list[str]]:
    """Stat ``path`` through the mount for ``seconds``: the file types seen, and any error other than absence."""
    seen, errors = set(), []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            seen.add("dir" if stat.S_ISDIR(os.stat(path).st_mode) else "file")
        except FileNotFoundError:
            seen.add("absent")
        except OSError as err:
            errors.append(f"{err.errno} {err.strerror}")
    return seen, errors


def test_a_file_replaced_by_a_directory_outside_never_answers_eio(mirror: Mount) -> None:
    """Issue 25, item 3: while the kernel still holds the old node (before the watcher's invalidation, or
    after attributes expire), its path leads to an object of another type. The old node is answered for as
    a vanished file and the name is looked up fresh: stat sees the old or the new object, never EIO."""
    mnt, src = mirror.mountpoint, mirror.source
    errors: list[str] = []
    for index in range(12):
        name = f"swap{index}"
        (src / name).write_text("a file\n")
        assert (mnt / name).read_text() == "a file\n"  # the kernel now holds a file node for the name
        (src / name).unlink()
        (src / name).mkdir()
        (src / name / "inside.txt").write_text("in the directory\n")
        seen, failed = _kinds_seen(mnt / name, 0.4)
        errors += failed
        assert seen <= {"file", "dir", "absent"} and within(lambda n=name: (mnt / n).is_dir())  # type: ignore[misc]
        assert (mnt / name / "inside.txt").read_text() == "in the directory\n"
        for entry in (src / name).iterdir():  # and back: the directory becomes a file again
            entry.unlink()
        (src / name).rmdir()
        (src / name).write_text("a file again\n")
        seen, failed = _kinds_seen(mnt / name, 0.4)
        errors += failed
        assert within(lambda n=name: (mnt / n).is_file())  # type: ignore[misc]
        assert (mnt / name).read_text() == "a file again\n"
    assert not errors, errors


def test_stores_through_an_outside_mapping_are_seen_within_the_writeback_window(workspace: Path, tmp_path: Path,
                                                                              backend: str) -> None:
    """Issue 25, item 4: a process writing a file through a shared mapping raises no inotify event until it
    closes it. The first store moves the file's mtime and ctime (the write fault), and the next open sees
    the new stamp and reads the file again; a later store to a page still dirty moves nothing, and is seen
    once the writeback window after the last ctime has passed (sparsefs.fuse.pagecache; the window is
    about 40 s by default, 2 s on this mount)."""
    (tmp_path / "mnt").mkdir()
    mount = mountutil.start(workspace, tmp_path / "mnt", tmp_path / "state", backend=backend,
                            env={pagecache.WINDOW_ENV: "2"})
    mnt, src = mount.mountpoint, workspace
    try:
        (src / "mapped.txt").write_bytes(b"a" * 8192)
        for _ in range(2):
            assert (mnt / "mapped.txt").read_bytes() == b"a" * 8192
        with open(src / "mapped.txt", "r+b") as handle, mmap.mmap(handle.fileno(), 8192) as mapped:
            mapped[0:10] = b"B" * 10  # faults the page writable: mtime and ctime move
            assert (mnt / "mapped.txt").read_bytes()[:20] == b"B" * 10 + b"a" * 10
            mapped[10:20] = b"C" * 10  # the page is still dirty: no fault, no new ctime
            expected = b"B" * 10 + b"C" * 10 + b"a" * 10
            assert within(lambda: (mnt / "mapped.txt").read_bytes()[:30] == expected, timeout=6.0)
    finally:
        mountutil.stop(mount)


def _git(cwd: Path, *args: str) -> str:
    identity = ["-c", "user.name=t", "-c", "user.email=t@example.com"]
    return subprocess.run(["git", *identity, *args], cwd=cwd, capture_output=True, text=True, timeout=60,
                          check=True).stdout


def _requests(mount: Mount) -> dict[str, int]:
    return dict(json.loads((mount.mountpoint / ".sparsefs" / "stats.json").read_text())["kernel_requests"])


def test_the_echo_of_a_checkout_costs_the_next_status_nothing_per_file(mirror: Mount, backend: str) -> None:
    """Issue 26, item 4: the watcher hears every file a checkout through the mount wrote; the kernel already
    knows them (it fetched their attributes as git wrote them), so the echo drops nothing and the first
    git status after the checkout asks for no file's attributes again."""
    if not kernel_family(backend):
        pytest.skip("request counts are the kernel backend's")
    repo = mirror.mountpoint / "repo"
    for index in range(150):
        (repo / f"d{index % 5}").mkdir(parents=True, exist_ok=True)
        (repo / f"d{index % 5}" / f"f{index}.txt").write_text(f"{index}\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "one")
    _git(repo, "checkout", "-qb", "two")
    for path in repo.glob("d*/f*.txt"):
        path.write_text(path.read_text() + "two\n")
    _git(repo, "commit", "-qam", "two")
    for branch in ("master", "two"):
        _git(repo, "checkout", "-q", branch)
        time.sleep(0.3)  # the watcher's echo of 150 rewritten files arrives
        before = _requests(mirror)
        assert _git(repo, "status", "--porcelain") == ""
        after = _requests(mirror)
        # 150 files rewritten; what is left is git's own (directories, .git): about 30 here
        assert after.get("GETATTR", 0) - before.get("GETATTR", 0) < 60, (before, after)


def test_an_outside_change_right_after_a_write_through_the_mount_is_seen(mirror: Mount) -> None:
    """The echo of a write through the mount is skipped only while the file is exactly what the kernel was
    given: a same-size rewrite outside, a moment later, still reaches readers."""
    mnt, src = mirror.mountpoint, mirror.source
    for index in range(10):
        path = mnt / f"written{index}.txt"
        path.write_bytes(b"through the mount\n")
        assert path.read_bytes() == b"through the mount\n"
        (src / path.name).write_bytes(b"OUTSIDE the mount\n")  # the same size, a moment later
        assert within(lambda p=path: p.read_bytes() == b"OUTSIDE the mount\n")  # type: ignore[misc]
