"""Protocol state that survives a remount: episodes, frozen packs, the session intent.

One SQLite file (``state.sqlite`` in the state directory, WAL mode) holds:

* ``episodes``: one row per episode, rewritten after every access that changed
  it (Algorithm 1, SaveEpisode), with its evidence record (spans and anchors);
  closed episodes beyond the newest 50,000 are dropped when a mount starts;
* ``packs``: the frozen content of each virtual path for one artifact version,
  so re-reading a path after a remount re-delivers the same bytes and is never
  admitted again (the newest version per path; bounded in bytes);
* ``settings``: the session intent.

Every call takes one lock and runs one short statement; a damaged database is
moved aside and replaced by an empty one, so state can be lost but never stop
a mount. Nothing is pickled: episodes are JSON, packs are the bytes served.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import orjson

log = logging.getLogger("sparsefs.state")
SCHEMA_VERSION = 1
STATE_FILE = "state.sqlite"
MAX_PACK_BYTES = 64 * 1024 * 1024  # the evidence bound: a pack the memory cap evicts is re-read, not rebuilt
MAX_PACKS_TOTAL_BYTES = 256 * 1024 * 1024
MAX_EPISODES_LOADED = 2_000
MAX_EPISODES_KEPT = 50_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS episodes (
    id TEXT PRIMARY KEY, number INTEGER NOT NULL, artifact TEXT NOT NULL, is_open INTEGER NOT NULL,
    record TEXT NOT NULL, updated REAL NOT NULL);
CREATE INDEX IF NOT EXISTS episodes_number ON episodes(number);
CREATE TABLE IF NOT EXISTS packs (
    vpath TEXT PRIMARY KEY, version TEXT NOT NULL, content BLOB NOT NULL, log_entry TEXT, created REAL NOT NULL);
CREATE INDEX IF NOT EXISTS packs_created ON packs(created);
CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


class StateDB:
    """Thread-safe access to ``state.sqlite``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._reported: set[str] = set()
        self.failed_writes = 0  # episodes, packs, settings not saved (a full disk): stats.json's not_saved
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = _open(path)
        self._prune_episodes()
        self._pack_bytes = self._scalar("SELECT COALESCE(SUM(LENGTH(content)), 0) FROM packs")

    @classmethod
    def in_dir(cls, state_dir: Path) -> StateDB:
        return cls(state_dir / STATE_FILE)

    # ---- episodes ----------------------------------------------------------
    def save_episode(self, record: dict[str, Any], is_open: bool) -> None:
        """``number`` orders episodes (its record's, else an old id's digits: ``e12``)."""
        digits = str(record["id"]).lstrip("e")
        number = int(record.get("number") or (digits if digits.isdigit() else 0))
        self._write(
            "INSERT OR REPLACE INTO episodes VALUES (?, ?, ?, ?, ?, ?)",
            (record["id"], number, record["artifact_rel"], int(is_open), orjson.dumps(record).decode(), time.time()),
        )

    def load_episodes(self, limit: int = MAX_EPISODES_LOADED) -> list[tuple[dict[str, Any], bool]]:
        """The newest ``limit`` episodes, oldest first, with whether each is open."""
        rows = self._read("SELECT record, is_open FROM episodes ORDER BY number DESC LIMIT ?", (limit,))
        return [(orjson.loads(record), bool(is_open)) for record, is_open in reversed(rows)]

    def _prune_episodes(self) -> None:
        """Keep the newest MAX_EPISODES_KEPT closed episodes (open ones always stay)."""
        self._write(
            "DELETE FROM episodes WHERE is_open = 0 AND number <= "
            "(SELECT COALESCE(MAX(number), 0) FROM episodes) - ?", (MAX_EPISODES_KEPT,),
        )

    def has_episode(self, episode_id: str) -> bool:
        return bool(self._read("SELECT 1 FROM episodes WHERE id = ?", (episode_id,)))

    def last_episode_number(self) -> int:
        return self._scalar("SELECT COALESCE(MAX(number), 0) FROM episodes")

    # ---- frozen packs ------------------------------------------------------
    def put_pack(self, vpath: str, version: str, content: bytes, log_entry: dict[str, Any] | None) -> None:
        if not version or len(content) > MAX_PACK_BYTES:
            return
        entry = orjson.dumps(log_entry).decode() if log_entry is not None else None
        with self._lock:
            try:
                old = self._db.execute("SELECT LENGTH(content) FROM packs WHERE vpath = ?", (vpath,)).fetchone()
                self._db.execute("INSERT OR REPLACE INTO packs VALUES (?, ?, ?, ?, ?)",
                                 (vpath, version, content, entry, time.time()))
                self._pack_bytes += len(content) - (old[0] if old else 0)
                if self._pack_bytes > MAX_PACKS_TOTAL_BYTES:
                    self._prune_packs()
            except sqlite3.Error as err:
                self.failed_writes += 1
                self._failed("pack write", err)

    def get_pack(self, vpath: str, version: str) -> tuple[bytes, dict[str, Any] | None] | None:
        rows = self._read("SELECT content, log_entry FROM packs WHERE vpath = ? AND version = ?", (vpath, version))
        if not rows:
            return None
        content, entry = rows[0]
        return bytes(content), (orjson.loads(entry) if entry else None)

    def _prune_packs(self) -> None:
        """Drop the oldest packs until a quarter of the byte bound is free (lock held)."""
        target = MAX_PACKS_TOTAL_BYTES * 3 // 4
        rows = self._db.execute("SELECT vpath, LENGTH(content) FROM packs ORDER BY created").fetchall()
        for vpath, size in rows:
            if self._pack_bytes <= target:
                break
            self._db.execute("DELETE FROM packs WHERE vpath = ?", (vpath,))
            self._pack_bytes -= size

    # ---- settings ----------------------------------------------------------
    def get_setting(self, key: str) -> str | None:
        rows = self._read("SELECT value FROM settings WHERE key = ?", (key,))
        return str(rows[0][0]) if rows else None

    def set_setting(self, key: str, value: str) -> None:
        self._write("INSERT OR REPLACE INTO settings VALUES (?, ?)", (key, value))

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # ---- plumbing ----------------------------------------------------------
    def _write(self, sql: str, args: tuple[Any, ...]) -> None:
        with self._lock:
            try:
                self._db.execute(sql, args)
            except sqlite3.Error as err:
                self.failed_writes += 1
                self._failed(f"{sql.split()[0].lower()} of state", err)

    def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[Any]:
        with self._lock:
            try:
                return self._db.execute(sql, args).fetchall()
            except sqlite3.Error as err:
                self._failed("state read", err)
                return []

    def _failed(self, what: str, err: sqlite3.Error) -> None:
        """A full disk or a damaged file loses state, never a request; said once per kind of failure."""
        key = f"{what}: {type(err).__name__}"
        if key not in self._reported:
            self._reported.add(key)
            log.warning("%s failed (%s); the mount goes on without saving it (%s)", what, err, self.path)

    def _scalar(self, sql: str) -> int:
        rows = self._read(sql)
        return int(rows[0][0]) if rows else 0


