"""Exact operations (readers.ops and the Readers' operate): review findings, one test group each.

1 overflow is said, never raised; 2 user regexes are time-bounded; 3 options a
Reader would not apply are refused (or applied); 4 an ordering against a number
never matches text; 5 quoting keeps backslashes; 6 numbers are strict, ``12%``
is 0.12, empty values are consistent; 7 the conformance suite runs ``operate``;
8 JSON aggregates are one item.
"""

from __future__ import annotations

import math
import time

import pytest

from readers import ops
from readers.base import Batch, Parsed, Reader
from readers.jsondata.jsonl import JsonlReader, JsonlTable
from readers.jsondata.reader import JsonReader
from readers.logs.reader import LogReader
from readers.ops import BadOperation, Condition, Operation, as_number, build_operation, matches, parse_where
from readers.table.reader import TableReader
from tests.reader_conformance import MemorySource, ReaderConformance

CATASTROPHIC = "(a|a)+$"
"""Exponential backtracking: ~2 s with ``re`` on 24 a's, twice that per extra pair."""


def parse(reader: Reader, name: str, data: bytes) -> Parsed:
    return reader.parse(MemorySource(name, data))


def run(reader: Reader, parsed: Parsed, name: str, target: str | None = None, **options: str) -> Batch:
    return reader.operate(parsed, build_operation(name, target, options, None), 3000)


def text(batch: Batch) -> str:
    return "\n".join(item.text for item in batch.items)


def table(data: bytes, name: str = "t.csv") -> Parsed:
    return parse(TableReader(), name, data)


def jsonl(lines: list[str]) -> Parsed:
    return parse(JsonlReader(), "r.jsonl", ("\n".join(lines) + "\n").encode())


# -- 1. overflow -----------------------------------------------------------------------


def test_format_number_and_fsum_say_overflow() -> None:
    assert "overflow" in ops.format_number(math.inf) and ops.format_number(-math.inf).startswith("-inf")
    assert ops.safe_fsum([1e308, 1e308]) == math.inf
    assert ops.safe_fsum([1e308, 1e308, -1e308]) == 1e308
    assert ops.safe_mean([1e308, 1e308]) == 1e308


def test_table_sum_and_mean_past_the_float_range() -> None:
    plain = table(b"x\n1e308\n1e308\n")
    assert "sum(x) = 2" in text(run(TableReader(), plain, "sum", "x"))  # exact Decimal: 2 followed by 308 zeros
    assert "mean(x) = 1e+308" in text(run(TableReader(), plain, "mean", "x"))
    formatted = table(b"x\n$1e308\n$1e308\nN/A\n")  # not plain: math.fsum path
    assert "overflow" in text(run(TableReader(), formatted, "sum", "x"))
    assert "mean(x) = 1e+308" in text(run(TableReader(), formatted, "mean", "x"))


def test_table_group_sum_past_the_float_range() -> None:
    parsed = table(b"g,x\na,1e308\na,1e308\nb,1\n")
    out = text(run(TableReader(), parsed, "sum", "x", by="g"))
    assert "a\tinf (overflow" in out and "b\t1" in out
    assert "a\t1e+308" in text(run(TableReader(), parsed, "mean", "x", by="g"))


def test_json_and_jsonl_sums_past_the_float_range() -> None:
    doc = parse(JsonReader(), "a.json", b"[1e308, 1e308]")
    assert "overflow" in text(run(JsonReader(), doc, "sum", "$[*]"))
    assert "mean($[*]) = 1e+308" in text(run(JsonReader(), doc, "mean", "$[*]"))
    records = jsonl(['{"v": 1e308, "g": "a"}', '{"v": 1e308, "g": "a"}'])
    assert "overflow" in text(run(JsonlReader(), records, "sum", "v"))
    assert "mean(v) = 1e+308" in text(run(JsonlReader(), records, "mean", "v"))


# -- 2. catastrophic regexes -----------------------------------------------------------


def test_catastrophic_pattern_is_refused_quickly() -> None:
    started = time.monotonic()
    with pytest.raises(BadOperation, match="too slow"):
        matches(Condition("name", "~", CATASTROPHIC), "a" * 24 + "!")
    assert time.monotonic() - started < 1.5


