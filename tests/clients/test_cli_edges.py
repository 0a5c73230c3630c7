"""The CLI's rough edges a new user meets first (issue 28.6): a mirror over a folder with files, a foreground
mount that says where it is, a missing folder named as missing, doctor as another user, and `episodes` E
counting what the agent read, @full included. Real mounts on both backends wherever one is involved."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from sparsefs.fuse import mounts
from tests import mountutil

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sparsefs", *args], capture_output=True, text=True,
                          timeout=timeout, check=False, cwd="/")


def test_a_mirror_over_a_folder_with_files_is_refused_unless_asked(workspace: Path, tmp_path: Path,
                                                                   backend: str) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    (mnt / "mine.txt").write_text("my own file\n")
    state = str(tmp_path / "state")
    refused = run_cli("mount", str(workspace), str(mnt), "--state-dir", state, *mountutil.backend_args(backend))
    assert refused.returncode == 2 and not mounts.find_mount(mnt)
    assert f"mountpoint {mnt} is not empty (mine.txt)" in refused.stderr and "--nonempty" in refused.stderr
    assert "--nonempty" in run_cli("mount", "--help").stdout
    taken = run_cli("mount", str(workspace), str(mnt), "--state-dir", state, *mountutil.backend_args(backend),
                    "--nonempty")
    try:
        assert taken.returncode == 0, taken.stderr
        assert (mnt / "annual-report.md").exists() and not (mnt / "mine.txt").exists()
    finally:
        assert run_cli("umount", str(mnt)).returncode == 0 or _force_off(mnt)
    assert (mnt / "mine.txt").read_text() == "my own file\n"


def _force_off(mnt: Path) -> bool:
    subprocess.run(["fusermount3", "-u", str(mnt)], timeout=10, check=False)
    return False


def test_a_foreground_mount_says_where_and_how_to_stop_it(mirror: mountutil.Mount) -> None:
    said = re.compile(rf"mounted {re.escape(str(mirror.mountpoint))} \(mirroring {re.escape(str(mirror.source))}, "
                      rf"\w+ backend\), daemon pid {mirror.process.pid}; .*Ctrl-C.*sparsefs umount "
                      rf"{re.escape(str(mirror.mountpoint))}")
    assert mountutil.wait_for(lambda: said.search(mirror.stderr()), timeout=10), mirror.stderr()


def test_a_missing_folder_is_named_missing_with_the_command_that_makes_it(workspace: Path, tmp_path: Path) -> None:
    missing = tmp_path / "no such"
    result = run_cli("mount", str(workspace), str(missing))
    assert result.returncode == 2 and not missing.exists()
    assert f"mountpoint {missing} does not exist; create it first: mkdir -p '{missing}'" in result.stderr
    source = run_cli("mount", str(tmp_path / "gone"))
    assert source.returncode == 2 and f"source {tmp_path / 'gone'} does not exist" in source.stderr
    (tmp_path / "file").write_text("x")
    afile = run_cli("mount", str(workspace), str(tmp_path / "file"))
    assert afile.returncode == 2 and "is not a directory (it is a file)" in afile.stderr


def test_doctor_as_another_user_names_root_mounts_and_suggests_nothing_for_them(mirror: mountutil.Mount) -> None:
    home = Path(tempfile.mkdtemp(prefix="sparsefs-doctor-"))  # nobody's HOME: it may write nothing of ours
    try:
        os.chmod(home, 0o777)
        result = subprocess.run([*NOBODY, sys.executable, "-m", "sparsefs", "doctor"], capture_output=True,
                                text=True, timeout=120, check=False, cwd="/", env={**os.environ, "HOME": str(home)})
    finally:
        shutil.rmtree(home)
    mnt = str(mirror.mountpoint)
    assert f"] mount {mnt}: mounted by root (uid 0), not you: not checked" in result.stdout, result.stdout
    assert f"sparsefs umount {mnt}" not in result.stdout and "then mount again" not in result.stdout
    as_root = run_cli("doctor").stdout
    assert f"] mount {mnt}: source changes watched by inotify" in as_root


def test_episodes_e_counts_full_reads_too(mirror: mountutil.Mount) -> None:
    mnt = mirror.mountpoint
    sparse = (mnt / "annual-report.md@intent=R&D expenses 2023").read_text()
    full = (mnt / "annual-report.md@full").read_text()
    record = json.loads(run_cli("episodes", str(mnt), "--json").stdout.splitlines()[-1])
    assert record["full_view_delivered"] and record["exposed_sparse"] == len(sparse)
    row = run_cli("episodes", str(mnt)).stdout.splitlines()[-1]
    assert f" {len(sparse) + len(full):,} " in row, (row, len(sparse), len(full))
