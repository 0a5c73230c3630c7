"""What full reads would have cost, and so the characters saved: one definition, one implementation, for
``.sparsefs/stats.json`` (sparsefs.store.stats, live) and ``sparsefs stats`` / ``sparsefs report``
(sparsefs.app.report, from the log). docs/SEMANTICS.md ("Savings") states it with a worked example.

The baseline is a person reading the same files without SparseFS, who reads a file whole when they first
need something from it and keeps what they read while they keep working on that file:

* every log line (a pack delivered, a guard card, a plain read after a card) exposed its ``exposed``
  characters; ``chars_exposed`` is their sum;
* a line stands for the **full reads** a person would have made to get what it served (its ``reads``
  field, :class:`FullRead`): the file itself for a pack of a file; for a folder pack, the folder's listing
  plus each member the pack carries text of; nothing for an error pack (nothing was served);
* a full read of one artifact version counts **at most once per read window** of that artifact: a window
  lasts while the artifact keeps being read, and closes after :data:`WINDOW_IDLE_S` without a line about
  it. Refines, other objectives, exact operations and previews of a version read in the window cost
  nothing more;
* a version whose full view *extends* a version already read in the window (a log that grew by appending)
  costs only what it added: the person reads the new tail, not the whole file again;
* ``chars_saved = full_read_chars - chars_exposed``.

Re-reads of a frozen pack re-deliver the same bytes and are not logged: they cost and save nothing. A line
without ``reads`` (an older log, a guard line) stands for one full read of its own artifact version at its
``L`` (none when ``L`` is 0 or its decision is ``error``). The two surfaces differ only in what they cover:
stats.json counts the lines this mount logged; ``sparsefs stats`` every line of the log (earlier mounts,
``sparsefs read``, the API, MCP), so a window can span a remount there and not in stats.json.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

VERSION_KEY = "version:"
"""Prefix of the key of a unit outside any episode: ``version:<artifact>:<fingerprint>``."""
FINGERPRINT_CHARS = 12
"""Versions compare on the short fingerprint packs show (a guard line logs the whole one)."""
WINDOW_IDLE_S = 1800.0
"""A read window of an artifact closes after this long without a line about it (30 minutes)."""
_VERSIONS_PER_WINDOW = 64
_WINDOWS = 100_000


def unit_key(artifact: str, version: str, episode: str | None) -> str:
    """The read unit a log line is shown under (an episode, else the artifact version)."""
    return episode or f"{VERSION_KEY}{artifact}:{version[:FINGERPRINT_CHARS]}"


@dataclass(frozen=True)
class FullRead:
    """One file a person would have read whole: ``chars`` of its version ``version``; ``extends``: a version
    whose full view (``extends_chars`` long) is a prefix of this one's."""

    artifact: str
    version: str
    chars: int
    extends: str = ""
    extends_chars: int = 0

    def as_log(self) -> list[str | int]:
        head: list[str | int] = [self.artifact, self.version[:FINGERPRINT_CHARS], self.chars]
        return [*head, self.extends[:FINGERPRINT_CHARS], self.extends_chars] if self.extends else head

    @classmethod
    def from_log(cls, item: Any) -> FullRead:
        if not isinstance(item, list) or len(item) not in (3, 5):
            raise ValueError(f"not a full read: {item!r}")
        artifact, version, chars = item[:3]
        extends, extends_chars = item[3:] if len(item) == 5 else ("", 0)
        if not (isinstance(artifact, str) and isinstance(version, str) and isinstance(extends, str)):
            raise TypeError(f"not a full read: {item!r}")
        return cls(artifact, version, count(chars), extends, count(extends_chars))


def count(value: Any) -> int:
    """A non-negative integer from the log, or ValueError."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"not a count: {value!r}")
    return value


@dataclass(frozen=True)
class Logged:
    """One log line as the savings see it."""

    time: float
    artifact: str
    version: str
    episode: str | None
    exposed: int
    reads: tuple[FullRead, ...]

    @classmethod
    def of(cls, entry: Mapping[str, Any]) -> Logged:
        """Validate a log line (KeyError, TypeError or ValueError when it is malformed)."""
        if not isinstance(entry["artifact"], str):
            raise TypeError("not a log line")
        episode, moment = entry.get("episode"), entry.get("time", 0.0)
        if isinstance(moment, bool) or not isinstance(moment, (int, float)):
            raise TypeError(f"not a time: {moment!r}")
        return cls(float(moment), entry["artifact"], str(entry.get("fingerprint")), str(episode) if episode else None,
                   count(entry["exposed"]), _reads(entry))


def _reads(entry: Mapping[str, Any]) -> tuple[FullRead, ...]:
    """The line's ``reads``; without the field, its own artifact version at ``L`` (none for an error)."""
    if "reads" in entry:
        if not isinstance(entry["reads"], list):
            raise TypeError("reads is not a list")
        return tuple(FullRead.from_log(item) for item in entry["reads"])
    length = count(entry["L"])
    if length == 0 or entry.get("decision") == "error":
        return ()
    return (FullRead(entry["artifact"], str(entry.get("fingerprint")), length),)


@dataclass
class _Window:
    """What a person holds of one artifact: the versions read in the current window, and when it was last read."""

    last: float
    versions: OrderedDict[str, int] = field(default_factory=OrderedDict)  # version -> its full-view chars

    def charge(self, read: FullRead) -> int:
        version = read.version[:FINGERPRINT_CHARS]
        if version in self.versions:
            return 0
        extends = read.extends[:FINGERPRINT_CHARS]
        cost = max(0, read.chars - read.extends_chars) if extends and extends in self.versions else read.chars
        self.versions[version] = read.chars
        while len(self.versions) > _VERSIONS_PER_WINDOW:
            self.versions.popitem(last=False)
        return cost


@dataclass
class ReadUnits:
    """Exposed and full-read characters over the log lines added so far, in log order; O(reads) per line."""

    exposed: int = 0
    full_read_chars: int = 0
    full_reads: int = 0  # (artifact version, window) pairs that cost something
    _units: dict[str, int] = field(default_factory=dict)  # unit key -> the full-read chars its lines cost
    _windows: OrderedDict[str, _Window] = field(default_factory=OrderedDict)  # artifact -> its read window

    def add(self, line: Logged) -> tuple[str, int]:
        """Count one log line; returns its unit's key and the full-read characters it cost."""
        key = unit_key(line.artifact, line.version, line.episode)
        cost = sum(self._charge(read, line.time) for read in line.reads)
        self.exposed += line.exposed
        self.full_read_chars += cost
        self._units[key] = self._units.get(key, 0) + cost
        return key, cost

    def _charge(self, read: FullRead, moment: float) -> int:
        window = self._windows.pop(read.artifact, None)
        if window is None or moment - window.last > WINDOW_IDLE_S:
            window = _Window(moment)
        window.last = max(window.last, moment)
        self._windows[read.artifact] = window  # most recently read last
        while len(self._windows) > _WINDOWS:
            self._windows.popitem(last=False)  # an artifact idle for that long: its window is long closed
        cost = window.charge(read)
        self.full_reads += cost > 0
        return cost

    def cost(self, key: str) -> int:
        """What unit ``key``'s lines cost in full reads."""
        return self._units.get(key, 0)

    @property
    def saved(self) -> int:
        return self.full_read_chars - self.exposed

    @property
    def ratio(self) -> float | None:
        """Exposed per full-read character (None before any full read had a cost)."""
        return round(self.exposed / self.full_read_chars, 4) if self.full_read_chars else None

    @property
    def units(self) -> int:
        return len(self._units)
