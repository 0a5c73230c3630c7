"""The mount table, readiness and unmounting — shared by the CLI and the tests."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

FSTYPE = "fuse.sparsefs"
LIVE, DEAD, SILENT = "live", "dead", "silent"
PROBE_S = 5.0  # how long a mount may take to answer one stat before it counts as silent (busy or hung)
T = TypeVar("T")


@dataclass(frozen=True)
class MountEntry:
    mountpoint: str
    fstype: str
    minor: int


def _unescape(field: str) -> str:
    return field.encode().decode("unicode_escape") if "\\" in field else field


def mount_entries() -> list[MountEntry]:
    """Parsed /proc/self/mountinfo (works for dead FUSE mounts too)."""
    entries = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields = left.split()
        minor = int(fields[2].split(":")[1])
        entries.append(MountEntry(_unescape(fields[4]), right.split()[0], minor))
    return entries


def find_mount(mountpoint: str | Path) -> MountEntry | None:
    target = os.path.abspath(mountpoint)
    matches = [e for e in mount_entries() if e.mountpoint == target]
    return matches[-1] if matches else None


def is_sparsefs_mount(mountpoint: str | Path) -> bool:
    entry = find_mount(mountpoint)
    return entry is not None and entry.fstype == FSTYPE


def is_stale(mountpoint: str | Path, timeout: float = PROBE_S) -> bool:
    """Mounted but the daemon is gone (ENOTCONN). A mount that does not answer in time is not stale."""
    return probe(mountpoint, timeout) == DEAD


def probe(mountpoint: str | Path, timeout: float = PROBE_S) -> str:
    """``LIVE`` (the filesystem answers), ``DEAD`` (ENOTCONN: its daemon is gone) or ``SILENT`` (no answer
    within ``timeout``: busy or hung, which is never taken for dead)."""

    def ask() -> str:
        try:
            os.stat(mountpoint)
        except OSError as err:
            return DEAD if err.errno == errno.ENOTCONN else LIVE
        return LIVE

    return within(ask, timeout) or SILENT


def within(call: Callable[[], T], timeout: float) -> T | None:
    """``call()``'s result, or None when it has not returned within ``timeout`` (its exception is raised).

    It runs on a daemon thread so a hung FUSE daemon cannot hang the caller; a thread left waiting is freed
    when the request is answered or when this process exits."""
    results: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(call())
        except BaseException as err:  # noqa: BLE001 - handed to the caller's thread, raised there
            errors.append(err)

    thread = threading.Thread(target=run, name="sparsefs-probe", daemon=True)
    thread.start()
    thread.join(timeout)
    if errors:
        raise errors[0]
    return results[0] if results else None


def wait_ready(mountpoint: str | Path, timeout: float, alive: Callable[[], bool] = lambda: True,
               pid: int | None = None) -> bool:
    """Poll until the mount table shows us and .sparsefs/ready reads back (naming daemon ``pid`` if given).

    The file is read, not just stat'ed: the kernel may still hold the attributes
    of a crashed daemon's ready file, and only a read reaches the daemon.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = daemon_pid(mountpoint) if is_sparsefs_mount(mountpoint) else None
        if found is not None and pid in (None, found):
            return True
        if not alive():
            return False
        time.sleep(0.02)
    return False


def daemon_pid(mountpoint: str | Path) -> int | None:
    try:
        return int(Path(mountpoint, ".sparsefs", "ready").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return None


def unmount(mountpoint: str | Path, lazy: bool = False, timeout: float = 10.0) -> None:
    """fusermount3 -u (falls back to umount); raises RuntimeError with the tool's message."""
    tool = shutil.which("fusermount3") or shutil.which("fusermount")
    command = [tool, "-u"] + (["-z"] if lazy else []) if tool else ["umount"] + (["-l"] if lazy else [])
    result = subprocess.run([*command, os.path.abspath(mountpoint)], capture_output=True, text=True,
                            timeout=timeout, check=False)
    if result.returncode != 0:
        raise RuntimeError(result.stderr.strip() or f"{command[0]} failed with {result.returncode}")


def wait_exit(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.02)
    return False
