"""Who holds a state directory: a mount's daemon, or a short-lived reader.

A state directory's flock (:class:`~sparsefs.store.state.StateLock`) is held by a
mount for its whole life, and for moments by the surfaces that serve reads in
process (``sparsefs read``, ``sparsefs mcp``, a ``with Workspace(...)`` block).
The lock file names only a pid, so a mount also writes ``mount.json`` beside
it: its pid, source, mountpoint and the fd of its source root. With it

* a new mount refused by a *reader* waits for it instead of failing (and a
  mount refused by a *mount* says so);
* ``sparsefs read`` finds the mount that holds the state directory without
  stat'ing every mount on the machine (one hung mount would block it);
* ``sparsefs index`` finds the source and the state directory of a mount it is
  pointed at: in place the mount hides its source, which stays reachable
  through the daemon's fd in ``/proc``.

A ``mount.json`` is trusted only while its pid holds the lock.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import orjson

from sparsefs.fuse.mounts import FSTYPE, daemon_pid, find_mount
from sparsefs.store.state import StateDirBusy, StateLock

INFO_FILE = "mount.json"
LOCK_FILE = "mount.lock"
READER_WAIT_S = 30.0  # a read or an MCP call is short; a `with Workspace` block that outlasts this is not
_POLL_S = 0.05


@dataclass(frozen=True)
class MountInfo:
    """What a mount's daemon publishes in its state directory."""

    pid: int
    source: str
    mountpoint: str
    root_fd: int
    state_dir: str

    @property
    def source_path(self) -> Path:
        """The source as another process opens it: in place through the daemon's fd (the mount hides the path)."""
        if self.source == self.mountpoint:
            return Path(f"/proc/{self.pid}/fd/{self.root_fd}")
        return Path(self.source)


def write_info(state_dir: Path, info: MountInfo) -> None:
    """Publish ``info`` atomically (a reader never sees half a file). On a full state disk the mount goes on
    unpublished: a read of the source then waits for the lock instead of going through this mount."""
    tmp = state_dir / f".{INFO_FILE}.{os.getpid()}"
    try:
        tmp.write_bytes(orjson.dumps(asdict(info)))
        os.replace(tmp, state_dir / INFO_FILE)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        logging.getLogger("sparsefs").warning("cannot publish %s (%s); sparsefs read of the source will not find "
                                              "this mount", state_dir / INFO_FILE, err.strerror or err)


def read_info(state_dir: Path) -> MountInfo | None:
    try:
        data = orjson.loads((state_dir / INFO_FILE).read_bytes())
        return MountInfo(
            int(data["pid"]), str(data["source"]), str(data["mountpoint"]), int(data["root_fd"]), str(data["state_dir"])
        )
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None


def lock_holder(state_dir: Path) -> int | None:
    try:
        return int((state_dir / LOCK_FILE).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def mount_holding(state_dir: Path) -> MountInfo | None:
    """The mount whose daemon holds ``state_dir``'s lock now, or None (free, or held by a reader)."""
    holder, info = lock_holder(state_dir), read_info(state_dir)
    return info if info is not None and holder == info.pid else None


def visible_mount(info: MountInfo) -> Path | None:
    """``info``'s mountpoint when this mount namespace shows it as that daemon's SparseFS mount."""
    entry = find_mount(info.mountpoint)
    if entry is None or entry.fstype != FSTYPE or daemon_pid(info.mountpoint) != info.pid:
        return None
    return Path(info.mountpoint)


def acquire_for_mount(
    lock: StateLock, wait_s: float = READER_WAIT_S, sleep: Callable[[float], None] = time.sleep
) -> None:
    """Take the lock for a mount; wait (bounded) while a reader holds it. StateDirBusy says who holds it."""
    state_dir = lock.path.parent
    deadline = time.monotonic() + wait_s
    while True:
        try:
            lock.acquire()
            return
        except StateDirBusy:
            if mount_holding(state_dir) is not None or time.monotonic() >= deadline:
                raise StateDirBusy(_busy_message(state_dir, wait_s)) from None
            sleep(_POLL_S)


def _busy_message(state_dir: Path, wait_s: float) -> str:
    info = mount_holding(state_dir)
    if info is not None:
        return (
            f"the state directory {state_dir} is in use by the SparseFS mount at {info.mountpoint} (pid "
            f"{info.pid}); unmount it first, or give this mount its own --state-dir"
        )
    return (
        f"the state directory {state_dir} is held by a SparseFS read (pid {lock_holder(state_dir) or '?'}: "
        f"sparsefs read, sparsefs mcp, or an open `with Workspace(...)` block) for more than {wait_s:g} s; "
        f"end it and mount again"
    )


def state_dir_of_daemon(pid: int) -> Path | None:
    """The state directory whose lock process ``pid`` holds open (its fds name it)."""
    fd_dir = Path(f"/proc/{pid}/fd")
    with contextlib.suppress(OSError):
        for fd in fd_dir.iterdir():
            with contextlib.suppress(OSError):
                target = Path(os.readlink(fd))
                if target.name == LOCK_FILE:
                    return target.parent
    return None


def mount_of_path(mountpoint: Path) -> MountInfo | None:
    """The daemon's published info for a live SparseFS ``mountpoint``, if it is readable here."""
    pid = daemon_pid(mountpoint)
    state_dir = state_dir_of_daemon(pid) if pid is not None else None
    info = read_info(state_dir) if state_dir is not None else None
    return info if info is not None and info.pid == pid else None
