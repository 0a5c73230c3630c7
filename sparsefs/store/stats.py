"""Counters for .sparsefs/stats.json and the append-only .sparsefs/log.jsonl.

Exposure and savings are those of the lines this mount logged, in read units (sparsefs.store.savings: the
definition ``sparsefs stats`` applies to the whole log).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from sparsefs.store.savings import ReadUnits

# sparsefs.guard.policy: read-only opens of real files by guarded processes, cards served (and their characters),
# plain reads after a card, and opens the guard failed open on (an error, a kernel race: real bytes). Cards
# and insisted reads also count in chars_exposed and the full reads (their log lines are in the packs' schema).
GUARD_COUNTERS = ("guard_plain_reads", "guard_cards", "guard_card_chars", "guard_insisted_reads",
                  "guard_fail_open")


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
        self.units = ReadUnits()  # chars_exposed and full reads, per read unit
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)

    def add(self, name: str, amount: int) -> None:
        with self._lock:
            self.counters[name] += amount

    def record_pack(self, entry: dict[str, Any]) -> None:
        """Append one pack's log line (stamped now), then count it."""
        line = orjson.dumps({"time": round(time.time(), 3), **entry}) + b"\n"
        with self._lock:
            os.write(self._log_fd, line)
            self._add_unit(entry)
            self.counters["packs_served"] += 1
            self.counters["artifact_chars_exposed"] += int(entry.get("artifact_chars", 0))
            self.counters["error_packs"] += entry["decision"] == "error"
            self.counters["fallbacks"] += entry["decision"] == "fallback"
            self.counters["previews"] += entry["decision"] == "preview"
            self.counters["exact_results"] += entry["decision"] == "exact"

    def record_guard(self, entry: dict[str, Any], counts: dict[str, int]) -> None:
        """Append a guard event's log line (stamped now) and add its counts (sparsefs.guard.policy)."""
        line = orjson.dumps({"time": round(time.time(), 3), **entry}) + b"\n"
        with self._lock:
            os.write(self._log_fd, line)
            self._add_unit(entry)
            for name, amount in counts.items():
                self.counters[name] += amount

    def _add_unit(self, entry: dict[str, Any]) -> None:
        """Count a logged line's exposure and full read as ``sparsefs stats`` counts that line (under the lock)."""
        self.units.add(str(entry["artifact"]), str(entry.get("fingerprint")), entry.get("episode") or None,
                       int(entry["exposed"]), int(entry["L"]))

    def log_size(self) -> int:
        return os.fstat(self._log_fd).st_size

    def snapshot(self) -> dict[str, Any]:
        """The numbers of stats.json; exposure and savings in read units (sparsefs.store.savings)."""
        with self._lock:
            counters = dict(self.counters)
            units = self.units
            savings = {"chars_exposed": units.exposed, "full_read_chars": units.full_read_chars,
                       "chars_saved_vs_full_reads": units.saved, "exposure_ratio": units.ratio,
                       "read_units": units.units}
        return {
            "backend": self.backend,
            "passthrough": self.passthrough,
            "watcher": self.watcher(),
            **{name: gauge() for name, gauge in self.gauges.items()},
            **{name: section() for name, section in self.sections.items()},
            "uptime_s": round(time.time() - self.started, 1),
            **counters,
            **savings,
        }

    def close(self) -> None:
        os.close(self._log_fd)