def test_catastrophic_where_and_filter_in_readers() -> None:
    cell = b"a" * 24 + b"!"
    with pytest.raises(BadOperation, match="too slow"):
        run(TableReader(), table(b"name\n" + cell + b"\n"), "count", where=f"name~{CATASTROPHIC}")
    log = parse(LogReader(), "x.log", b"2020-01-01 10:00:00 INFO " + cell + b"\n")
    with pytest.raises(BadOperation, match="too slow") as info:
        run(LogReader(), log, "filter", CATASTROPHIC)
    assert info.value.hint
    records = jsonl(['{"m": "' + cell.decode() + '"}'])
    with pytest.raises(BadOperation, match="too slow"):
        run(JsonlReader(), records, "count", CATASTROPHIC)


def test_catastrophic_patterns_inside_jsonpath() -> None:
    cell = "a" * 24 + "!"
    doc = parse(JsonReader(), "a.json", ('{"items": [{"n": "' + cell + '"}, {"n": "abc"}]}').encode())
    for query in (f"$.items[?search(@.n, '{CATASTROPHIC}')]", "$.items[?@.n =~ /(a|a)+$/]"):
        with pytest.raises(BadOperation, match="too slow"):
            run(JsonReader(), doc, "count", query)
    assert text(run(JsonReader(), doc, "count", "$.items[?@.n =~ /ABC/i]")).startswith("1 matches")
    assert text(run(JsonReader(), doc, "count", "$.items[?match(@.n, 'a.c')]")).startswith("1 matches")
    records = JsonlTable(jsonl(['{"m": "' + cell + '"}']))
    with pytest.raises(BadOperation, match="too slow"):
        records.getter(f"$[?search(@, '{CATASTROPHIC}')]")(0)


def test_the_budget_is_shared_by_all_searches_of_an_operation() -> None:
    clock = ops.PatternClock(0.0)
    with pytest.raises(BadOperation, match="too slow"):
        clock.search(ops.compile_pattern("a"), "a")
    assert ops.PatternClock().search(ops.compile_pattern("ABC"), "xabcx")  # still case-insensitive


def test_long_and_bad_patterns_are_refused() -> None:
    with pytest.raises(BadOperation, match="at most 500"):
        parse_where("x~" + "a" * 501)
    with pytest.raises(BadOperation, match="at most 500"):
        run(LogReader(), parse(LogReader(), "x.log", b"hello\n"), "filter", "a" * 501)
    with pytest.raises(BadOperation, match="bad regular expression"):
        parse_where("x~(unclosed")


# -- 3. options are applied or refused ------------------------------------------------------


def test_jsonl_sum_by_groups() -> None:
    parsed = jsonl(['{"rev": 5, "region": "EU"}', '{"rev": 7, "region": "US"}', '{"rev": 1, "region": "EU"}'])
    lines = run(JsonlReader(), parsed, "sum", "rev", by="region").items[0].text.split("\n")[1:]
    assert lines == ["US\t7", "EU\t6"]


def test_jsonl_and_log_rows_are_a_record_range() -> None:
    parsed = jsonl(['{"a": 1}', '{"a": 2}', '{"a": 3}'])
    assert text(run(JsonlReader(), parsed, "count", rows="1-2")).startswith("2 matching of 3 records")
    assert "sum(a) = 5" in text(run(JsonlReader(), parsed, "sum", "a", rows="2-9"))
    with pytest.raises(BadOperation):
        run(JsonlReader(), parsed, "count", rows="4-5")
    log = parse(LogReader(), "x.log", b"one\ntwo\nthree\n")
    assert text(run(LogReader(), log, "filter", "t", rows="2")).startswith("1 matching of 3 entries")


def test_options_a_reader_would_ignore_are_refused() -> None:
    csv = table(b"d,x\n2020-01-02,1\n")
    with pytest.raises(BadOperation, match="since"):
        run(TableReader(), csv, "count", since="2020-01-01")
    with pytest.raises(BadOperation, match="cols"):
        run(TableReader(), csv, "sum", "x", cols="d")
    with pytest.raises(BadOperation, match="by"):
        run(TableReader(), csv, "rows", "1", by="d")
    with pytest.raises(BadOperation, match="cols"):
        run(JsonReader(), parse(JsonReader(), "a.json", b"[1]"), "sum", "$[*]", cols="a")
    with pytest.raises(BadOperation, match="by"):
        run(JsonlReader(), jsonl(['{"a": 1}']), "filter", by="a")
    with pytest.raises(BadOperation, match="sheet"):
        run(LogReader(), parse(LogReader(), "x.log", b"one\n"), "count", sheet="x")


