"""Real clients on a real mount: what the user touches through the filesystem."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests import mountutil
from tests.conftest import DATA

Mount = mountutil.Mount


def sh(command: list[str] | str, cwd: Path | None = None, timeout: float = 60) -> str:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                            shell=isinstance(command, str), check=False)
    assert result.returncode == 0, f"{command} failed: {result.stderr}"
    return result.stdout


def tree(root: Path) -> dict[str, bytes]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".sparsefs"]
        for name in filenames:
            path = Path(dirpath, name)
            out[str(path.relative_to(root))] = path.read_bytes()
    return out


def test_listing_matches_source(mirror: Mount) -> None:
    assert sorted(os.listdir(mirror.mountpoint)) == sorted(os.listdir(mirror.source))  # .sparsefs: by name only
    found = sh(["find", "."], cwd=mirror.mountpoint).split()
    assert "./nested/deeper/leaf.txt" in found
    assert not any("@" in f for f in found)


def test_plain_reads_are_byte_identical(mirror: Mount) -> None:
    assert tree(mirror.mountpoint) == tree(mirror.source)
    report = mirror.mountpoint / "annual-report.md"
    assert sh(["cat", str(report)]) == (mirror.source / "annual-report.md").read_text()
    assert sh(["head", "-c", "100", str(report)]).encode() == (mirror.source / "annual-report.md").read_bytes()[:100]


def test_grep_r_finds_what_native_grep_finds(mirror: Mount) -> None:
    native = sh(["grep", "-rn", "headcount", "."], cwd=mirror.source)
    mounted = sh(["grep", "-rn", "headcount", "."], cwd=mirror.mountpoint)
    assert mounted == native and "1,184" in mounted


def test_node_reads_plain_and_virtual_files(mirror: Mount) -> None:
    if not shutil.which("node"):
        pytest.fail("node is not installed (scripts/setup installs nodejs)")
    script = ("const fs=require('fs');"
              "const a=fs.readFileSync('annual-report.md');"
              "const p=fs.readFileSync('annual-report.md@intent=R&D expenses 2023','utf8');"
              "console.log(a.length, p.includes('48.2'))")
    out = sh(["node", "-e", script], cwd=mirror.mountpoint)
    assert out.split() == [str((mirror.source / "annual-report.md").stat().st_size), "true"]


def test_cp_r_copies_the_real_tree_only(mirror: Mount, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    sh(["cp", "-r", str(mirror.mountpoint / "nested"), str(copy)])
    assert (copy / "deeper" / "leaf.txt").read_text() == "leaf\n"
    virtual = tmp_path / "pack.txt"
    sh(["cp", str(mirror.mountpoint / "annual-report.md@intent=headcount"), str(virtual)])
    assert virtual.read_bytes() == (mirror.mountpoint / "annual-report.md@intent=headcount").read_bytes()


def test_git_works_inside_the_mount(mirror: Mount) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    repo = mirror.mountpoint / "nested"
    for command in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "first"]):
        subprocess.run(command, cwd=repo, env=env, check=True, capture_output=True, timeout=60)
    (repo / "new.txt").write_text("change\n")
    status = sh(["git", "status", "--porcelain"], cwd=repo)
    assert status.strip() == "?? new.txt"
    assert (mirror.source / "nested" / ".git" / "HEAD").exists()
    sh(["git", "fsck", "--no-progress"], cwd=repo)


def test_writes_land_in_the_source(mirror: Mount) -> None:
    mnt, src = mirror.mountpoint, mirror.source
    (mnt / "new.bin").write_bytes(os.urandom(300_000))
    assert (src / "new.bin").read_bytes() == (mnt / "new.bin").read_bytes()
    with open(mnt / "new.bin", "r+b") as f:
        f.seek(1000)
        f.write(b"patched")
        f.truncate(5000)
        f.flush()
        os.fsync(f.fileno())
    assert (src / "new.bin").stat().st_size == 5000
    assert (src / "new.bin").read_bytes()[1000:1007] == b"patched"
    with open(mnt / "notes.txt", "a") as f:
        f.write("appended\n")
    assert (src / "notes.txt").read_text().endswith("appended\n")


def test_namespace_operations(mirror: Mount) -> None:
    mnt, src = mirror.mountpoint, mirror.source
    (mnt / "d1").mkdir()
    (mnt / "d1" / "a.txt").write_text("a")
    os.rename(mnt / "d1" / "a.txt", mnt / "d1" / "b.txt")
    assert (src / "d1" / "b.txt").read_text() == "a" and not (src / "d1" / "a.txt").exists()
    os.symlink("b.txt", mnt / "d1" / "link")
    assert os.readlink(mnt / "d1" / "link") == "b.txt" and (mnt / "d1" / "link").read_text() == "a"
    os.link(mnt / "d1" / "b.txt", mnt / "d1" / "hard")
    assert (src / "d1" / "hard").stat().st_ino == (src / "d1" / "b.txt").stat().st_ino
    os.chmod(mnt / "d1" / "b.txt", 0o600)
    assert (src / "d1" / "b.txt").stat().st_mode & 0o777 == 0o600
    os.utime(mnt / "d1" / "b.txt", ns=(1_000_000_000, 2_000_000_000))
    assert (src / "d1" / "b.txt").stat().st_mtime_ns == 2_000_000_000
    for name in ("b.txt", "link", "hard"):
        os.unlink(mnt / "d1" / name)
    os.rmdir(mnt / "d1")
    assert not (src / "d1").exists()
    assert os.statvfs(mnt).f_blocks == os.statvfs(src).f_blocks


def test_atomic_save_by_rename_is_seen_immediately(mirror: Mount) -> None:
    mnt = mirror.mountpoint
    assert (mnt / "notes.txt").read_text()
    (mnt / ".notes.txt.tmp").write_text("replaced\n")
    os.replace(mnt / ".notes.txt.tmp", mnt / "notes.txt")
    assert (mnt / "notes.txt").read_text() == "replaced\n"
    assert (mirror.source / "notes.txt").read_text() == "replaced\n"


def test_outside_changes_are_never_served_stale(mirror: Mount) -> None:
    mnt, src = mirror.mountpoint, mirror.source
    (src / "live.txt").write_text("version-1\n")
    assert mountutil.wait_for(lambda: (mnt / "live.txt").exists())
    assert (mnt / "live.txt").read_text() == "version-1\n"
    (src / "live.txt").write_text("version-2\n")  # same size
    assert mountutil.wait_for(lambda: (mnt / "live.txt").read_text() == "version-2\n", timeout=2)
    (src / "live.txt").write_text("version-3 is longer\n")
    assert mountutil.wait_for(lambda: (mnt / "live.txt").read_text() == "version-3 is longer\n", timeout=2)
    assert (mnt / "live.txt").stat().st_size == len("version-3 is longer\n")


def test_in_place_mount_keeps_paths_and_writes_through(in_place: Mount) -> None:
    root = in_place.mountpoint
    assert mountutil.mounts.is_sparsefs_mount(root)
    assert (root / ".sparsefs" / "SKILL.md").read_text().startswith("# Reading files here")
    (root / "added.txt").write_text("kept\n")
    assert "1,184" in (root / "annual-report.md@intent=headcount at year end").read_text()
    mountutil.stop(in_place)
    assert (root / "added.txt").read_text() == "kept\n"
    assert not (root / ".sparsefs").exists()


@pytest.fixture
def data_mount(tmp_path: Path, backend: str) -> Mount:
    mnt = tmp_path / "data"
    mnt.mkdir()
    mount = mountutil.start(DATA, mnt, tmp_path / "state", "--no-watch", backend=backend)
    yield mount  # type: ignore[misc]
    mountutil.stop(mount)


def test_sha256_of_every_shared_data_file_matches(data_mount: Mount) -> None:
    checked = 0
    for dirpath, _, filenames in os.walk(DATA):
        for name in filenames:
            source = Path(dirpath, name)
            mounted = data_mount.mountpoint / source.relative_to(DATA)
            assert _sha256(mounted) == _sha256(source), source
            checked += 1
    assert checked > 50


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_in_place_sees_changes_made_below_the_mount(workspace: Path, tmp_path: Path, backend: str) -> None:
    """A process that held the directory before mounting writes underneath; the mount follows."""
    below = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY)
    mount = mountutil.start(workspace, None, tmp_path / "state", backend=backend)
    try:
        assert (workspace / "notes.txt").read_text()
        fd = os.open("notes.txt", os.O_WRONLY | os.O_TRUNC, dir_fd=below)
        os.write(fd, b"rewritten below the mount\n")
        os.close(fd)
        expected = "rewritten below the mount\n"
        assert mountutil.wait_for(lambda: (workspace / "notes.txt").read_text() == expected, timeout=2)
    finally:
        mountutil.stop(mount)
        os.close(below)


def test_file_unlinked_while_open_keeps_working(mirror: Mount) -> None:
    path = mirror.mountpoint / "scratch.bin"
    with open(path, "w+b") as f:
        f.write(b"before")
        f.flush()
        os.unlink(path)
        f.write(b" after unlink")
        f.flush()
        os.ftruncate(f.fileno(), 12)
        assert os.fstat(f.fileno()).st_size == 12
        f.seek(0)
        assert f.read() == b"before after"
    assert not (mirror.source / "scratch.bin").exists()
    assert not [p for p in mirror.source.iterdir() if p.name.startswith(".fuse_hidden")]


def test_fifo_base_never_blocks_the_daemon(mirror: Mount) -> None:
    os.mkfifo(mirror.source / "pipe")
    text = sh(["cat", str(mirror.mountpoint / "pipe@intent=anything")], timeout=10)
    assert ": error: " in text and "regular file" in text
    assert (mirror.mountpoint / "notes.txt").read_text()


def test_allow_other_files_belong_to_their_creator(workspace: Path, tmp_path: Path, backend: str) -> None:
    outer = Path(tempfile.mkdtemp(prefix="sparsefs-allow-other-"))  # pytest's tmp is 0700: nobody can't reach it
    os.chmod(outer, 0o755)
    mnt = outer / "mnt"
    mnt.mkdir()
    os.chmod(workspace, 0o777)
    shared = workspace / "team"
    shared.mkdir()
    os.chown(shared, 0, 100)
    os.chmod(shared, 0o2777)  # setgid: new entries take the directory's group
    mount = mountutil.start(workspace, mnt, tmp_path / "state", "--allow-other", backend=backend)
    try:
        as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        sh([*as_nobody, "sh", "-c", f"echo one > {mnt}/mine.txt && echo two >> {mnt}/mine.txt && mkdir {mnt}/mydir"
            f" && touch {mnt}/mydir/inner && ln -s mine.txt {mnt}/link"])
        for name in ("mine.txt", "mydir", "mydir/inner", "link"):
            st = os.lstat(workspace / name)
            assert (st.st_uid, st.st_gid) == (65534, 65534), name
        assert (workspace / "mine.txt").read_text() == "one\ntwo\n"
        sh([*as_nobody, "touch", f"{mnt}/team/ours.txt"])
        st = os.lstat(workspace / "team" / "ours.txt")
        assert (st.st_uid, st.st_gid) == (65534, 100)
        denied = subprocess.run([*as_nobody, "sh", "-c", f"echo x >> {mnt}/notes.txt"], capture_output=True,
                                timeout=10, check=False)
        assert denied.returncode != 0  # default_permissions: root's 0644 file stays closed to others
    finally:
        mountutil.stop(mount)
        shutil.rmtree(outer, ignore_errors=True)
