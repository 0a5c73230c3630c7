"""`.sparsefs/` is reachable by name but never listed (issue 18): no ordinary tool picks it up.

Like ZFS's `.zfs`, the control directory is left out of the root listing, so
`git add -A`, `grep -r`, `rg --hidden`, tar, rsync and du never see it, while
`cat .sparsefs/stats.json`, `ls .sparsefs/` and `tail .sparsefs/log.jsonl` work.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

from tests import mountutil
from tests.clients.test_mount_clients import sh

Mount = mountutil.Mount
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def test_the_root_listing_is_the_source_listing(mirror: Mount) -> None:
    assert sorted(os.listdir(mirror.mountpoint)) == sorted(os.listdir(mirror.source))
    assert ".sparsefs" not in sh(["ls", "-a"], cwd=mirror.mountpoint).split()


def test_the_control_tree_stays_reachable_by_name(mirror: Mount) -> None:
    mnt = mirror.mountpoint
    assert json.loads(sh(["cat", ".sparsefs/stats.json"], cwd=mnt))["backend"]
    listed = set(sh(["ls", ".sparsefs/"], cwd=mnt).split())
    assert {"SKILL.md", "stats.json", "log.jsonl", "session", "episodes"} <= listed
    sh(["cat", "annual-report.md@scout"], cwd=mnt)
    assert sh(["tail", "-n", "1", ".sparsefs/log.jsonl"], cwd=mnt).strip()
    assert os.path.isdir(mnt / ".sparsefs") and (mnt / ".sparsefs" / "SKILL.md").stat().st_size > 0


def test_git_add_all_adds_nothing_under_the_control_dir(in_place: Mount) -> None:
    env = {**os.environ, **GIT_ENV}
    for command in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "all"]):
        subprocess.run(command, cwd=in_place.mountpoint, env=env, check=True, capture_output=True, timeout=60)
    tracked = sh(["git", "ls-files"], cwd=in_place.mountpoint).split()
    assert "annual-report.md" in tracked
    assert not [path for path in tracked if path.startswith(".sparsefs")]
    assert sh(["git", "status", "--porcelain", "--ignored"], cwd=in_place.mountpoint).strip() == ""


def test_recursive_tools_never_walk_into_it(mirror: Mount, tmp_path: Path) -> None:
    mnt = mirror.mountpoint
    sh(["cat", "annual-report.md@intent=headcount"], cwd=mnt)  # the log and an episode now exist
    searcher = ["rg", "--hidden", "--no-ignore", "-l", "."] if shutil.which("rg") else ["grep", "-rl", "."]
    assert not [p for p in sh(searcher, cwd=mnt).split() if ".sparsefs" in p]
    assert not [p for p in sh(["du", "-a", "."], cwd=mnt).split() if ".sparsefs" in p]
    assert not [p for p in sh(["find", "."], cwd=mnt).split() if ".sparsefs" in p]
    archive = tmp_path / "ws.tar"
    sh(["tar", "-cf", str(archive), "."], cwd=mnt)
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert "./annual-report.md" in names and not [n for n in names if ".sparsefs" in n]
    copy = tmp_path / "copy"
    sh(["rsync", "-a", f"{mnt}/", f"{copy}/"])
    assert sorted(os.listdir(copy)) == sorted(os.listdir(mirror.source))


def test_a_source_dot_sparsefs_is_hidden_too(workspace: Path, tmp_path: Path, backend: str) -> None:
    (workspace / ".sparsefs").mkdir()
    (workspace / ".sparsefs" / "mine.txt").write_text("the user's own\n")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    mount = mountutil.start(workspace, mnt, tmp_path / "state", backend=backend)
    try:
        assert ".sparsefs" not in os.listdir(mnt)
        assert "stats.json" in os.listdir(mnt / ".sparsefs")  # the name leads to the control tree
    finally:
        mountutil.stop(mount)
