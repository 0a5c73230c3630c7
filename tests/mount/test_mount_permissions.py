"""No probe as another uid gets a byte it could not ``cat`` (issue 24, items 2 and 3), on both backends.

A mount with ``--allow-other`` is read as uid ``nobody`` (``runuser``/``setpriv``, in a temporary tree with
0755 parents) after root has built and frozen every pack: file packs, folder packs (intent, scout, full,
collect, focus), exact results, ``@raw``, error packs, a hard link and a symlink to an unreadable file, a
0700 folder inside a readable one, a file made unreadable after its pack was frozen, a POSIX ACL that denies
nobody, and the control tree (the owner's alone, SKILL.md excepted).
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests import mountutil
from tests.mountutil import Mount

SECRET = "ZEPPELIN-7731"
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
PUBLIC_TEXT = "The harbor budget for 2023 was 4.2 million.\n" + "Notes on the harbor fleet and its tugs.\n" * 120
SECRET_TEXT = f"Salaries: the harbor director earns {SECRET}.\n" + "Harbor payroll and budget details.\n" * 120


def _acl_denying(uid: int) -> bytes:
    """An access ACL (version 2) that gives the owner rw-, a named user ---, the group, mask and others r--."""
    undefined = 0xFFFFFFFF
    entries = [(0x01, 6, undefined), (0x02, 0, uid), (0x04, 4, undefined), (0x10, 4, undefined), (0x20, 4, undefined)]
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *entry) for entry in entries)


def _tree(src: Path) -> None:
    team = src / "team"
    (team / "vault").mkdir(parents=True)
    (team / "notes.md").write_text(PUBLIC_TEXT)
    (team / "salaries.md").write_text(SECRET_TEXT)
    os.chmod(team / "salaries.md", 0o600)
    (team / "vault" / f"{SECRET}-names.md").write_text("harbor vault plans\n" * 80)
    os.chmod(team / "vault", 0o700)
    (src / "sales.csv").write_text("region,amount\n" + "".join(f"r{i},{i}\n" for i in range(300)))
    os.chmod(src / "sales.csv", 0o600)
    os.link(team / "salaries.md", src / "hardlink.md")
    (src / "symlink.md").symlink_to("team/salaries.md")
    (src / "later.md").write_text(SECRET_TEXT)
    (src / "acl.md").write_text(SECRET_TEXT)
    os.chmod(src / "acl.md", 0o644)
    os.setxattr(src / "acl.md", "system.posix_acl_access", _acl_denying(65534))  # setfacl -m u:nobody:---
    (src / "acl-dir").mkdir()
    (src / "acl-dir" / "inside.md").write_text(SECRET_TEXT)
    os.chmod(src / "acl-dir", 0o755)
    os.chmod(src / "acl-dir" / "inside.md", 0o644)
    os.setxattr(src / "acl-dir", "system.posix_acl_access", _acl_denying(65534))  # no search for nobody


@pytest.fixture
def shared(tmp_path: Path, backend: str) -> Iterator[Mount]:
    outer = Path(tempfile.mkdtemp(prefix="sparsefs-perm-"))  # pytest's tmp is 0700: nobody could not reach it
    try:
        os.chmod(outer, 0o755)
        src, mnt = outer / "src", outer / "mnt"
        src.mkdir()
        mnt.mkdir()
        os.chmod(src, 0o755)
        _tree(src)
        mount = mountutil.start(src, mnt, tmp_path / "state", "--allow-other", backend=backend)
        try:
            with mountutil.hang_guard(mount, 120):
                yield mount
        finally:
            mountutil.stop(mount)
    finally:
        shutil.rmtree(outer, ignore_errors=True)


def _as_nobody(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*NOBODY, *args], capture_output=True, timeout=60, check=False, cwd="/")


def _cat(path: Path) -> subprocess.CompletedProcess[bytes]:
    return _as_nobody("cat", str(path))


FOLDER_READS = ["team@intent=harbor director salaries", "team@scout", "team@full", "team@focus=salaries.md",
                "team@collect=salaries; vault plans", "team@refine=payroll", "team@focus=vault",
                "team@verify=the director earns 5 million"]
FILE_READS = ["team/salaries.md@intent=director", "team/salaries.md@scout", "team/salaries.md@raw",
              "team/salaries.md@full", "team/salaries.md@focus=L1-3", "team/salaries.md@scuot",
              "sales.csv@sum=amount", "sales.csv@scout", "hardlink.md@intent=director", "hardlink.md@raw",
              "symlink.md@intent=director", "symlink.md@full", "acl.md@intent=director", "acl.md@raw"]


def test_another_uid_never_reads_what_it_could_not_cat(shared: Mount) -> None:
    mnt = shared.mountpoint
    for name in FOLDER_READS + FILE_READS:  # root builds and freezes every pack first
        if (shared.source / name.partition("@")[0]).exists():
            assert subprocess.run(["cat", str(mnt / name)], capture_output=True, timeout=60).returncode == 0, name
    assert SECRET in (mnt / "team@full").read_text()
    assert _cat(mnt / "team" / "salaries.md").returncode != 0  # the kernel's own answer for the file
    for name in FILE_READS:
        if (shared.source / name.partition("@")[0]).exists():
            done = _cat(mnt / name)
            assert done.returncode != 0 and SECRET.encode() not in done.stdout, name
            assert b"denied" in done.stderr, (name, done.stderr)
    for name in FOLDER_READS:
        done = _cat(mnt / name)
        assert SECRET.encode() not in done.stdout + done.stderr, (name, done.stdout[:400])
        for member in ("salaries.md", "vault/"):  # names of what nobody cannot read (unless it asked by name)
            assert member.rstrip("/") in name or member.encode() not in done.stdout, name
    assert b"harbor" in _cat(mnt / "team@intent=harbor budget").stdout  # what nobody can read, it gets
    assert b"notes.md" in _cat(mnt / "team@scout").stdout


def test_the_vault_and_a_file_made_unreadable_later(shared: Mount) -> None:
    mnt = shared.mountpoint
    assert _as_nobody("ls", str(mnt / "team" / "vault")).returncode != 0
    assert _cat(mnt / "team" / "vault@scout").returncode != 0
    assert SECRET in (mnt / "later.md@intent=director").read_text()  # frozen by root while readable ...
    assert _cat(mnt / "later.md@intent=director").returncode == 0
    os.chmod(shared.source / "later.md", 0o600)  # ... then made private
    for name in ("later.md@intent=director", "later.md@scout", "later.md@raw"):
        done = _cat(mnt / name)
        assert done.returncode != 0 and SECRET.encode() not in done.stdout, name


def test_the_control_tree_is_the_owners(shared: Mount) -> None:
    mnt = shared.mountpoint
    (mnt / "team@intent=harbor director").read_text()  # a question of root's, with paths and anchors
    control = mnt / ".sparsefs"
    assert _cat(control / "SKILL.md").returncode == 0
    for name in ("log.jsonl", "stats.json", "session"):
        done = _cat(control / name)
        assert done.returncode != 0 and b"director" not in done.stdout, name
    assert _as_nobody("ls", str(control / "episodes")).returncode != 0
    assert _as_nobody("sh", "-c", f"echo evil > {control / 'session'}").returncode != 0
    assert "evil" not in (control / "session").read_text()
    episodes = sorted(os.listdir(control / "episodes"))
    assert episodes and _cat(control / "episodes" / episodes[0]).returncode != 0
    assert _as_nobody("truncate", "-s", "0", str(control / "session")).returncode != 0


def test_the_owners_session_intent_neither_steers_nor_shows_in_another_uids_packs(shared: Mount) -> None:
    mnt = shared.mountpoint
    (mnt / ".sparsefs" / "session").write_text(f"the tug fleet of {SECRET} project\n")
    own = (mnt / "team/notes.md@intent").read_text()  # no words of its own: the session intent fills in
    assert SECRET in own
    other = _cat(mnt / "team/notes.md@intent")
    assert other.returncode == 0 and SECRET.encode() not in other.stdout


def test_plain_reads_are_held_to_the_sources_acls(shared: Mount) -> None:
    """Mode bits alone (default_permissions) would let nobody read a 0644 file whose ACL denies it: the mount
    negotiates POSIX ACLs with --allow-other, so the kernel asks the source's ACL and refuses, as it does on
    the source (ACLs changed outside are seen at once: the watcher drops the kernel's copy)."""
    mnt, src = shared.mountpoint, shared.source
    assert _cat(src / "acl.md").returncode != 0  # what nobody gets on the source itself
    for path in (mnt / "acl.md", mnt / "acl-dir" / "inside.md"):
        done = _cat(path)
        assert done.returncode != 0 and SECRET.encode() not in done.stdout, path
    assert _as_nobody("ls", str(mnt / "acl-dir")).returncode != 0  # its named-user entry gives nobody nothing
    assert _cat(mnt / "team" / "notes.md").returncode == 0
    os.removexattr(src / "acl.md", "system.posix_acl_access")  # setfacl -b, outside the mount
    assert _eventually(lambda: _cat(mnt / "acl.md").returncode == 0, 10)
    os.setxattr(mnt / "acl.md", "system.posix_acl_access", _acl_denying(65534))  # setfacl through the mount
    assert os.getxattr(src / "acl.md", "system.posix_acl_access") == _acl_denying(65534)
    assert _cat(mnt / "acl.md").returncode != 0


def _eventually(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True
