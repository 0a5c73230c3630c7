"""How long the cache keeps what was read: state directories idle past the retention age are removed.

The cache root (``$XDG_CACHE_HOME/sparsefs``, else ``~/.cache/sparsefs``) holds one state directory per
source (``<hash of its path>``: parsed text in ``index/``, episodes and frozen packs in ``state.sqlite``, the
pack log). Without a bound it kept the parsed text of every document ever read. Now:

* a state directory not used for :data:`DEFAULT_RETAIN_DAYS` days (``$SPARSEFS_RETAIN_DAYS``; ``0`` keeps
  everything) is removed whole when any mount starts (:func:`sweep`), and by ``sparsefs clean``;
* "used" is the newest change time of what a use writes (the lock a mount or a read takes, the log, the
  databases and their WAL files);
* a directory whose lock is held (a live mount, or a read in progress) is never removed: removal takes the
  lock first, so a mount cannot start in a directory being removed, and keeps it until the lock file itself
  is the last thing to go.

Inside a live state directory the parsed store drops entries not used for the same number of days at open
and once a day after (``sparsefs.store.parsed``). A ``--state-dir`` outside the cache root is the user's
folder: only ``sparsefs clean --state-dir DIR`` removes it.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from sparsefs.store.state import STATE_FILE, StateDirBusy, StateLock

log = logging.getLogger("sparsefs.store")
RETAIN_ENV = "SPARSEFS_RETAIN_DAYS"
DEFAULT_RETAIN_DAYS = 30
DAY_S = 86_400.0
STATE_NAME = re.compile(r"[0-9a-f]{16}")  # compose.default_state_dir: xxh64 of the source path
_USE_MARKS = ("mount.lock", "log.jsonl", STATE_FILE, f"{STATE_FILE}-wal", "index/index.sqlite",
              "index/index.sqlite-wal", "mount.json")
_STATE_MARKS = ("mount.lock", "log.jsonl", STATE_FILE, "index")


def cache_root() -> Path:
    """Where default state directories live: ``$XDG_CACHE_HOME/sparsefs`` or ``~/.cache/sparsefs``."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sparsefs"


def retain_days() -> float:
    """The retention age in days from $SPARSEFS_RETAIN_DAYS (default 30; 0 or less: keep forever; not a
    number: the default, warned, since a typo must not stop a mount nor keep text forever)."""
    text = os.environ.get(RETAIN_ENV, "").strip()
    try:
        return float(text) if text else float(DEFAULT_RETAIN_DAYS)
    except ValueError:
        log.warning("%s=%r is not a number of days; keeping %d days", RETAIN_ENV, text, DEFAULT_RETAIN_DAYS)
        return float(DEFAULT_RETAIN_DAYS)


def last_used(state_dir: Path) -> float:
    """When ``state_dir`` was last used (epoch seconds): the newest mtime of what a mount or a read writes."""
    times = [state_dir.stat().st_mtime]
    for name in _USE_MARKS:
        try:
            times.append((state_dir / name).stat().st_mtime)
        except OSError:
            continue
    return max(times)


def is_state_dir(path: Path) -> bool:
    """Does ``path`` hold SparseFS state (so removing it removes only what SparseFS wrote)?"""
    return path.is_dir() and not path.is_symlink() and any((path / mark).exists() for mark in _STATE_MARKS)


def in_use(state_dir: Path) -> bool:
    """Is the lock held (a live mount, a read in progress)? Asked without taking it or writing anything."""
    try:
        fd = os.open(state_dir / "mount.lock", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


@dataclass
class Outcome:
    """What a sweep or a clean did: removed (path, bytes), and kept because in use (path)."""

    removed: list[tuple[Path, int]]
    busy: list[Path]


def remove_state_dir(state_dir: Path) -> int:
    """Remove a state directory under its own lock; its size in bytes. StateDirBusy when a mount or a read
    holds it: nothing is removed."""
    size = tree_bytes(state_dir)
    lock = StateLock(state_dir)
    lock.acquire()  # StateDirBusy: in use
    try:
        for child in state_dir.iterdir():
            if child.name != lock.path.name:
                _remove(child)
        lock.path.unlink(missing_ok=True)  # last: a mount waiting on it re-opens a fresh one after
    finally:
        lock.release()
    state_dir.rmdir()
    return size


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def tree_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (what removing it frees)."""
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                continue
    return total


def state_dirs(root: Path) -> list[Path]:
    """The state directories under the cache root."""
    try:
        return sorted(p for p in root.iterdir() if STATE_NAME.fullmatch(p.name) and is_state_dir(p))
    except OSError:
        return []


def sweep(root: Path, max_age_days: float, now: float | None = None) -> Outcome:
    """Remove the state directories under ``root`` idle longer than ``max_age_days`` (none when it is 0 or
    less); those in use are kept and named."""
    outcome = Outcome([], [])
    if max_age_days <= 0:
        return outcome
    cutoff = (time.time() if now is None else now) - max_age_days * DAY_S
    for state_dir in state_dirs(root):
        if last_used(state_dir) >= cutoff:
            continue
        try:
            outcome.removed.append((state_dir, remove_state_dir(state_dir)))
        except StateDirBusy:
            outcome.busy.append(state_dir)
        except OSError:
            continue  # another user's, or going away meanwhile: the next sweep looks again
    return outcome
