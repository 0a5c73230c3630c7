"""No escape from the source root: symlinks, '..', anchors, hard links, swaps, permissions.

Symlinks are passthrough: a caller that follows one through the mount lands
wherever the link points with the caller's own rights, exactly as on the
native filesystem. What must never happen is the *daemon* (root, holding the
source fd) following a link out of the root for the caller: when it builds a
pack, proxies ``@raw``, or resolves a path whose directory was swapped for a
link after the kernel looked it up. Mount tests therefore open through the
mount with ``openat2(RESOLVE_BENEATH)`` relative to the mountpoint, so the
caller's kernel never follows an escaping link itself: any secret byte that
comes back came from the daemon.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sparsefs.source.rootfs import SourceRoot, openat2
from tests import mountutil
from tests.conftest import HANG_GUARD_S

Mount = mountutil.Mount
SECRET = "TOPSECRET-7f3a9c"
OUTSIDE_LINKS = ("abs_link", "rel_link", "chain_a", "loop")


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    """src/ with links that lead out to outside/ (holding the secret) and one that stays in."""
    src, outside = tmp_path / "src", tmp_path / "outside"
    (src / "d").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_text(f"the code is {SECRET}\n" * 20)
    (outside / "f").write_text(f"{SECRET}\n")
    (src / "notes.txt").write_text("inside notes about the harbor route\n" * 20)
    (src / "d" / "f").write_text("inside\n")
    (src / "abs_link").symlink_to(outside / "secret.txt")
    (src / "rel_link").symlink_to("../outside/secret.txt")
    (src / "chain_b").symlink_to("rel_link")
    (src / "chain_a").symlink_to("chain_b")
    (src / "loop").symlink_to("loop")
    (src / "outdir").symlink_to("../outside")
    (src / "in_link").symlink_to("notes.txt")
    (src / "folder").mkdir()
    (src / "folder" / "inner.txt").write_text("inside folder, the code is elsewhere\n")
    (src / "folder" / "rel").symlink_to("../../outside/secret.txt")
    (src / "folder" / "abs").symlink_to(outside / "secret.txt")
    (src / "folder" / "dir").symlink_to(outside)
    return src, outside


@pytest.fixture
def escape_mount(layout: tuple[Path, Path], tmp_path: Path, backend: str) -> Iterator[Mount]:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    mount = mountutil.start(layout[0], mnt, tmp_path / "state", backend=backend)
    try:
        with mountutil.hang_guard(mount, HANG_GUARD_S):
            yield mount
    finally:
        mountutil.stop(mount)


def read_beneath(mnt: Path, rel: str) -> bytes | int:
    """The bytes at ``rel`` opened without the caller ever leaving ``mnt``; the errno if it fails."""
    try:
        fd = _open_beneath(mnt, rel, os.O_RDONLY)
    except OSError as err:
        return err.errno or -1
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as err:
        return err.errno or -1
    finally:
        os.close(fd)


def assert_no_secret(got: bytes | int) -> None:
    assert not isinstance(got, bytes) or SECRET.encode() not in got, got


def test_no_pack_or_raw_view_follows_a_link_out_of_the_root(escape_mount: Mount) -> None:
    for name in OUTSIDE_LINKS:
        for suffix in ("@intent=what is the code", "@raw", "@full", "@scout", "@count"):
            try:
                got: bytes | int = (escape_mount.mountpoint / f"{name}{suffix}").read_bytes()  # sent as is
            except OSError as err:
                got = err.errno or -1
            assert_no_secret(got)
            assert not isinstance(got, bytes) or b": error: " in got, (name, suffix)
    assert (escape_mount.mountpoint / "notes.txt").read_bytes()  # still up


def test_a_link_that_stays_inside_is_served(escape_mount: Mount) -> None:
    text = (escape_mount.mountpoint / "in_link@intent=harbor route").read_text()
    assert "harbor route" in text and ": error: " not in text


def test_a_folder_pack_never_reads_through_member_links(escape_mount: Mount) -> None:
    mnt = escape_mount.mountpoint
    for suffix in ("@full", "@scout", "@intent=what is the code", "@intent=code&scope=*", "@count"):
        got = read_beneath(mnt, f"folder{suffix}")
        assert_no_secret(got)
    whole = read_beneath(mnt, "folder@full")
    assert isinstance(whole, bytes) and b"inside folder" in whole


ANCHORS = (
    "../outside/secret.txt",
    "..%2Foutside%2Fsecret.txt",
    "%2Fetc%2Fpasswd",
    "../../../../etc/shadow",
    "outdir%2Fsecret.txt",
    "abs_link",
    "L1-L9999",
)


def test_anchors_and_scopes_never_open_paths(escape_mount: Mount) -> None:
    mnt = escape_mount.mountpoint
    for anchor in ANCHORS:
        for name in (
            f"notes.txt@focus={anchor}",
            f"folder@focus={anchor}",
            f"notes.txt@intent=code&scope={anchor}",
            f"folder@intent=code&scope={anchor}",
        ):
            try:
                got: bytes | int = (mnt / name).read_bytes()
            except OSError as err:
                got = err.errno or -1
            assert_no_secret(got)
            assert not isinstance(got, bytes) or b"root:" not in got


def test_dotdot_never_reaches_the_daemon_as_a_component(escape_mount: Mount) -> None:
    assert_no_secret(read_beneath(escape_mount.mountpoint, "d/../../outside/secret.txt"))
    assert read_beneath(escape_mount.mountpoint, "d/../notes.txt") == (escape_mount.source / "notes.txt").read_bytes()


def test_a_directory_swapped_for_an_outside_link_is_never_followed(
    escape_mount: Mount, layout: tuple[Path, Path]
) -> None:
    """The kernel looked ``d`` up as a directory; then ``d`` becomes a link out. Reads, creates and
    links through the kernel's cached ``d`` must not reach outside/ (several rounds, both directions)."""
    src, outside = layout
    mnt = escape_mount.mountpoint
    stop = threading.Event()
    swaps: list[int] = []
    swapper = threading.Thread(target=_swap_repeatedly, args=(src, outside, stop, swaps), daemon=True)
    leaks: list[str] = []
    swapper.start()
    try:
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            leaks += _probe_once(mnt)
    finally:
        stop.set()
        swapper.join(timeout=10)
    assert not leaks
    assert len(swaps) > 10, "the swapper died: nothing was tested"
    assert sorted(os.listdir(outside)) == ["f", "secret.txt"]
    assert (outside / "f").read_text() == f"{SECRET}\n"