def read_episodes(state_dir: Path, limit: int = MAX_EPISODES_LOADED) -> list[dict[str, Any]]:
    """Episodes saved in ``state_dir``, newest last, read-only (safe while a mount runs)."""
    path = state_dir / STATE_FILE
    if not path.exists():
        return []
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5.0)
    try:
        rows = db.execute("SELECT record, is_open FROM episodes ORDER BY number DESC LIMIT ?", (limit,)).fetchall()
    finally:
        db.close()
    return [orjson.loads(record) | {"open": bool(is_open)} for record, is_open in reversed(rows)]


def _open(path: Path) -> sqlite3.Connection:
    """The database at ``path``; a damaged or foreign file is moved aside first."""
    try:
        return _connect(path)
    except sqlite3.OperationalError:
        raise  # disk full, locked, unreadable: not damage, never moved aside
    except sqlite3.DatabaseError as err:
        aside = path.with_name(f"{path.name}.damaged-{int(time.time())}")
        log.warning("state database %s is unusable (%s); moved to %s, starting empty", path, err, aside)
        path.rename(aside)
        for suffix in ("-wal", "-shm"):
            path.with_name(path.name + suffix).unlink(missing_ok=True)
        return _connect(path)


def _connect(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=5.0)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version not in (0, SCHEMA_VERSION):
            raise sqlite3.DatabaseError(f"schema version {version}, this SparseFS writes {SCHEMA_VERSION}")
        db.executescript(_SCHEMA)
        db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
    except sqlite3.DatabaseError:
        db.close()
        raise
    return db


class StateDirBusy(Exception):
    """Another live mount holds this state directory."""


class StateLock:
    """An exclusive flock on ``state_dir/mount.lock`` for the lifetime of one mount.

    Two mounts sharing a state directory would number episodes from the same
    counter and overwrite each other's records; the second is refused.
    """

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / "mount.lock"
        self._fd = -1

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise StateDirBusy(f"the state directory {self.path.parent} is in use by another SparseFS mount "
                               f"(pid {holder}); give this mount its own --state-dir") from None
        self._fd = fd
        try:  # who holds it, for messages; a full state disk must not stop the mount (nor leak the held lock)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as err:
            log.warning("cannot write the pid into %s (%s)", self.path, err.strerror or err)

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing drops the flock
            self._fd = -1
