"""systemd units: `systemd-analyze verify` passes, and the daemon's readiness protocol works (Type=notify)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from sparsefs.fuse import mounts
from tests import conftest, mountutil

UNITS = Path(__file__).resolve().parents[2] / "systemd"
SPARSEFS = str(Path(sys.executable).with_name("sparsefs"))
ANALYZE = shutil.which("systemd-analyze")
pytestmark = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze missing: apt-get install systemd")


def _install(unit: Path, folder: Path, exec_path: str = SPARSEFS) -> Path:
    """The unit with ExecStart pointing at this checkout's sparsefs (verify checks the binary exists)."""
    folder.mkdir(parents=True, exist_ok=True)
    text = unit.read_text().replace("ExecStart=sparsefs ", f"ExecStart={exec_path} ")
    (folder / unit.name).write_text(text)
    return folder / unit.name.replace("@.", "@srv-agent\\x2dws.")


def _verify(instance: Path, *extra: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    assert ANALYZE is not None
    return subprocess.run([ANALYZE, *extra, "verify", str(instance)], capture_output=True, text=True, timeout=60,
                          check=False, env={**os.environ, **(env or {})})


def test_system_unit_and_drop_in_verify(tmp_path: Path) -> None:
    instance = _install(UNITS / "sparsefs@.service", tmp_path)
    result = _verify(instance)
    assert result.returncode == 0, result.stderr
    drop_in = tmp_path / "sparsefs@.service.d"
    drop_in.mkdir()
    example = (UNITS / "sparsefs@.service.d" / "example.conf").read_text()
    (drop_in / "example.conf").write_text(example.replace("/opt/sparsefs/.venv/bin/sparsefs", SPARSEFS))
    assert _verify(instance).returncode == 0
    (drop_in / "example.conf").write_text(example)  # verify reads the drop-in: its missing binary fails
    assert "/opt/sparsefs/.venv/bin/sparsefs" in _verify(instance).stderr


def test_user_unit_verifies(tmp_path: Path) -> None:
    instance = _install(UNITS / "user" / "sparsefs@.service", tmp_path / "units")
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    result = _verify(instance, "--user", env={"XDG_RUNTIME_DIR": str(runtime)})
    assert result.returncode == 0, result.stderr


def test_units_use_notify_readiness_and_restart() -> None:
    for unit in (UNITS / "sparsefs@.service", UNITS / "user" / "sparsefs@.service"):
        text = unit.read_text()
        for line in ("Type=notify", "Restart=on-failure", "KillSignal=SIGTERM", "%f"):
            assert line in text, (unit, line)


def test_daemon_notifies_ready_then_stopping(workspace: Path, tmp_path: Path, backend: str) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(tmp_path / "notify"))
    listener.settimeout(20)
    mount = _start_unwaited(workspace, tmp_path / "state", backend, {"NOTIFY_SOCKET": str(tmp_path / "notify")})
    try:
        ready = listener.recv(4096).decode()
        # checked at once, nothing waited for: an early READY=1 would find no mount, or one that does not answer
        assert mounts.find_mount(workspace) is not None and mounts.daemon_pid(workspace) == mount.process.pid
        assert "READY=1" in ready and f"MAINPID={mount.process.pid}" in ready
        os.kill(mount.process.pid, signal.SIGTERM)  # what `systemctl stop` sends
        assert listener.recv(4096) == b"STOPPING=1"
        assert mount.process.wait(timeout=15) == 0 and not mounts.find_mount(workspace)
    finally:
        mountutil.stop(mount)
        listener.close()


def _start_unwaited(source: Path, state: Path, backend: str, env: dict[str, str]) -> mountutil.Mount:
    """An in-place foreground mount, as systemd starts it: no polling for readiness here."""
    state.mkdir(parents=True)
    command = [sys.executable, "-m", "sparsefs", "mount", "-f", str(source), "--state-dir", str(state),
               *mountutil.backend_args(backend)]
    with open(state / "test-daemon.stderr", "wb") as err:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                                   start_new_session=True, env={**os.environ, **env})
    return mountutil.Mount(source, source, state, process, state / "test-daemon.stderr")


# ---- restart in place (issue 25.1): the unit's own ExecStart over the mount its killed daemon left ----

