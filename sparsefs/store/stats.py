"""Counters for .sparsefs/stats.json and the append-only .sparsefs/log.jsonl.

Exposure and savings are those of the lines this mount served, in read units and read windows
(sparsefs.store.savings: the definition ``sparsefs stats`` applies to the whole log). A line is counted when it
is served, whether or not the log could be written (sparsefs.store.logfile: whole lines or none; what waits
or was lost is in stats.json's ``not_saved``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from sparsefs.store.logfile import PackLog
from sparsefs.store.savings import Logged, ReadUnits

log = logging.getLogger("sparsefs.stats")

# sparsefs.guard.policy: read-only opens of real files by guarded processes, cards served (and their characters),
# plain reads after a card, and opens the guard failed open on (an error, a kernel race: real bytes). Cards
# and insisted reads also count in chars_exposed and the full reads (their log lines are in the packs' schema).
GUARD_COUNTERS = ("guard_plain_reads", "guard_cards", "guard_card_chars", "guard_insisted_reads",
                  "guard_fail_open")

# What plain_bytes_read / plain_bytes_written cover: the daemon counts what passes through it, and with kernel
# passthrough the reads and writes of an open plain file never do.
PLAIN_ALL = "all: every plain read and write passes through the daemon"
PLAIN_PASSTHROUGH = ("only what passes through the daemon: plain files opened with kernel passthrough are read "
                     "and written by the kernel and not counted (page-cache fills and daemon-served files are)")

_LABELS = {"log_lines_waiting": "log lines waiting in memory", "log_lines_lost": "log lines lost",
           "state_writes_failed": "state database writes failed",
           "parsed_store_writes_failed": "parsed-store writes failed",
           "state_database_not_opened": "state database not opened (episodes live in memory only)",
           "parsed_store_not_opened": "parsed store not opened (parses live in memory only)"}


def _said(name: str, n: int) -> str:
    label = _LABELS.get(name, name.replace("_", " "))
    return label if name.endswith("_not_opened") else f"{n:,} {label}"


class Stats:
    """Thread-safe counters; every number here is counted, never estimated."""

    def __init__(self, log_path: Path, backend: str = "mfusepy") -> None:
        self._lock = threading.Lock()
        self.started = time.time()
        self.backend = backend
        self.passthrough: bool | None = None  # set by the kernel backend once INIT is negotiated
        self.gauges: dict[str, Callable[[], int]] = {}  # live values a backend reports (node counts)
        self.sections: dict[str, Callable[[], dict[str, Any]]] = {}  # live objects (the shared cache's counters)
        # How source changes reach this mount (sparsefs.source.freshness sets it): inotify, on-access or off.
        self.watcher: Callable[[], dict[str, Any]] = lambda: {
            "mode": "off", "watches": 0, "reason": "nothing watches or checks the source"}
        self.counters: dict[str, int] = {
            "plain_bytes_read": 0,
            "plain_bytes_written": 0,
            "raw_bytes_read": 0,
            "packs_served": 0,
            "error_packs": 0,
            "fallbacks": 0,
            "previews": 0,
            "exact_results": 0,
            "artifact_chars_exposed": 0,  # of the characters exposed, the artifacts' own text (passages, full views)
            **dict.fromkeys(GUARD_COUNTERS, 0),
        }
        self.units = ReadUnits()  # chars_exposed and full reads, per read unit and read window
        self.log_path = log_path
        self.log = PackLog(log_path)
        self.on_logged: Callable[[], None] = lambda: None  # the live log grew (the binding drops its cached size)
        # What the state directory could not keep (sparsefs.store.state, .parsed): name -> count of writes lost
        self.unsaved: dict[str, Callable[[], int]] = {}

    def add(self, name: str, amount: int) -> None:
        with self._lock:
            self.counters[name] += amount

    def record_pack(self, entry: dict[str, Any]) -> None:
        """Count one pack's log line (stamped now), then append it."""
        stamped = {"time": round(time.time(), 3), **entry}
        with self._lock:
            self._append(stamped)
            self.counters["packs_served"] += 1
            self.counters["artifact_chars_exposed"] += int(entry.get("artifact_chars", 0))
            self.counters["error_packs"] += entry["decision"] == "error"
            self.counters["fallbacks"] += entry["decision"] == "fallback"
            self.counters["previews"] += entry["decision"] == "preview"
            self.counters["exact_results"] += entry["decision"] == "exact"
        self.on_logged()

    def record_guard(self, entry: dict[str, Any], counts: dict[str, int]) -> None:
        """Count a guard event's log line (stamped now) and its counts (sparsefs.guard.policy), then append it."""
        stamped = {"time": round(time.time(), 3), **entry}
        with self._lock:
            self._append(stamped)
            for name, amount in counts.items():
                self.counters[name] += amount
        self.on_logged()

    def _append(self, stamped: dict[str, Any]) -> None:
        """Count the line as ``sparsefs stats`` counts it, then write it whole, or keep it to write later
        (under the lock)."""
        try:
            _, cost = self.units.add(Logged.of(stamped))
        except (KeyError, TypeError, ValueError):  # a line `sparsefs stats` would skip as malformed: so do we
            log.warning("log line not counted (malformed): %.200r", stamped)
            cost = 0
        exposed = stamped.get("exposed")
        self.log.append(orjson.dumps(stamped) + b"\n", exposed if isinstance(exposed, int) else 0, cost)

    def log_size(self) -> int:
        with self._lock:
            return self.log.size()

    def not_saved(self) -> dict[str, Any] | None:
        """What this mount could not write to its state directory, said once; None when everything was saved."""
        with self._lock:
            counts = {"log_lines_waiting": self.log.waiting, "log_lines_lost": self.log.lost_total}
            since, error = self.log.failed_since, self.log.last_error
        counts |= {name: count() for name, count in self.unsaved.items()}
        if not any(counts.values()):
            return None
        said = ", ".join(_said(name, n) for name, n in counts.items() if n)
        summary = f"not saved in {self.log_path.parent}: {said}" + (f" ({error})" if error else "")
        return {**counts, "failing_since": since, "summary": summary + "; packs are served from memory"}

    def snapshot(self) -> dict[str, Any]:
        """The numbers of stats.json; exposure and savings in read units (sparsefs.store.savings). Lines waiting
        for a full state disk are written now if it has room again."""
        with self._lock:
            self.log.flush()
            counters = dict(self.counters)
            units = self.units
            savings = {"chars_exposed": units.exposed, "full_read_chars": units.full_read_chars,
                       "chars_saved_vs_full_reads": units.saved, "exposure_ratio": units.ratio,
                       "read_units": units.units, "full_reads": units.full_reads}
        missing = self.not_saved()
        return {
            "backend": self.backend,
            "passthrough": self.passthrough,
            "plain_bytes_counted": PLAIN_PASSTHROUGH if self.passthrough else PLAIN_ALL,
            "watcher": self.watcher(),
            **{name: gauge() for name, gauge in self.gauges.items()},
            **{name: section() for name, section in self.sections.items()},
            "uptime_s": round(time.time() - self.started, 1),
            **counters,
            **savings,
            **({"not_saved": missing} if missing else {}),
        }

    def close(self) -> None:
        with self._lock:
            self.log.close()
