"""What full reads would have cost, and so the characters saved: one definition, one implementation, for
``.sparsefs/stats.json`` (sparsefs.store.stats, live) and ``sparsefs stats`` / ``sparsefs report``
(sparsefs.app.report, from the log).

Every line of the pack log (a pack delivered, a guard card, a plain read after a card) exposed its
``exposed`` characters. The baseline is an agent that reads each file whole once per task:

* a **read unit** is an episode (every access under one objective of one artifact version), or, for
  a line outside any episode (a preview, an exact result, an error, a guard card), one artifact version;
* a full read costs a unit its full-view length ``L`` once — the largest its lines state — however many
  packs it took (a refine is not a second full read);
* a version unit whose version an episode also read costs nothing: one full read would have served both
  (an episode whose lines state no ``L`` — only errors — read nothing);
* ``chars_saved = full_read_chars - chars_exposed``.

Re-reads of a frozen pack re-deliver the same bytes and are not logged: they cost and save nothing. An
error pack exposes its characters against ``L = 0``. The two surfaces differ only in what they cover:
stats.json counts the lines this mount logged; ``sparsefs stats`` every line of the log (earlier mounts,
``sparsefs read``, the API, MCP). Stats counted the old way summed ``L`` over every pack, so a refine
counted the whole file again (36.8M "saved" in stats.json vs 33.1M from the log on one run).
"""

from __future__ import annotations

from dataclasses import dataclass, field

VERSION_KEY = "version:"
"""Prefix of the key of a unit outside any episode: ``version:<artifact>:<fingerprint>``."""
FINGERPRINT_CHARS = 12
"""Versions compare on the short fingerprint packs show (a guard line logs the whole one)."""


def unit_key(artifact: str, version: str, episode: str | None) -> str:
    """The read unit a log line belongs to."""
    return episode or f"{VERSION_KEY}{artifact}:{version[:FINGERPRINT_CHARS]}"


@dataclass
class ReadUnits:
    """Exposed and full-read characters over the log lines added so far; O(1) per line, one int per unit."""

    exposed: int = 0
    full_read_chars: int = 0
    _length: dict[str, int] = field(default_factory=dict)  # unit key -> the largest L its lines stated
    _read_in_episodes: set[tuple[str, str]] = field(default_factory=set)  # (artifact, version)

    def add(self, artifact: str, version: str, episode: str | None, exposed: int, length: int) -> str:
        """Count one log line; returns its unit's key."""
        version = version[:FINGERPRINT_CHARS]
        key = unit_key(artifact, version, episode)
        self.exposed += exposed
        before = self._length.get(key, 0)
        self._length[key] = max(before, length)
        if episode is None:
            if (artifact, version) not in self._read_in_episodes:
                self.full_read_chars += self._length[key] - before
            return key
        self.full_read_chars += self._length[key] - before
        if length > 0 and (artifact, version) not in self._read_in_episodes:  # an error pack reads nothing
            self._read_in_episodes.add((artifact, version))
            self.full_read_chars -= self._length.get(unit_key(artifact, version, None), 0)  # now free
        return key

    def cost(self, key: str) -> int:
        """What a full read costs unit ``key`` (0 for a version some episode also read)."""
        if key.startswith(VERSION_KEY):
            artifact, _, version = key[len(VERSION_KEY) :].rpartition(":")
            if (artifact, version) in self._read_in_episodes:
                return 0
        return self._length.get(key, 0)

    @property
    def saved(self) -> int:
        return self.full_read_chars - self.exposed

    @property
    def ratio(self) -> float | None:
        """Exposed per full-read character (None before any full read had a cost)."""
        return round(self.exposed / self.full_read_chars, 4) if self.full_read_chars else None

    @property
    def units(self) -> int:
        return len(self._length)
