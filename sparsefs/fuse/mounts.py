"""The mount table, readiness and unmounting — shared by the CLI and the tests."""

from __future__ import annotations

import errno
import os
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from sparsefs.fuse import features

FSTYPE = "fuse.sparsefs"
LIVE, DEAD, SILENT = "live", "dead", "silent"
PROBE_S = 5.0  # how long a mount may take to answer one stat before it counts as silent (busy or hung)
T = TypeVar("T")
STALL_S = 10.0  # an exiting daemon whose CPU time, memory and I/O stand still this long is stuck
EXIT_BOUND_S = 120.0  # ... and one still busy after this long is reported, not waited for


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


def mount_owner(mountpoint: str | Path) -> int | None:
    """The uid that mounted ``mountpoint`` (the ``user_id=`` every FUSE mount carries in its super options), or
    None when it is not a FUSE mount here: who may act on it (unmount, remount) besides root."""
    target = os.path.abspath(mountpoint)
    owner = None
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if _unescape(left.split()[4]) == target:
            options = right.split()[-1].split(",")
            owner = next((int(o[8:]) for o in options if o.startswith("user_id=") and o[8:].isdigit()), None)
    return owner


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
    tool = features.system_tool("fusermount3") or features.system_tool("fusermount")
    umount = features.system_tool("umount") or "/bin/umount"
    command = [tool, "-u"] + (["-z"] if lazy else []) if tool else [umount] + (["-l"] if lazy else [])
    result = subprocess.run([*command, os.path.abspath(mountpoint)], capture_output=True, text=True,
                            timeout=timeout, check=False)
    if result.returncode != 0:
        raise RuntimeError(result.stderr.strip() or f"{command[0]} failed with {result.returncode}")


def wait_exit(pid: int, timeout: float) -> bool:
    """True once ``pid`` has exited within ``timeout`` (a zombie has: it holds nothing, only its parent's
    ``wait`` is missing)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if progress(pid) is None:
            return True
        time.sleep(0.02)
    return False


def wait_exit_while_busy(pid: int, stall_s: float = STALL_S, bound_s: float = EXIT_BOUND_S,
                         waiting: Callable[[Progress], None] = lambda now: None) -> str:
    """Wait for ``pid`` to exit for as long as it makes progress: ``"exited"``, ``"stalled"`` (its CPU time,
    resident memory and I/O did not move for ``stall_s``) or ``"bounded"`` (still busy after ``bound_s``).

    A daemon ending after large inputs frees gigabytes and saves what its indexes grew; that took over 10 s
    on a 2 GB daemon, which a fixed 10 s wait took for a hang. ``waiting(progress)`` is called about once a
    second while it runs."""
    started = time.monotonic()
    last, moved, told = progress(pid), started, started
    while last is not None:
        time.sleep(0.05)
        now, seen = time.monotonic(), progress(pid)
        if seen is None:
            return "exited"
        if seen != last:
            last, moved = seen, now
        if now - moved >= stall_s:
            return "stalled"
        if now - started >= bound_s:
            return "bounded"
        if now - told >= 1.0:
            waiting(seen)
            told = now
    return "exited"


@dataclass(frozen=True)
class Progress:
    """What of a process moves while it works: CPU ticks, resident pages, bytes read and written."""

    cpu_ticks: int
    rss_pages: int
    io_bytes: int

    @property
    def rss_mib(self) -> int:
        return self.rss_pages * os.sysconf("SC_PAGE_SIZE") >> 20


def progress(pid: int) -> Progress | None:
    """``pid``'s progress counters; None once it has exited (gone, or a zombie)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] in ("Z", "X"):
        return None
    return Progress(int(fields[11]) + int(fields[12]), int(fields[21]), _io_bytes(pid))


def _io_bytes(pid: int) -> int:
    """rchar + wchar (0 when /proc/PID/io is not ours to read)."""
    try:
        text = Path(f"/proc/{pid}/io").read_text()
    except OSError:
        return 0
    return sum(int(line.split()[1]) for line in text.splitlines() if line.startswith(("rchar:", "wchar:")))