def _swap_repeatedly(src: Path, outside: Path, stop: threading.Event, swaps: list[int]) -> None:
    real, link = src / "d.real", src / "d.link"
    link.symlink_to(outside)
    while not stop.is_set():
        os.rename(src / "d", real)
        os.rename(link, src / "d")  # d -> outside
        time.sleep(0.002)
        os.rename(src / "d", link)
        os.rename(real, src / "d")  # d is the real directory again
        swaps.append(1)
        time.sleep(0.002)


def _probe_once(mnt: Path) -> list[str]:
    leaks = []
    for rel in ("d/f", "d/f@raw", "d/f@full", "d/f@intent=code"):
        got = read_beneath(mnt, rel)
        if isinstance(got, bytes) and SECRET.encode() in got:
            leaks.append(rel)
    try:
        dfd = _open_beneath(mnt, "d", os.O_PATH | os.O_DIRECTORY)  # the kernel's d, never followed by us
    except OSError:
        return leaks
    try:
        for attempt in (
            lambda: os.close(os.open("new", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=dfd)),
            lambda: os.mkdir("newdir", dir_fd=dfd),
            lambda: os.symlink("x", "newlink", dir_fd=dfd),
            lambda: os.link("f", str(mnt / "hard"), src_dir_fd=dfd, follow_symlinks=False),
        ):
            _try(attempt)
        if isinstance(got := read_beneath(mnt, "hard"), bytes) and SECRET.encode() in got:
            leaks.append("hard link")
        _try(lambda: os.unlink(mnt / "hard"))
    finally:
        os.close(dfd)
    return leaks


def _open_beneath(mnt: Path, rel: str, flags: int) -> int:
    root = os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return openat2(root, rel, flags)
    finally:
        os.close(root)


def _try(action: Callable[[], None]) -> None:
    with contextlib.suppress(OSError):
        action()


