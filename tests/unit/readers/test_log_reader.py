"""The Log Reader: conformance, sniffing, and exact filters/counts checked with plain regexes."""

from __future__ import annotations

import re
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

from readers.base import Batch, Parsed, ReadIntent
from readers.logs.reader import LogReader
from readers.ops import BadOperation, Operation, parse_where
from tests.reader_conformance import MemorySource, ReaderConformance, Sample

_ROOT = Path(__file__).resolve().parents[3]
_LOGS = Path(__file__).resolve().parents[4] / "shared" / "data" / "logs" / "elastic-examples"
_APACHE = _LOGS / "apache_logs"
_CONTROLLER = _LOGS / "kafka0_controller.log.2016-12-19-16"
_STATE = _LOGS / "kafka0_state-change.log.2016-12-19-16"
_CLF = re.compile(r'^\S+ \S+ \S+ \[([^\]]+)\] "[^"]*" (\d{3}) (\S+)')


def result_lines(batch: Batch) -> list[str]:
    """The result lines of an exact result (one item: a head line, then one line per result)."""
    assert len(batch.items) == 1 and batch.items[0].anchor.char_start == batch.items[0].anchor.char_end
    return batch.items[0].text.split("\n")[1:]


class TestLogConformance(ReaderConformance):
    reader = LogReader()

    def samples(self) -> list[Sample]:
        return [
            Sample("apache_logs", _APACHE.read_bytes(), "requests for the kibana dashboard images"),
            Sample("kafka0_state-change.log.2016-12-19-16", _STATE.read_bytes(), "no replica online; leader election",
                   ("no replica online", "leader election")),
        ]

    def malformed(self) -> list[tuple[str, bytes]]:
        latin = "caf\u00e9 down".encode("latin-1")
        return [("app.log", b"2020-01-01 10:00:00 INFO ok\x00\x01binary"), ("app.log", latin)]

    def operation_samples(self) -> list[tuple[Sample, Operation]]:
        apache, state = self.samples()
        return [
            (apache, Operation("filter", r"\.php", where=parse_where("status>=400"))),
            (apache, Operation("count", by="status", since="2015-05-18T10", until="2015-05-18T12")),
            (apache, Operation("sum", "bytes", by="status", rows=(1, 5000))),
            (apache, Operation("max", "bytes", where=parse_where("method:GET"))),
            (apache, Operation("distinct", "method")),
            (state, Operation("filter", "leader", where=parse_where("level:TRACE"), k=3)),
        ]

    def check_faithful(self, sample: Sample, parsed: Parsed) -> None:
        assert parsed.full_view == sample.data.decode("utf-8")


def _parse(path: Path) -> Parsed:
    return LogReader().parse(MemorySource(path.name, path.read_bytes()))


def _lines(path: Path) -> list[str]:
    return path.read_text().rstrip("\n").split("\n")


def test_sniffs_logs_by_content_and_not_text_or_code() -> None:
    reader = LogReader()
    for path in (_APACHE, _CONTROLLER, _STATE):
        assert reader.accepts(path.name, path.read_bytes()[:8192]), path.name
        assert reader.accepts("renamed-without-extension", path.read_bytes()[:8192]), path.name
    for path in (_ROOT / "README.md", _ROOT / "readers" / "text.py", _LOGS / "nginxplus_json_logs.jsonl"):
        assert not reader.accepts(path.name.replace(".", "_"), path.read_bytes()[:8192]), path.name
    changelog = b"2023-05-01 released 1.0\n2023-04-01 released 0.9\n2023-03-01 first beta\n"
    assert not reader.accepts("CHANGES", changelog)
    assert not reader.accepts("x", b"\x00\x01\x02 binary")


def test_apache_filter_matches_a_python_regex_count() -> None:
    parsed = _parse(_APACHE)
    lines = _lines(_APACHE)
    expected = [n for n, line in enumerate(lines, 1)
                if re.search(r"\.php", line, re.I) and (m := _CLF.match(line)) and int(m.group(2)) >= 400]
    batch = LogReader().operate(parsed, Operation("filter", r"\.php", where=parse_where("status>=400")), 3000)
    assert batch.items[0].text.startswith(f"{len(expected):,} matching of 10,000 entries")
    shown = batch.items[1:]
    assert shown and [i.anchor.label for i in shown] == [f"L{n}" for n in expected[: len(shown)]]
    assert [i.text for i in shown] == [lines[n - 1] for n in expected[: len(shown)]]
    assert sum(len(i.text) for i in batch.items) <= 3000 + len(batch.items)
    assert ("results-truncated" in batch.flags) == (len(shown) < len(expected))


