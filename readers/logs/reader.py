"""The Log Reader: line logs (application logs, access logs), by name or by content.

Full view: the decoded UTF-8 text, exactly. Anchors are line ranges (``L120``,
``L120-180``). Each line is parsed once (see :mod:`readers.logs.parse`) into
entries with a normalised timestamp, a level and, for access logs, ip, method,
path, status and bytes; the exact operations of :mod:`readers.kit.records`
(filter, count, distinct, sum/mean/min/max) run over all entries. Intent reads
rank line units by any location method (:mod:`readers.kit.lines`).

The Reader is a sniffer: it claims ``*.log`` (and ``name.log.2016-12-19``)
and any UTF-8 file whose first lines mostly start with a timestamp or are
access-log lines, whatever its name.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from readers.base import (
    ArtifactSource,
    CostProfile,
    Parsed,
    UnsupportedArtifact,
)
from readers.kit import lines as log_lines
from readers.kit import records as log_ops
from readers.kit.bounded import BoundedLines, shorten
from readers.kit.source import read_within
from readers.logs import parse as log_parse
from readers.ops import BadOperation
from readers.text import decode_flags, decode_utf8, mostly_utf8

_RAW_HINT = "read the original bytes with @raw"


class LogTable(log_ops.RecordTable):
    """A log's entries as exact operations see them."""

    unit = "entries"

    def __init__(self, parsed: Parsed) -> None:
        self.parsed = parsed
        self.entries: log_parse.Entries = parsed.data["entries"]

    def __len__(self) -> int:
        return len(self.entries)

    def lines(self, i: int) -> log_lines.Record:
        return self.entries.first[i], self.entries.last[i]

    def text(self, i: int) -> str:
        start, end = log_lines.span(self.parsed, *self.lines(i))
        return self.parsed.full_view[start:end]

    def time(self, i: int) -> str | None:
        return self.entries.time[i]

    def time_field(self) -> str | None:
        return "time" if any(t is not None for t in self.entries.time) else None

    def fields(self) -> list[str]:
        names = ["time", "level", "message"]
        return names + list(log_parse.ACCESS_FIELDS) if self.entries.access_lines else names

    def getter(self, name: str) -> log_ops.Getter:
        entries = self.entries
        columns: dict[str, Sequence[str | None]] = {"time": entries.time, "level": entries.level}
        if entries.access_lines:
            columns.update(entries.access)
        if name in columns:
            return columns[name].__getitem__
        if name == "message":
            return self.text
        raise BadOperation(
            f"log entries have no field {name!r}", hint="fields here: " + ", ".join(self.fields())
        )


class LogReader(log_ops.RecordReader):
    """Line logs: timestamps, levels, access-log fields; exact filters and counts."""

    name = "log"
    extensions = frozenset({".log"})
    cost = CostProfile(parse_ms_per_mb=45.0, per_call_chars=120, full_view_ratio=1.0)

    def accepts(self, name: str, head: bytes) -> bool:
        base = name.rsplit("/", 1)[-1].lower()
        if base.endswith(".log") or ".log." in base:
            return b"\x00" not in head and _utf8_head(head)
        return log_parse.sniff(head)

    def parse(self, source: ArtifactSource) -> Parsed:
        data = read_within(source, self.max_bytes, "Log", "read parts with @raw, or split the log")
        if b"\x00" in data:
            raise UnsupportedArtifact("binary data (NUL bytes) in a log", hint=_RAW_HINT)
        text = decode_utf8(data)
        lines = text.split("\n")
        if text.endswith("\n"):
            lines.pop()
        entries = log_parse.parse_lines([line.removesuffix("\r") for line in lines])
        starts = log_lines.starts_of(text)
        return Parsed(text, "log", {"line_starts": starts, "entries": entries, "flags": decode_flags(data, text)})

    def preview(self, parsed: Parsed, max_chars: int) -> str:
        if max_chars <= 0:
            return ""
        out = BoundedLines(max_chars, cut_from=log_lines.CUT_FROM)
        entries: log_parse.Entries = parsed.data["entries"]
        times = [t for t in (entries.time[0], entries.time[-1]) if t] if len(entries) else []
        span = f", {times[0]} .. {times[-1]}" if times else ""
        lines = log_lines.line_count(parsed)
        out.add(f"log: {lines:,} lines, {len(entries):,} entries{span}")
        if entries.access_lines:
            out.add(f"access log ({entries.access_lines:,} lines): " + _counts("status", entries.access["status"]))
            out.add(_counts("methods", entries.access["method"]))
        if any(entries.level):
            out.add(_counts("levels", entries.level))
        out.add("fields: " + ", ".join(LogTable(parsed).fields()))
        _templates(out, entries.templates)
        out.add("first lines:")
        log_lines.sample_lines(out, parsed, range(1, min(lines, 6) + 1))
        field = "status" if entries.access_lines else "level"
        where = "status>=500" if entries.access_lines else "level:ERROR"
        out.add(f"ask: @filter=REGEX&where={where}&since={times[0][:16] if times else '2020-01-31T10:05'}"
                f" | @count&by={field} | @focus=L1-50")
        return out.text()

    def table(self, parsed: Parsed) -> log_ops.RecordTable:
        return LogTable(parsed)


def _utf8_head(head: bytes) -> bool:
    return mostly_utf8(head)


def _counts(what: str, values: Sequence[str | None], n: int = 8) -> str:
    counts = Counter(v for v in values if v is not None).most_common(n)
    return f"{what}: " + ", ".join(f"{value} {count:,}" for value, count in counts)


def _templates(out: BoundedLines, templates: Sequence[str], n: int = 5) -> None:
    top = Counter(templates).most_common(n)
    if top and out.add("top message templates (numbers masked as #):"):
        for template, count in top:
            if not out.add(f"  {count:,}× {shorten(template, 110)}"):
                return
