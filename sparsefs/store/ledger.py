"""The parsed store's ledger, ``index/index.sqlite``: fingerprints of file versions and the parsed entries
on disk with their size and last use (``sparsefs.store.parsed``). WAL; a damaged file is a cache, started
afresh; a full disk or a lock held elsewhere is not damage and is never deleted."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

log = logging.getLogger("sparsefs.store")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS fingerprints (
    dev INTEGER, ino INTEGER, size INTEGER, mtime_ns INTEGER, ctime_ns INTEGER,
    fingerprint TEXT NOT NULL, seen INTEGER NOT NULL,
    PRIMARY KEY (dev, ino, size, mtime_ns, ctime_ns)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS parsed (
    fingerprint TEXT, reader TEXT, bytes INTEGER NOT NULL, last_used INTEGER NOT NULL,
    PRIMARY KEY (fingerprint, reader)) WITHOUT ROWID;
"""


def connect(path: Path) -> sqlite3.Connection:
    """Open (or create) the index database; a damaged one is a cache: start it afresh."""
    try:
        return _open_db(path)
    except sqlite3.OperationalError:
        raise  # full disk, locked by another process, unreadable: not damage, never delete it
    except sqlite3.DatabaseError as err:
        log.warning("store: %s is damaged (%s); starting a new one", path, err)
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        return _open_db(path)


def _open_db(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, check_same_thread=False, isolation_level="DEFERRED")
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.executescript(_SCHEMA)
    except sqlite3.DatabaseError:
        db.close()
        raise
    return db