def test_apache_time_window_and_count_by_status() -> None:
    parsed = _parse(_APACHE)
    lines = _lines(_APACHE)
    fields = [m.groups() for line in lines if (m := _CLF.match(line))]
    stamps = [datetime.strptime(stamp, "%d/%b/%Y:%H:%M:%S %z") for stamp, _, _ in fields]
    lo, hi = datetime.fromisoformat("2015-05-18T10:00:00+00:00"), datetime.fromisoformat("2015-05-18T10:59:59+00:00")
    expected = sum(lo <= s <= hi for s in stamps)
    op = Operation("count", since="2015-05-18T10", until="2015-05-18T10")
    assert LogReader().operate(parsed, op, 500).items[0].text.startswith(f"{expected:,} matching")
    by_status = LogReader().operate(parsed, Operation("count", by="status"), 5000)
    statuses = Counter(status for _, status, _ in fields)
    assert result_lines(by_status) == [f"{s}\t{n:,}" for s, n in statuses.most_common()]
    total = LogReader().operate(parsed, Operation("sum", "bytes", where=parse_where("status:200")), 500)
    assert len(fields) == len(lines)
    expected_bytes = sum(int(size) for _, status, size in fields if status == "200" and size.isdigit())
    assert result_lines(total) == [f"sum(bytes) = {expected_bytes:,}"]


def test_kafka_levels_and_stack_traces() -> None:
    parsed = _parse(_STATE)
    lines = _lines(_STATE)
    levels = Counter(m.group(1) for line in lines if (m := re.match(r"\[[^\]]+\] (\w+) ", line)))
    batch = LogReader().operate(parsed, Operation("count", by="level"), 2000)
    assert result_lines(batch) == [f"{level}\t{n:,}" for level, n in levels.most_common()]
    errors = LogReader().operate(parsed, Operation("filter", where=parse_where("level:ERROR"), k=1), 20_000)
    first = next(n for n, line in enumerate(lines, 1) if "] ERROR " in line)
    trace_end = next(n for n in range(first + 1, len(lines) + 1) if lines[n - 1].startswith("[")) - 1
    assert errors.items[1].anchor.label == f"L{first}-{trace_end}"
    assert errors.items[1].text == "\n".join(lines[first - 1 : trace_end])


def test_focus_line_range_and_locate_anchors() -> None:
    parsed = _parse(_CONTROLLER)
    lines = _lines(_CONTROLLER)
    assert LogReader().focus(parsed, "L120-180").items[0].text == "\n".join(lines[119:180])
    batch = LogReader().locate(parsed, ReadIntent("controller epoch", ("controller epoch",), scope="L100-300"), 800)
    assert batch.items
    for item in batch.items:
        assert 100 <= (item.anchor.line_start or 0) <= (item.anchor.line_end or 0) <= 300
        assert parsed.full_view[item.anchor.char_start : item.anchor.char_end] == item.text


def test_bad_operations_are_explained() -> None:
    parsed = _parse(_CONTROLLER)
    for op in (Operation("count", by="nope"), Operation("filter", "(unclosed"), Operation("filter", since="yesterday")):
        with pytest.raises(BadOperation) as info:
            LogReader().operate(parsed, op, 500)
        assert info.value.hint
    preview = LogReader().preview(parsed, 2000)
    assert "570 entries" in preview and "2016-12-19T16:31:47.437" in preview


def test_time_bounds_need_timestamps() -> None:
    parsed = LogReader().parse(MemorySource("plain.log", b"started\nrunning\nstopped\n"))
    assert LogReader().operate(parsed, Operation("count", "run"), 500).items[0].text.startswith("1 matching of 3")
    with pytest.raises(BadOperation):
        LogReader().operate(parsed, Operation("count", since="2020-01-01"), 500)