def test_require_options_names_what_is_supported() -> None:
    with pytest.raises(BadOperation) as info:
        ops.require_options(Operation("count", by="x", cols=("a",)), frozenset({"where"}), "demo")
    assert "&by=" in info.value.message and "&cols=" in info.value.message and "&where=" in info.value.hint
    ops.require_options(Operation("count", where=parse_where("a:1")), frozenset({"where"}), "demo")


# -- 4. orderings against numbers ------------------------------------------------------------


def test_ordering_against_a_number_skips_text_cells() -> None:
    parsed = table(b"price\n1e308\n1e308\nN/A\n50\n150\n")
    assert text(run(TableReader(), parsed, "count", where="price>100")).startswith("count = 3 rows")
    assert not matches(Condition("price", ">", "100"), "N/A")
    assert not matches(Condition("price", "<=", "100"), "zzz")
    assert matches(Condition("name", ">", "abc"), "abd")  # text against text still orders


# -- 5. quoting ------------------------------------------------------------------------------


def test_quoted_values_keep_backslashes() -> None:
    assert parse_where(r'name~"\d{1,3}"') == (Condition("name", "~", r"\d{1,3}"),)
    assert parse_where(r'name:"say \"hi\", a\\b"') == (Condition("name", "=", r'say "hi", a\b'),)
    assert matches(parse_where(r'code~"^\d{1,3}$"')[0], "123")


def test_an_unquoted_comma_says_to_quote() -> None:
    with pytest.raises(BadOperation, match="double-quoted"):
        parse_where("name~a{1,3}")


# -- 6. strict numbers, percent, empty values ------------------------------------------------------


def test_as_number_is_strict() -> None:
    for loose in ("1_000", "\u0661\u0662\u0663", "inf", "nan", "1,23", "1e999", "12 34", "--1"):
        assert as_number(loose) is None, loose
    assert as_number("1,234,567.5") == 1234567.5
    assert as_number("-$3.20") == -3.2
    assert as_number("+.5e1") == 5.0


def test_percent_is_a_fraction_on_both_sides() -> None:
    assert as_number("12%") == 0.12 and as_number("12.5%") == 0.125
    assert matches(Condition("rate", ">", "10%"), "12%")
    assert matches(Condition("rate", ">", "10%"), 0.12)  # an XLSX percent cell holds 0.12
    assert matches(Condition("rate", "=", "0.12"), "12%")
    assert "sum(r) = 0.3 " in text(run(TableReader(), table(b"r\n10%\n20%\n"), "sum", "r"))


def test_loose_numbers_are_not_summed() -> None:
    out = text(run(TableReader(), table(b"x\n1_000\n1\n"), "sum", "x"))
    assert out.startswith("sum(x) = 1 (") and "1 non-numeric skipped" in out


def test_empty_values_are_consistent() -> None:
    for op in (">", ">=", "<", "<=", "="):
        assert not matches(Condition("x", op, "5"), None)
        assert not matches(Condition("x", op, "5"), "  ")
    assert matches(Condition("x", "!=", "5"), None) and matches(Condition("x", "!=", "5"), "")
    assert matches(Condition("x", "=", ""), None) and not matches(Condition("x", "!=", ""), None)
    parsed = table(b"x,y\n,1\n3,2\n7,3\n")
    assert text(run(TableReader(), parsed, "count", where="x!=3")).startswith("count = 2 rows")
    assert text(run(TableReader(), parsed, "count", where="x<5")).startswith("count = 1 rows")


# -- 7. conformance ------------------------------------------------------------------------


def test_conformance_runs_operations_when_offered() -> None:
    assert ReaderConformance().operation_samples() == []
    assert hasattr(ReaderConformance, "test_offered_operations_are_exact_and_bounded")
    assert hasattr(ReaderConformance, "test_hostile_options_are_reader_errors")


# -- 8. JSON aggregates --------------------------------------------------------------------