def test_hard_links_never_cross_the_root(escape_mount: Mount, layout: tuple[Path, Path]) -> None:
    mnt = escape_mount.mountpoint
    with pytest.raises(OSError) as raised:
        os.link(layout[1] / "secret.txt", mnt / "stolen")
    assert raised.value.errno == errno.EXDEV
    os.link(mnt / "abs_link", mnt / "link_copy", follow_symlinks=False)  # links the link, not its target
    assert os.path.islink(layout[0] / "link_copy")
    assert_no_secret(read_beneath(mnt, "link_copy"))
    assert_no_secret(read_beneath(mnt, "link_copy@intent=code"))


# ---- the same guarantees one level down: SourceRoot with a parent already swapped ----


@pytest.fixture
def swapped(layout: tuple[Path, Path]) -> Iterator[tuple[SourceRoot, Path]]:
    src, outside = layout
    shutil.rmtree(src / "d")
    (src / "d").symlink_to(outside)
    (src / "e").symlink_to("../outside")
    root = SourceRoot.open(str(src))
    try:
        yield root, outside
    finally:
        root.close()


OPERATIONS: dict[str, Callable[[SourceRoot], object]] = {
    "open": lambda r: os.close(r.open_file("d/f", os.O_RDONLY)),
    "open relative": lambda r: os.close(r.open_file("e/f", os.O_RDONLY)),
    "open final link": lambda r: os.close(r.open_file("abs_link", os.O_RDONLY)),
    "open chain": lambda r: os.close(r.open_file("chain_a", os.O_RDONLY)),
    "create": lambda r: os.close(r.open_regular("d/new", os.O_WRONLY | os.O_CREAT, 0o644)),
    "lstat": lambda r: r.lstat("d/f"),
    "scandir": lambda r: r.scandir("d"),
    "stat_entries": lambda r: r.stat_entries("d", ["f"]) or (_ for _ in ()).throw(OSError(errno.ENOENT, "none")),
    "readlink": lambda r: r.readlink("d/f"),
    "mkdir": lambda r: r.mkdir("d/newdir", 0o755),
    "mknod": lambda r: r.mknod("d/fifo", 0o10644, 0),
    "rmdir": lambda r: r.rmdir("d/sub"),
    "unlink": lambda r: r.unlink("d/f"),
    "symlink": lambda r: r.symlink("x", "d/newlink"),
    "link from": lambda r: r.link("d/f", "stolen"),
    "link into": lambda r: r.link("notes.txt", "d/planted"),
    "rename from": lambda r: r.rename("d/f", "stolen"),
    "rename into": lambda r: r.rename("notes.txt", "d/planted"),
    "chmod": lambda r: r.chmod("d/f", 0o777),
    "chmod final link": lambda r: r.chmod("abs_link", 0o777),
    "chown": lambda r: r.chown("d/f", 65534, 65534),
    "utimens": lambda r: r.utimens("d/f", 0, 0),
    "truncate": lambda r: r.truncate("d/f", 0),
    "truncate final link": lambda r: r.truncate("abs_link", 0),
    "access": lambda r: r.access("d/f", os.R_OK),
    "getxattr": lambda r: r.getxattr("d/f", "user.x"),
    "listxattr": lambda r: r.listxattr("d/f"),
    "setxattr": lambda r: r.setxattr("d/f", "user.x", b"1", 0),
    "setxattr final link": lambda r: r.setxattr("abs_link", "user.x", b"1", 0),
    "removexattr": lambda r: r.removexattr("d/f", "user.x"),
}


@pytest.mark.parametrize("name", sorted(OPERATIONS))
def test_every_source_operation_refuses_a_swapped_parent(swapped: tuple[SourceRoot, Path], name: str) -> None:
    root, outside = swapped
    (outside / "sub").mkdir()
    before = _snapshot(outside)
    with pytest.raises(OSError):
        OPERATIONS[name](root)
    assert _snapshot(outside) == before


def test_dotdot_is_refused_before_any_lookup(swapped: tuple[SourceRoot, Path]) -> None:
    from sparsefs.source.rootfs import relative

    for path in ("/../outside/f", "/d/../../outside/f", "/a/.."):
        with pytest.raises(OSError) as raised:
            relative(path)
        assert raised.value.errno == errno.EACCES
    with pytest.raises(OSError) as beneath:
        swapped[0].open_file("notes.txt/../../outside/f", os.O_RDONLY)
    assert beneath.value.errno in (errno.EXDEV, errno.ENOTDIR)


