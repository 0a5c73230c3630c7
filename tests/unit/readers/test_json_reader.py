"""The JSON and JSON Lines Readers: conformance, spans, JSONPath lookups, exact operations.

Exact results are checked against the json module and plain Python.
"""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from readers.base import BadAnchor, Batch, Parsed, ReaderError, ReadIntent
from readers.jsondata import query as json_query
from readers.jsondata.jsonl import JsonlReader
from readers.jsondata.reader import JsonReader
from readers.ops import BadOperation, Operation, parse_where
from tests.reader_conformance import MemorySource, ReaderConformance, Sample

_DATA = Path(__file__).resolve().parents[4] / "shared" / "data"
_OCTOKIT = _DATA / "json" / "octokit-fixtures"
_NGINX = _DATA / "logs" / "elastic-examples" / "nginxplus_json_logs.jsonl"


def result_lines(batch: Batch) -> list[str]:
    """The result lines of an exact result (one item: a head line, then one line per result)."""
    assert len(batch.items) == 1 and batch.items[0].anchor.char_start == batch.items[0].anchor.char_end
    return batch.items[0].text.split("\n")[1:]


def _fixture(name: str) -> bytes:
    return (_OCTOKIT / f"{name}.raw-fixture.json").read_bytes()


def _parse_json(name: str, data: bytes) -> Parsed:
    return JsonReader().parse(MemorySource(name, data))


class TestJsonConformance(ReaderConformance):
    reader = JsonReader()

    def samples(self) -> list[Sample]:
        return [
            Sample("get-root.json", _fixture("get-root"), "where is the code search url"),
            Sample("paginate.json", _fixture("paginate-issues"), "issue title; rate limit remaining",
                   ("issue title", "rate limit remaining")),
        ]

    def malformed(self) -> list[tuple[str, bytes]]:
        return [
            ("bad.json", b'{"a": 1,\n "b": }'),
            ("deep.json", b"[" * 100_000 + b"]" * 100_000),
            ("deep300.json", b"[" * 300 + b"]" * 300),
            ("latin.json", '{"a": "caf\u00e9"}'.encode("latin-1")),
            ("empty.json", b""),
        ]

    def operation_samples(self) -> list[tuple[Sample, Operation]]:
        paginate = self.samples()[1]
        return [
            (paginate, Operation("path", "$[*].response[*].title")),
            (paginate, Operation("count", "$[*].response[*]")),
            (paginate, Operation("distinct", "$[*].status")),
            (paginate, Operation("sum", "$[*].response[*].number")),
            (paginate, Operation("mean", "$[*].response[*].comments")),
            (paginate, Operation("max", "$[*].response[*].number")),
        ]

    def check_faithful(self, sample: Sample, parsed: Parsed) -> None:
        assert json.loads(parsed.full_view) == json.loads(sample.data)
        assert parsed.full_view == json.dumps(json.loads(sample.data), separators=(",", ":"), ensure_ascii=False)


class TestJsonlConformance(ReaderConformance):
    reader = JsonlReader()

    def samples(self) -> list[Sample]:
        head = b"".join(_NGINX.read_bytes().splitlines(keepends=True)[:40])
        small = b'{"a": 1, "b": "red apple"}\n\nnot json\n{"a": 2, "b": "green pear"}\n'
        return [Sample("nginx.jsonl", head, "unhealthy upstream peers"), Sample("small.ndjson", small, "pear")]

    def malformed(self) -> list[tuple[str, bytes]]:
        return [("bad.jsonl", b"not json\nnor this\n"), ("latin.jsonl", '{"a": "caf\u00e9"}'.encode("latin-1"))]

    def operation_samples(self) -> list[tuple[Sample, Operation]]:
        nginx, small = self.samples()
        return [
            (nginx, Operation("filter", "upstream", where=parse_where("connections.active>=1"), rows=(2, 30))),
            (nginx, Operation("count", by="connections.active")),
            (nginx, Operation("sum", "requests.total", by="connections.active")),
            (nginx, Operation("mean", "requests.total", where=parse_where("connections.idle>0"))),
            (nginx, Operation("distinct", "connections.active", since="2015-10-01")),
            (small, Operation("count", "pear|apple", where=parse_where("a>=1"))),
        ]

    def check_faithful(self, sample: Sample, parsed: Parsed) -> None:
        source = sample.data.decode().rstrip("\n").split("\n")
        view = parsed.full_view.split("\n")
        assert len(view) == len(source)
        for ours, theirs in zip(view, source, strict=True):
            try:
                assert json.loads(ours) == json.loads(theirs)
            except json.JSONDecodeError:
                assert ours == theirs


# -- JSON: spans, focus, path --------------------------------------------------------


