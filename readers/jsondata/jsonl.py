"""The JSON Lines Reader: one JSON record a line (.jsonl, .ndjson).

Full view: each line minified with orjson, one per line, so line numbers are
the source's and every anchor is a line range (``L120``, ``L120-130``). A line
that is not valid JSON is kept verbatim and counted as bad (the file is still
served). Records are the valid lines; fields are dotted paths
(``connections.accepted``, ``peers.0.id``) or JSONPath (``$.a[0].b``, first
match). The timestamp field for ``since``/``until`` is detected by name
(``@timestamp``, ``timestamp``, ``time`` ...) and may hold ISO text or epoch
seconds / milliseconds. Exact operations and intent reads are those of
:mod:`readers.kit.records` and :mod:`readers.kit.lines`: every operation takes
``where``, ``since``/``until`` and ``rows`` (a range of records, i.e. of the
valid lines, in file order); ``count`` and ``sum|mean|min|max`` also take
``by=field``; other options are refused.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import jsonpath
import orjson

from readers.base import (
    ArtifactSource,
    CostProfile,
    Parsed,
    ReaderError,
    UnsupportedArtifact,
)
from readers.jsondata import query as json_query
from readers.jsondata.shape import kind, sample
from readers.kit import lines as log_lines
from readers.kit import records as log_ops
from readers.kit.bounded import BoundedLines
from readers.kit.source import read_within
from readers.ops import BadOperation, PatternClock

SURVEY = 10_000
"""Records whose keys are surveyed for the preview and field checks."""
TIME_KEYS = ("@timestamp", "timestamp", "time", "ts", "datetime", "date", "created_at", "updated_at", "t")
_ISO = re.compile(r"(\d{4}-\d\d-\d\d)(?:[T ](\d\d:\d\d(?::\d\d(?:\.\d+)?)?))?")
_RAW_HINT = "read the original bytes with @raw"


def to_time(value: Any) -> str | None:
    """ISO text -> ``YYYY-MM-DDTHH:MM:SS``; epoch seconds/ms/µs -> UTC ISO; else None."""
    if isinstance(value, str):
        match = _ISO.match(value)
        return (match.group(1) + ("T" + match.group(2) if match.group(2) else "")) if match else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 1e8 < value < 1e17:
        seconds = value / 1e6 if value > 1e14 else value / 1e3 if value > 1e11 else float(value)
        return datetime.fromtimestamp(seconds, UTC).replace(tzinfo=None).isoformat(timespec="milliseconds")
    return None


def field_value(record: Any, path: Sequence[str]) -> Any:
    for part in path:
        if isinstance(record, dict):
            record = record.get(part)
        elif isinstance(record, list) and part.isdigit() and int(part) < len(record):
            record = record[int(part)]
        else:
            return None
    return record


def _scalar(value: Any) -> str | float | int | None:
    if value is None or (isinstance(value, (str, int, float)) and not isinstance(value, bool)):
        return value
    return orjson.dumps(value).decode()


class JsonlTable(log_ops.RecordTable):
    unit = "records"
    reader = "jsonl"

    def __init__(self, parsed: Parsed) -> None:
        self.parsed = parsed
        self.numbers: list[int] = parsed.data["numbers"]
        self.values: list[Any] = parsed.data["values"]
        self.keys: Counter[str] = parsed.data["keys"]
        self.time_key: str | None = parsed.data["time_key"]
        self.paths: dict[str, tuple[str, ...]] = parsed.data["paths"]
        self.skipped = int(parsed.data["bad"])

    def __len__(self) -> int:
        return len(self.numbers)

    def lines(self, i: int) -> log_lines.Record:
        return self.numbers[i], self.numbers[i]

    def text(self, i: int) -> str:
        return log_lines.line_text(self.parsed, self.numbers[i])

    def time(self, i: int) -> str | None:
        return to_time(self.values[i].get(self.time_key)) if isinstance(self.values[i], dict) else None

    def time_field(self) -> str | None:
        return self.time_key

    def getter(self, name: str) -> log_ops.Getter:
        values = self.values
        if name.startswith("$"):
            try:
                compiled = json_query.compile_query(name)
            except (jsonpath.JSONPathError, ValueError, OverflowError) as err:
                raise BadOperation(f"bad JSONPath {name!r}: {str(err).splitlines()[0]}", hint=self._hint()) from None
            clock = PatternClock()  # one regex budget for this field over all records

            def first(i: int) -> str | float | int | None:
                with json_query.clocked(clock):
                    match = compiled.match(values[i])
                return _scalar(match.obj) if match else None

            return first
        path = self.paths.get(name) or tuple(name.split("."))
        if path[0] not in self.keys:
            raise BadOperation(f"no record has the field {name!r}", hint=self._hint())
        return lambda i: _scalar(field_value(values[i], path))

    def _hint(self) -> str:
        return "fields (dotted for nested, or JSONPath $.a.b): " + ", ".join(list(self.keys)[:20])


class JsonlReader(log_ops.RecordReader):
    """One JSON record a line: fields, time range, exact filters and counts."""

    name = "jsonl"
    extensions = frozenset({".jsonl", ".ndjson"})
    cost = CostProfile(parse_ms_per_mb=60.0, per_call_chars=120, full_view_ratio=0.95)

    def accepts(self, name: str, head: bytes) -> bool:
        return b"\x00" not in head

    def parse(self, source: ArtifactSource) -> Parsed:
        data = read_within(source, self.max_bytes, "JSONL", _RAW_HINT).removeprefix(b"\xef\xbb\xbf")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as err:
            raise UnsupportedArtifact(f"not UTF-8 at byte {err.start:,}", hint=_RAW_HINT) from None
        lines = text.split("\n")
        if text.endswith("\n"):
            lines.pop()
        out, numbers, values, bad = _records(lines)
        if not values and bad:
            raise ReaderError(f"none of {bad:,} non-blank lines is a JSON record (first bad line: 1)",
                              hint=_RAW_HINT + ", or name it .json / .txt if it is not JSON Lines")
        full = "\n".join(out)
        survey = _Survey()
        survey.run(values)
        data_ = {"line_starts": log_lines.starts_of(full), "numbers": numbers, "values": values, "bad": bad,
                 "keys": survey.keys, "types": survey.types, "examples": survey.examples, "paths": survey.paths,
                 "time_key": _time_key(values, survey.keys)}
        return Parsed(full, "jsonl", data_)

    def preview(self, parsed: Parsed, max_chars: int) -> str:
        if max_chars <= 0:
            return ""
        out = BoundedLines(max_chars, cut_from=log_lines.CUT_FROM)
        table = JsonlTable(parsed)
        n, bad = len(table), parsed.data["bad"]
        bad_note = f", {bad:,} bad lines (not JSON, kept verbatim)" if bad else ""
        out.add(f"jsonl: {n:,} records in {log_lines.line_count(parsed):,} lines{bad_note}")
        if table.time_key:
            times = sorted(t for t in (table.time(0), table.time(n - 1)) if t)
            if times:
                out.add(f"time field {table.time_key}: {times[0]} .. {times[-1]}")
        surveyed = min(n, SURVEY)
        keys = BoundedLines(out.room() * 11 // 20, cut_from=log_lines.CUT_FROM)
        keys.add(f"keys (records holding them, of the first {surveyed:,}):")
        types: dict[str, Counter[str]] = parsed.data["types"]
        examples: dict[str, str] = parsed.data["examples"]
        for key, count in table.keys.most_common(40):
            shown = "|".join(t for t, _ in types[key].most_common(3)) + examples.get(key, "")
            if not keys.add(f"  {key}: {shown} ({count:,})"):
                break
        out.extend(keys)
        ask = "ask: @filter&where=field:value | @count&by=field | @distinct=field | @sum=field | @focus=L1-20"
        records = BoundedLines(out.room() - len(ask) - 1, cut_from=log_lines.CUT_FROM)
        if records.add("first records:"):
            log_lines.sample_lines(records, parsed, table.numbers[:3], width=300)
        out.extend(records)
        out.add(ask)
        return out.text()

    def table(self, parsed: Parsed) -> log_ops.RecordTable:
        return JsonlTable(parsed)


def _records(lines: list[str]) -> tuple[list[str], list[int], list[Any], int]:
    """Full-view lines, the line numbers and values of the records, and the bad-line count."""
    out: list[str] = []
    numbers: list[int] = []
    values: list[Any] = []
    bad = 0
    for number, line in enumerate(lines, 1):
        line = line.removesuffix("\r")
        if not line.strip():
            out.append(line)
            continue
        try:
            value = orjson.loads(line)
            out.append(orjson.dumps(value).decode())
        except (orjson.JSONDecodeError, orjson.JSONEncodeError):
            out.append(line)
            bad += 1
            continue
        numbers.append(number)
        values.append(value)
    return out, numbers, values, bad


class _Survey:
    """Dotted keys (two levels) of the first SURVEY records: how many hold each, types, an example."""

    def __init__(self) -> None:
        self.keys: Counter[str] = Counter()
        self.types: dict[str, Counter[str]] = {}
        self.examples: dict[str, str] = {}
        self.paths: dict[str, tuple[str, ...]] = {}

    def run(self, values: list[Any]) -> None:
        for value in values[:SURVEY]:
            if not isinstance(value, dict):
                continue
            for key, child in value.items():
                self._note((key,), child)
                if isinstance(child, dict) and len(child) <= 50:
                    for sub, grandchild in child.items():
                        self._note((key, sub), grandchild)

    def _note(self, path: tuple[str, ...], value: Any) -> None:
        key = ".".join(path)
        self.keys[key] += 1
        if key not in self.types:
            self.types[key] = Counter()
            self.paths[key] = path
            example = sample(value)
            if example:
                self.examples[key] = " e.g. " + example
        self.types[key][kind(value).split("{")[0].split("[")[0]] += 1


def _time_key(values: list[Any], keys: Counter[str]) -> str | None:
    first = next((v for v in values if isinstance(v, dict)), {})
    for key in TIME_KEYS:
        if key in keys and to_time(first.get(key)) is not None:
            return key
    return None