def test_json_aggregates_are_one_item_and_paths_one_per_match() -> None:
    doc = parse(JsonReader(), "a.json", b'{"items": [{"n": 1}, {"n": 2}, {"n": "3"}]}')
    for name in ("sum", "mean", "min", "max", "count", "distinct"):
        batch = run(JsonReader(), doc, name, "$.items[*].n")
        assert len(batch.items) == 1, name
    assert text(run(JsonReader(), doc, "sum", "$.items[*].n")).split("\n") == ["3 matches of $.items[*].n; 3 numeric",
                                                                               "sum($.items[*].n) = 6"]
    path = run(JsonReader(), doc, "path", "$.items[*].n")
    labels = [item.anchor.label for item in path.items[1:]]
    assert labels == ["$.items[0].n", "$.items[1].n", "$.items[2].n"]


# -- the hostile-input sweep ------------------------------------------------------------


def test_numbers_past_the_float_range_in_a_filter_compare_as_infinity() -> None:
    parsed = table(b"id\n" + b"".join(str(i).encode() + b"\n" for i in range(1000)))
    assert text(run(TableReader(), parsed, "count", where="id<1e309")).startswith("count = 1,000 rows")
    assert text(run(TableReader(), parsed, "count", where="id>1e309")).startswith("count = 0 rows")


def test_jsonpath_number_literals_the_library_cannot_take_are_bad_operations() -> None:
    doc = parse(JsonReader(), "a.json", b'[{"id": 1, "price": 1.5}, {"id": 2, "price": 3.0}]')
    for target in ("$[?@.price>1e999]", "$[1e2]", "$[0:1e3]"):
        with pytest.raises(BadOperation):
            run(JsonReader(), doc, "count", target)


def test_a_projection_of_a_very_wide_table_is_cut_from_its_rows_and_bounded() -> None:
    header = ",".join(f"c{j}" for j in range(3000)).encode()
    row = ",".join(str(j) for j in range(3000)).encode()
    parsed = table(header + b"\n" + b"\n".join([row] * 50) + b"\n")
    started = time.monotonic()
    batch = run(TableReader(), parsed, "rows", "1-5")
    assert time.monotonic() - started < 1.0
    assert any(flag.startswith("columns-truncated") for flag in batch.flags)
    assert len(text(batch)) <= 1500 and len(batch.scope.note) < 1000
    picked = run(TableReader(), parsed, "rows", "2", cols="c2999,#1")
    assert text(picked).split("\n")[1] == "2\t2999\t0"


def test_a_column_name_shared_by_several_columns_is_ambiguous() -> None:
    parsed = table(b"a,a,A,b\n1,2,3,4\n5,6,7,8\n")
    with pytest.raises(BadOperation, match="2 columns are named 'a'") as info:
        run(TableReader(), parsed, "sum", "a")
    assert "#1, #2" in info.value.hint
    assert text(run(TableReader(), parsed, "sum", "A")).startswith("sum(A) = 10")  # the exact case is unique
    assert text(run(TableReader(), parsed, "sum", "#2")).startswith("sum(a) = 8")


def test_time_bounds_must_name_a_real_moment() -> None:
    parsed = jsonl(['{"time": "2015-05-17T10:05:03Z", "a": 1}'])
    for bad in ("2015-13-45", "2015-02-30", "2015-05-17T24:00"):
        with pytest.raises(BadOperation, match="cannot read the time"):
            run(JsonlReader(), parsed, "count", until=bad)
    assert text(run(JsonlReader(), parsed, "count", since="2016-02-29")).startswith("0 matching")


def test_jsonl_operations_say_which_lines_they_could_not_search() -> None:
    parsed = jsonl(['{"a": 1}', "not json but bad news", '{"a": 2}'])
    batch = run(JsonlReader(), parsed, "filter", "bad news")
    assert "1 line that is not a record was not searched" in batch.scope.note


def test_log_lines_without_timestamps_still_have_a_level() -> None:
    data = b"".join(b"ERROR job %d failed\nINFO job %d done\n" % (i, i) for i in range(300))
    parsed = parse(LogReader(), "jobs.log", data)
    assert text(run(LogReader(), parsed, "count", where="level:ERROR")).startswith("300 matching")