def _walk(value: Any, parts: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], Any]]:
    out = [(parts, value)]
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
    for key, child in children:
        out.extend(_walk(child, (*parts, key)))
    return out


def _jsonpath(parts: tuple[Any, ...]) -> str:
    """An independent (bracket-only) JSONPath for a path."""
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else "[" + json.dumps(p) + "]" for p in parts)


@pytest.mark.parametrize("name", ["get-root", "branch-protection", "errors"])
def test_focus_returns_exact_member_slices(name: str) -> None:
    data = _fixture(name)
    parsed = _parse_json(f"{name}.json", data)
    nodes = _walk(json.loads(data))
    for parts, value in nodes[1 :: max(1, len(nodes) // 60)]:
        batch = JsonReader().focus(parsed, _jsonpath(parts))
        assert len(batch.items) == 1
        item = batch.items[0]
        assert parsed.full_view[item.anchor.char_start : item.anchor.char_end] == item.text
        if isinstance(parts[-1], str):
            assert json.loads("{" + item.text + "}") == {parts[-1]: value}
        else:
            assert json.loads(item.text) == value
        assert JsonReader().focus(parsed, item.anchor.label).items[0].text == item.text


def test_path_values_and_aggregates_match_python() -> None:
    data = _fixture("paginate-issues")
    doc = json.loads(data)
    parsed = _parse_json("p.json", data)
    numbers = [(i, j, issue["number"]) for i, rec in enumerate(doc) if isinstance(rec["response"], list)
               for j, issue in enumerate(rec["response"]) if isinstance(issue, dict) and "number" in issue]
    assert numbers
    batch = JsonReader().operate(parsed, Operation("path", "$[*].response[*].number"), 100_000)
    assert batch.items[0].text.startswith(f"{len(numbers):,} matches")
    got = [(item.anchor.label, item.text) for item in batch.items[1:]]
    assert got == [(f"$[{i}].response[{j}].number", f"$[{i}].response[{j}].number = {n}") for i, j, n in numbers]
    assert not batch.flags
    total = result_lines(JsonReader().operate(parsed, Operation("sum", "$[*].response[*].number"), 2000))
    assert total == [f"sum($[*].response[*].number) = {sum(n for _, _, n in numbers):,}"]
    count = JsonReader().operate(parsed, Operation("count", "$[*].response[*]"), 2000).items[0].text
    children = sum(len(r["response"]) for r in doc if isinstance(r["response"], (list, dict)))  # [*] opens both
    assert count.startswith(f"{children:,} matches")
    statuses = result_lines(JsonReader().operate(parsed, Operation("distinct", "$[*].status"), 2000))
    expected = sorted({s: sum(r["status"] == s for r in doc) for s in {r["status"] for r in doc}}.items(),
                      key=lambda kv: -kv[1])
    assert statuses == [f"{s}\t{n:,}" for s, n in expected]


def test_path_results_are_bounded_and_flagged() -> None:
    parsed = _parse_json("p.json", _fixture("paginate-issues"))
    batch = JsonReader().operate(parsed, Operation("path", "$[*].response"), 300)
    assert "results-truncated" in batch.flags
    assert sum(len(i.text) for i in batch.items) <= 300 + len(batch.items)
    with pytest.raises(BadOperation):
        JsonReader().operate(parsed, Operation("path", "$[?"), 300)
    with pytest.raises(BadOperation):
        JsonReader().operate(parsed, Operation("count", "$[*]", where=parse_where("a:1")), 300)


def test_recursive_descent_is_refused_on_big_documents(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed = _parse_json("p.json", _fixture("get-root"))
    assert JsonReader().operate(parsed, Operation("count", "$..*"), 300).items
    monkeypatch.setattr(json_query, "DESCENT_LIMIT", 100)
    with pytest.raises(BadOperation, match="recursive descent"):
        JsonReader().operate(parsed, Operation("count", "$..*"), 300)


def test_invalid_json_says_where_and_suggests_raw() -> None:
    with pytest.raises(ReaderError) as info:
        _parse_json("bad.json", b'{\n  "a": 1,\n  "b": tru\n}')
    assert "line 3" in info.value.message and "@raw" in info.value.hint
    with pytest.raises(ReaderError) as lines:
        _parse_json("lines.json", b'{"a": 1}\n{"a": 2}\n')
    assert "JSON Lines" in lines.value.hint


def test_deep_nesting_is_refused_quickly() -> None:
    started = time.monotonic()
    for depth in (300, 5_000, 100_000):
        with pytest.raises(ReaderError):
            _parse_json("deep.json", b'{"a":' * depth + b"1" + b"}" * depth)
    assert time.monotonic() - started < 2.0


def test_deep_but_renderable_nesting_has_spans() -> None:
    depth = 200
    parsed = _parse_json("deep.json", b'{"a":' * depth + b'"needle"' + b"}" * depth)
    batch = JsonReader().locate(parsed, ReadIntent("needle", ("needle",)), 500)
    assert batch.items and '"needle"' in batch.items[0].text
    assert JsonReader().focus(parsed, "$" + ".a" * depth).items[0].text == '"a":"needle"'


def test_scope_restricts_locate_and_bad_anchor_hints() -> None:
    parsed = _parse_json("p.json", _fixture("paginate-issues"))
    intent = ReadIntent("issue title", ("issue title",), scope="$[15]")
    batch = JsonReader().locate(parsed, intent, 800)
    whole = JsonReader().focus(parsed, "$[15]").items[0].anchor
    assert batch.items
    assert all(whole.char_start <= i.anchor.char_start and i.anchor.char_end <= whole.char_end for i in batch.items)
    with pytest.raises(BadAnchor) as info:
        JsonReader().focus(parsed, "$.nothing")
    assert "list of 20 items" in info.value.hint


# -- JSONL ---------------------------------------------------------------------------


def _nginx() -> tuple[Parsed, list[dict[str, Any]]]:
    data = _NGINX.read_bytes()
    return JsonlReader().parse(MemorySource("nginx.jsonl", data)), [json.loads(line) for line in data.splitlines()]


def _iso_ms(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def test_jsonl_filter_and_time_bounds_match_python() -> None:
    parsed, records = _nginx()
    since, until = "2015-10-31T00:10", "2015-10-31T00:20"
    expected = [n for n, r in enumerate(records, 1)
                if r["connections"]["active"] >= 3 and since <= _iso_ms(r["timestamp"])[:16] <= until]
    op = Operation("filter", where=parse_where("connections.active>=3"), since=since, until=until)
    batch = JsonlReader().operate(parsed, op, 30_000)
    assert batch.items[0].text.startswith(f"{len(expected):,} matching of 500 records")
    shown = [i.anchor.label for i in batch.items[1:]]
    assert shown and shown == [f"L{n}" for n in expected[: len(shown)]]
    for item in batch.items[1:]:
        assert parsed.full_view[item.anchor.char_start : item.anchor.char_end] == item.text


def test_jsonl_count_by_and_aggregates_match_python() -> None:
    parsed, records = _nginx()
    batch = JsonlReader().operate(parsed, Operation("count", by="connections.active"), 5000)
    counts: dict[int, int] = {}
    for r in records:
        counts[r["connections"]["active"]] = counts.get(r["connections"]["active"], 0) + 1
    got = dict(line.split("\t") for line in result_lines(batch))
    assert got == {str(k): f"{v:,}" for k, v in counts.items()}
    mean = result_lines(JsonlReader().operate(parsed, Operation("max", "requests.total"), 500))[0]
    assert mean == f"max(requests.total) = {max(r['requests']['total'] for r in records):,}"
    with pytest.raises(BadOperation):
        JsonlReader().operate(parsed, Operation("sum", "no_such_field"), 500)


def test_jsonl_bad_lines_are_kept_counted_and_numbered() -> None:
    data = b'{"k": "a", "n": 1}\n{broken\n\n{"k": "b", "n": 2}\n'
    parsed = JsonlReader().parse(MemorySource("x.jsonl", data))
    assert parsed.full_view.split("\n") == ['{"k":"a","n":1}', "{broken", "", '{"k":"b","n":2}']
    assert "1 bad line" in JsonlReader().preview(parsed, 2000)
    assert JsonlReader().focus(parsed, "L4").items[0].text == '{"k":"b","n":2}'
    result = JsonlReader().operate(parsed, Operation("filter", where=parse_where("k:b")), 500)
    assert [i.anchor.label for i in result.items[1:]] == ["L4"]
    assert re.match(r"1 matching of 2 records", result.items[0].text)


def test_long_strings_are_cut_into_pieces_anchored_by_their_path() -> None:
    doc = {"title": "x", "body": "word " * 3000 + "needle here " + "word " * 3000}
    parsed = _parse_json("a.json", json.dumps(doc).encode())
    batch = JsonReader().locate(parsed, ReadIntent("needle", ("needle",)), 500)
    assert len(batch.items) == 1 and "needle" in batch.items[0].text and len(batch.items[0].text) <= 500
    region = JsonReader().focus(parsed, batch.items[0].anchor.label).items[0]
    assert json.loads("{" + region.text + "}") == {"body": doc["body"]}


def test_integers_past_64_bits_are_flagged() -> None:
    parsed = _parse_json("big.json", b'{"id": 123456789012345678901234567890, "ok": 1}')
    assert "beyond 64 bits" in JsonReader().preview(parsed, 2000)
    assert "beyond 64 bits" not in JsonReader().preview(_parse_json("small.json", b'{"id": 12345}'), 2000)
