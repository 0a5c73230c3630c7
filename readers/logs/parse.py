"""Per-line parsing and sniffing of line logs (application logs and access logs).

A line *starts an entry* when it begins with a timestamp (ISO ``2019-05-01
10:00:03,123``, bracketed ``[2019-...]``, optionally after a short level word)
or is an access-log line in the common/combined format (``1.2.3.4 - - [17/May/
2015:10:05:03 +0000] "GET /x HTTP/1.1" 200 512 ...``). Non-blank lines without
a timestamp continue the entry above (stack traces); before the first
timestamp each line is its own entry. Timestamps are normalised to
``YYYY-MM-DDTHH:MM:SS[.fff]`` as written (time zones are not converted), so
time bounds compare as strings.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass, field

_ISO = re.compile(r"\W{0,3}(?:[A-Za-z]{3,8}\W{1,3})?(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d:\d\d(?:[.,]\d{1,9})?)")
_CLF = re.compile(
    r'(\S+) \S+ \S+ \[(\d\d)/([A-Z][a-z]{2})/(\d{4}):(\d\d:\d\d:\d\d) ([+-]\d{4})\] '
    r'"(?:([A-Z]{3,10}) (\S+)[^"]*|[^"]*)" (\d{3}) (\d+|-)'
)
_LEVEL = re.compile(r"\b(TRACE|DEBUG|INFO|NOTICE|WARN|WARNING|ERROR|SEVERE|FATAL|CRITICAL)\b")
_MONTH_NAMES = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_MONTHS = {m: f"{i:02d}" for i, m in enumerate(_MONTH_NAMES, 1)}
_NUMBERS = re.compile(r"\d+")
LEVEL_WINDOW = 80
"""How far past the timestamp a level word is looked for."""
SNIFF_LINES = 20
ACCESS_FIELDS = ("ip", "method", "path", "status", "bytes")


@dataclass
class Entries:
    """Column store of a log's entries: line ranges, text offsets and fields."""

    first: list[int] = field(default_factory=list)
    last: list[int] = field(default_factory=list)
    time: list[str | None] = field(default_factory=list)
    level: list[str | None] = field(default_factory=list)
    access: dict[str, list[str | None]] = field(default_factory=lambda: {name: [] for name in ACCESS_FIELDS})
    templates: list[str] = field(default_factory=list)
    access_lines: int = 0

    def __len__(self) -> int:
        return len(self.first)


def parse_lines(lines: list[str]) -> Entries:
    """Entries of a log given its lines (without newlines)."""
    out = Entries()
    current_has_time = False
    for number, line in enumerate(lines, 1):
        if not line or line.isspace():
            continue
        parsed = _parse_line(line)
        if parsed is None and current_has_time:
            out.last[-1] = number
            continue
        stamp, level, access, message = parsed or (None, _untimed_level(line), None, line)
        out.first.append(number)
        out.last.append(number)
        out.time.append(stamp)
        out.level.append(level)
        for name, values in out.access.items():
            values.append(access[name] if access else None)
        out.access_lines += access is not None
        out.templates.append(template(message))
        current_has_time = stamp is not None
    return out


def _parse_line(line: str) -> tuple[str, str | None, dict[str, str | None] | None, str] | None:
    """(time, level, access fields, message) of a line that starts an entry, else None."""
    iso = _ISO.match(line)
    if iso:
        stamp = f"{iso.group(1)}T{iso.group(2).replace(',', '.')}"
        rest = line[iso.end() :]
        level = _LEVEL.search(line, 0, iso.end() + LEVEL_WINDOW)
        return stamp, _level(level.group(1)) if level else None, None, rest.strip(" ]")
    clf = _CLF.match(line)
    if clf:
        ip, day, month, year, clock, _, method, path, status, size = clf.groups()
        stamp = f"{year}-{_MONTHS.get(month, '00')}-{day}T{clock}"
        access = {"ip": ip, "method": method, "path": path, "status": status, "bytes": size}
        return stamp, None, access, f"{method or '-'} {_mask_path(path or '-')} {status}"
    return None


def _untimed_level(line: str) -> str | None:
    """A line without a timestamp ('ERROR job 7 failed', '[WARN] disk full') still has a level."""
    level = _LEVEL.search(line, 0, LEVEL_WINDOW)
    return _level(level.group(1)) if level else None


def _level(word: str) -> str:
    return {"WARNING": "WARN", "SEVERE": "ERROR", "CRITICAL": "FATAL"}.get(word, word)


def _mask_path(path: str) -> str:
    return path.split("?", 1)[0]


def template(message: str) -> str:
    """The message with numbers masked, cut to 120 characters."""
    return _NUMBERS.sub("#", message[:200])[:120]


def starts_entry(line: str) -> bool:
    return _ISO.match(line) is not None or _CLF.match(line) is not None


def sniff(head: bytes) -> bool:
    """Do the first lines look like a line log? The first must start an entry, and a third of them.

    Indented lines (stack traces) are not counted. Code, prose, CSV without
    times and JSON do not match; a timestamp needs a time of day (so a dated
    changelog is not a log).
    """
    if b"\x00" in head:
        return False
    try:
        text = codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        return False
    lines = text.split("\n")
    if len(lines) > 1 and not head.endswith(b"\n"):
        lines = lines[:-1]  # the last line may be cut
    sample = [line for line in lines if line.strip() and not line[0].isspace()][:SNIFF_LINES]
    if not sample or not starts_entry(sample[0]):
        return False
    hits = sum(starts_entry(line) for line in sample)
    return hits * 3 >= len(sample) if len(sample) >= 3 else hits == len(sample)