def test_a_path_longer_than_path_max_from_the_root_is_resolved_in_confined_pieces(tmp_path: Path) -> None:
    """A caller near PATH_MAX relative to its cwd is past it relative to the root (pjdfstest */03.t)."""
    src, outside = tmp_path / "src", tmp_path / "outside"
    outside.mkdir()
    (outside / "f").write_text("outside\n")
    root = SourceRoot.open(str(_mkdir(src)))
    try:
        rel = "/".join(["d" * 120] * 40)  # 4,839 bytes
        for depth in range(1, 41):
            root.mkdir("/".join(["d" * 120] * depth), 0o755)
        fd = root.open_regular(rel + "/file", os.O_WRONLY | os.O_CREAT, 0o644)
        os.close(fd)
        root.chmod(rel + "/file", 0o600)
        assert root.lstat(rel + "/file").st_mode & 0o777 == 0o600
        assert [name for name, _, _ in root.scandir(rel)[1]] == ["file"]
        deep = rel[: 121 * 35 - 1]  # past the first piece: the link is met by a later, confined piece
        root.symlink(str(outside), deep + "/out")  # made through the root: natively too long a path
        for path in (deep + "/out/f", deep + "/out/" + "/".join(["e" * 200] * 10) + "/f"):
            with pytest.raises(OSError) as raised:
                root.open_file(path, os.O_RDONLY)
            assert raised.value.errno == errno.EXDEV, path
    finally:
        root.close()


def _mkdir(path: Path) -> Path:
    path.mkdir()
    return path


def _snapshot(top: Path) -> dict[str, tuple[int, int, int, bytes]]:
    found = {}
    for dirpath, _, filenames in os.walk(top):
        for name in [*filenames, "."]:
            path = Path(dirpath, name)
            st = path.lstat()
            found[str(path)] = (st.st_mode, st.st_uid, st.st_mtime_ns, path.read_bytes() if path.is_file() else b"")
    return found


# ---- allow_other and permissions ----


def _mount_options(mnt: Path) -> set[str]:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if left.split()[4] == str(mnt):
            return set(right.split()[2].split(","))
    raise AssertionError(f"{mnt} not mounted")


def test_allow_other_is_off_by_default(escape_mount: Mount) -> None:
    options = _mount_options(escape_mount.mountpoint)
    assert "allow_other" not in options
    nobody = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "ls", str(escape_mount.mountpoint)],
        capture_output=True,
        timeout=10,
        check=False,
    )
    assert nobody.returncode != 0  # the kernel refuses every other user


def test_allow_other_turns_on_default_permissions_and_evidence_keeps_the_source_mode(
    tmp_path: Path, backend: str
) -> None:
    outer = Path(tempfile.mkdtemp(prefix="sparsefs-escape-"))  # pytest's tmp is 0700: nobody can't reach it
    try:
        os.chmod(outer, 0o755)
        src, mnt = outer / "src", outer / "mnt"
        src.mkdir(mode=0o755)
        mnt.mkdir()
        os.chmod(src, 0o755)
        (src / "private.txt").write_text(f"private {SECRET}\n" * 10)
        os.chmod(src / "private.txt", 0o600)
        (src / "public.txt").write_text("public harbor notes\n" * 10)
        mount = mountutil.start(src, mnt, tmp_path / "state", "--allow-other", backend=backend)
        try:
            assert {"allow_other", "default_permissions"} <= _mount_options(mnt)
            assert SECRET in (mnt / "private.txt@intent=private").read_text()  # root builds and caches it
            as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "cat"]
            public = subprocess.run(
                [*as_nobody, str(mnt / "public.txt@intent=harbor")], capture_output=True, timeout=10, check=False
            )
            assert public.returncode == 0 and b"harbor" in public.stdout
            for name in ("private.txt", "private.txt@intent=private", "private.txt@raw", "private.txt@full"):
                denied = subprocess.run([*as_nobody, str(mnt / name)], capture_output=True, timeout=10, check=False)
                assert denied.returncode != 0 and SECRET.encode() not in denied.stdout, name
        finally:
            mountutil.stop(mount)
    finally:
        shutil.rmtree(outer, ignore_errors=True)
