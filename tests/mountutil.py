"""Mount SparseFS for a test: run the real CLI, poll the mount table, always unmount.

Every step has a deadline, so a hung daemon fails the test instead of hanging
the suite (see FUSE-NOTES.md "Testing a mount without hanging the suite").
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparsefs.app.isolation import python_argv
from sparsefs.fuse import mounts

READY_TIMEOUT_S = 20.0
FUSECTL = Path("/sys/fs/fuse/connections")
# Test-only backend names: a backend row plus the switches that make it another configuration to test.
VARIANTS: dict[str, tuple[str, tuple[str, ...]]] = {"kernel-nopt": ("kernel", ("--no-passthrough",))}


def backend_args(backend: str) -> list[str]:
    """``--backend NAME`` (and a variant's switches) for a backend or variant name."""
    name, switches = VARIANTS.get(backend, (backend, ()))
    return ["--backend", name, *switches]


@dataclass
class Mount:
    """A running foreground daemon and where it is mounted."""

    source: Path
    mountpoint: Path
    state_dir: Path
    process: subprocess.Popen[bytes]
    stderr_path: Path

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")


def start(source: Path, mountpoint: Path | None, state_dir: Path, *extra: str, backend: str | None = None,
          stderr_dir: Path | None = None, plugins: Path | None = None, env: dict[str, str] | None = None) -> Mount:
    """Mount (mirror when ``mountpoint`` is given, else in place) with ``backend`` and wait until ready.

    The daemon's output goes to ``stderr_dir`` (default: the state directory). The daemon starts isolated,
    as the CLI starts it (``python -I``, cwd ``/``: sparsefs.app.isolation); ``plugins``: a directory whose
    ``sitecustomize`` the daemon imports first (test Readers), the one deliberate way in, since ``-I``
    ignores PYTHONPATH; ``env``: more environment for the daemon."""
    target = mountpoint or source
    stderr_path = (stderr_dir or state_dir) / "test-daemon.stderr"
    state_dir.mkdir(parents=True, exist_ok=True)
    command = daemon_argv("mount", "-f", str(source), plugins=plugins)
    command += [str(mountpoint)] if mountpoint else []
    command += ["--state-dir", str(state_dir), *extra]
    command += backend_args(backend) if backend else []
    with open(stderr_path, "wb") as err:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                                   start_new_session=True, cwd="/", env={**os.environ, **(env or {})})
    mount = Mount(source, target, state_dir, process, stderr_path)
    if not mounts.wait_ready(target, READY_TIMEOUT_S, alive=lambda: process.poll() is None, pid=process.pid):
        stop(mount)
        raise RuntimeError(f"mount not ready: {mount.stderr()}")
    return mount


def daemon_argv(*args: str, plugins: Path | None = None) -> list[str]:
    """``sparsefs ARGS`` run as the CLI runs its daemon (``-I``), with ``plugins``' sitecustomize first."""
    command = python_argv(*args)
    if plugins is not None:
        boot = command.index("-c") + 1
        command[boot] = f"import sys; sys.path.insert(0, {str(plugins)!r}); import sitecustomize; " + command[boot]
    return command


def stop(mount: Mount, deadline_s: float = 10.0) -> None:
    """Unmount with escalating force; reap the daemon. Never hangs."""
    for step in (_fusermount, _abort_connection, _lazy_umount):
        if not _still_mounted(mount):
            break
        try:
            step(mount)
        except (subprocess.TimeoutExpired, OSError):
            continue  # escalate to the next step
    _reap(mount.process, deadline_s)


HANG_GUARD_S = 120.0
"""No single mount test comes close; past this the daemon is hung (hang_guard aborts the connection)."""


@contextmanager
def mounted(source: Path, mountpoint: Path | None, state_dir: Path, *extra: str, backend: str | None = None,
            **options: Any) -> Iterator[Mount]:
    """A mount for the length of a ``with`` block: started (:func:`start`, same arguments), guarded against
    hangs, always stopped, whatever the block raised."""
    mount = start(source, mountpoint, state_dir, *extra, backend=backend, **options)
    try:
        with hang_guard(mount, HANG_GUARD_S):
            yield mount
    finally:
        stop(mount)


def _still_mounted(mount: Mount) -> bool:
    entry = mounts.find_mount(mount.mountpoint)
    return entry is not None and entry.fstype == mounts.FSTYPE


@contextmanager
def hang_guard(mount: Mount, seconds: float) -> Iterator[None]:
    """Abort the FUSE connection if the test is still running after ``seconds``.

    A request stuck in a hung daemon leaves the caller in uninterruptible sleep,
    which no signal (pytest-timeout's included) can free; the fusectl abort does,
    so the test then fails with ENOTCONN instead of hanging CI.
    """
    timer = threading.Timer(seconds, _abort_connection, [mount])
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def _fusermount(mount: Mount) -> None:
    subprocess.run(["fusermount3", "-u", str(mount.mountpoint)], capture_output=True, timeout=10, check=False)


def _abort_connection(mount: Mount) -> None:
    entry = mounts.find_mount(mount.mountpoint)
    if entry is None:
        return
    _ensure_fusectl()
    abort = FUSECTL / str(entry.minor) / "abort"
    if abort.exists():
        abort.write_text("1")
    subprocess.run(["fusermount3", "-u", str(mount.mountpoint)], capture_output=True, timeout=10, check=False)


def _lazy_umount(mount: Mount) -> None:
    subprocess.run(["umount", "-l", str(mount.mountpoint)], capture_output=True, timeout=10, check=False)


def _ensure_fusectl() -> None:
    if FUSECTL.exists() and not any(FUSECTL.iterdir()):
        subprocess.run(["mount", "-t", "fusectl", "none", str(FUSECTL)], capture_output=True, timeout=10,
                       check=False)


def _reap(process: subprocess.Popen[bytes], deadline_s: float) -> None:
    try:
        process.wait(timeout=deadline_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=5)


def stats_json(mountpoint: Path) -> dict[str, Any]:
    """The mount's ``.sparsefs/stats.json``, a fresh snapshot at every open (both backends)."""
    data = json.loads((mountpoint / ".sparsefs" / "stats.json").read_bytes())
    assert isinstance(data, dict)
    return data


def wait_for(predicate: object, timeout: float = 5.0, interval: float = 0.02) -> bool:
    """Poll ``predicate()`` until true or the timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(interval)
    return False