UNIT_FOR = {"kernel": UNITS / "sparsefs@.service", "mfusepy": UNITS / "user" / "sparsefs@.service"}


def _exec_start(unit: Path, workspace: Path, state: Path) -> list[str]:
    """The unit's ExecStart line as systemd runs it for the instance of ``workspace``: ``%f`` is the unescaped
    instance path, ``${STATE_DIRECTORY}`` the state directory, ``sparsefs`` this checkout's."""
    line = next(row for row in unit.read_text().splitlines() if row.startswith("ExecStart="))
    escape = shutil.which("systemd-escape")
    assert escape is not None
    instance = subprocess.run([escape, "--path", str(workspace)], capture_output=True, text=True, timeout=10,
                              check=True).stdout.strip()
    unescaped = subprocess.run([escape, "--unescape", "--path", instance], capture_output=True, text=True,
                               timeout=10, check=True).stdout.strip()
    values = {"%f": unescaped, "%i": instance, "${STATE_DIRECTORY}": str(state)}
    argv = [values.get(word, word) for word in shlex.split(line.removeprefix("ExecStart="))]
    assert argv[0] == "sparsefs" and "%f" not in argv and Path(unescaped) == workspace, argv
    return [SPARSEFS, *argv[1:]]


def _run_unit(argv: list[str], workspace: Path, state: Path, name: str) -> mountutil.Mount:
    """Start ExecStart as systemd would (its own session, no terminal) and wait for the mount to answer."""
    log = state / f"{name}.stderr"
    with open(log, "wb") as err:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=err, stderr=err, start_new_session=True)
    mount = mountutil.Mount(workspace, workspace, state, process, log)
    if not mounts.wait_ready(workspace, mountutil.READY_TIMEOUT_S, alive=lambda: process.poll() is None,
                             pid=process.pid):
        mountutil.stop(mount)
        raise AssertionError(f"ExecStart did not mount: {mount.stderr()}")
    return mount


def test_the_units_exec_start_restarts_a_killed_in_place_mount(workspace: Path, tmp_path: Path,
                                                                backend: str) -> None:
    """SIGKILL the daemon (an OOM kill, a crash): its in-place mount answers ENOTCONN, even to the stat of the
    workspace itself. What `Restart=on-failure` then runs — the unit's own ExecStart — detaches the dead mount
    and mounts again, keeping the killed daemon's episodes; it used to fail on that stat five times and give
    up. A second start over the healthy mount is refused and leaves it serving."""
    state = tmp_path / "state"  # StateDirectory=: systemd creates it
    state.mkdir()
    name, switches = mountutil.VARIANTS.get(backend, (backend, ()))
    argv = [*_exec_start(UNIT_FOR[name], workspace, state), *switches]  # a variant: the unit plus its switches
    first = _run_unit(argv, workspace, state, "first")
    try:
        assert json.loads((workspace / ".sparsefs" / "stats.json").read_bytes())["backend"] == name
        assert conftest.is_pack((workspace / "notes.txt@intent=harbor route").read_bytes())
        os.killpg(first.process.pid, signal.SIGKILL)  # the daemon and any parse child: the unit's cgroup
        first.process.wait(timeout=10)
        assert mounts.probe(workspace) == mounts.DEAD
    except BaseException:
        mountutil.stop(first)  # only before the restart: stop() unmounts whatever is mounted there
        raise
    second = _run_unit(argv, workspace, state, "second")
    try:
        assert "stale SparseFS mount" in second.stderr()
        assert (workspace / "notes.txt").read_bytes().startswith(b"Northwind Robotics")
        assert os.listdir(workspace / ".sparsefs" / "episodes"), "the killed daemon's episode was lost"
        refused = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        assert refused.returncode == 2 and "already a live SparseFS mount" in refused.stderr, refused.stderr
        assert f"daemon pid {second.process.pid}" in refused.stderr
        assert mounts.daemon_pid(workspace) == second.process.pid  # still serving, never detached
        os.kill(second.process.pid, signal.SIGTERM)  # `systemctl stop`
        assert second.process.wait(timeout=30) == 0
    finally:
        mountutil.stop(second)
    assert not mounts.find_mount(workspace)
