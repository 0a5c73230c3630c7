"""The CLI: background mount, umount, doctor, signals, refusals (the demo: tests/clients/test_demo.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparsefs.fuse import mounts
from tests import mountutil


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sparsefs", *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


def test_background_mount_then_umount(workspace: Path, tmp_path: Path) -> None:
    mnt = tmp_path / "view"
    mnt.mkdir()
    result = run_cli("mount", str(workspace), str(mnt), "--state-dir", str(tmp_path / "state"))
    try:
        assert result.returncode == 0, result.stderr
        assert mounts.is_sparsefs_mount(mnt) and (mnt / ".sparsefs" / "ready").exists()
        pid = mounts.daemon_pid(mnt)
        assert pid is not None
        result = run_cli("umount", str(mnt))
        assert result.returncode == 0, result.stderr
        assert not mounts.find_mount(mnt) and mounts.wait_exit(pid, 5)
    finally:
        if mounts.find_mount(mnt):
            subprocess.run(["fusermount3", "-u", str(mnt)], timeout=10, check=False)


def test_sigterm_and_sigint_unmount_cleanly(workspace: Path, tmp_path: Path, backend: str) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        mount = mountutil.start(workspace, None, tmp_path / f"state-{sig}", backend=backend)
        try:
            os.kill(mount.process.pid, sig)
            assert mount.process.wait(timeout=10) == 0
            assert not mounts.find_mount(workspace)
        finally:
            mountutil.stop(mount)


def test_umount_sees_its_daemon_exit_even_unreaped(mirror: mountutil.Mount) -> None:
    """The daemon here is pytest's child: once it exits it is a zombie until reaped. `sparsefs umount` took that
    for a daemon still running and waited its whole bound (10 s) before failing."""
    result = run_cli("umount", str(mirror.mountpoint), timeout=60)
    assert result.returncode == 0 and "unmounted" in result.stdout, result.stderr
    assert mounts.progress(mirror.process.pid) is None and mirror.process.wait(timeout=5) == 0


BUSY_THEN_EXIT = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end: pass\n"


def test_umount_waits_while_the_daemon_makes_progress_and_not_for_a_stuck_one() -> None:
    """An exiting daemon busy past the old 10 s wait (CPU time moving) is waited for; one that stands still is
    given up on after the stall time, long before the overall bound."""
    busy = subprocess.Popen([sys.executable, "-c", BUSY_THEN_EXIT.format(seconds=12)])
    started = time.monotonic()
    assert mounts.wait_exit_while_busy(busy.pid, stall_s=2.0, bound_s=60.0) == "exited"
    assert time.monotonic() - started >= 11 and busy.wait(timeout=5) == 0
    stuck = subprocess.Popen(["sleep", "60"])
    try:
        started = time.monotonic()
        assert mounts.wait_exit_while_busy(stuck.pid, stall_s=1.0, bound_s=60.0) == "stalled"
        assert time.monotonic() - started < 5
        assert mounts.wait_exit_while_busy(stuck.pid, stall_s=30.0, bound_s=1.0) == "bounded"
    finally:
        stuck.kill()
        stuck.wait(timeout=5)
    assert mounts.progress(stuck.pid) is None


def test_refuses_a_mountpoint_inside_the_source(workspace: Path) -> None:
    inner = workspace / "nested"
    result = run_cli("mount", str(workspace), str(inner))
    assert result.returncode == 2 and "inside the source" in result.stderr


def test_refuses_a_missing_source(tmp_path: Path) -> None:
    result = run_cli("mount", str(tmp_path / "missing"))
    assert result.returncode == 2 and "does not exist" in result.stderr


def test_umount_of_something_not_mounted(tmp_path: Path) -> None:
    result = run_cli("umount", str(tmp_path))
    assert result.returncode == 1 and "not mounted" in result.stderr


def test_doctor_reports_each_check() -> None:
    result = run_cli("doctor")
    assert result.returncode == 0, result.stdout
    for name in ("/dev/fuse", "libfuse3", "fusermount3", "permissions", "mfusepy", "backend", "watchers on a mount"):
        assert f"] {name}:" in result.stdout
    assert "tail -f -s" in result.stdout  # what the kernel does not allow is said, with what to do instead


def test_every_command_is_documented_in_help_and_readme() -> None:
    from sparsefs.app.cli import build_parser

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    help_text = run_cli("--help").stdout
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for command in sub.choices:  # type: ignore[union-attr]
        assert command in help_text and f"sparsefs {command}" in readme, command


def test_default_state_dir_is_outside_the_source(workspace: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from sparsefs.app.daemon import plan_mount

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # planning takes the state lock: not in ~/.cache
    plan = plan_mount(str(workspace), None, None, allow_other=False)
    assert plan.in_place and not plan.state_dir.is_relative_to(workspace)
    assert plan.state_dir.parent == tmp_path / "cache" / "sparsefs"
    assert plan.state_dir.name == plan_mount(str(workspace), None, None, False).state_dir.name
