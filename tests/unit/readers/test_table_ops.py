"""Exact operations of the Tables Reader, checked against independent computations
(the csv module with math.fsum / statistics / Decimal, openpyxl for workbooks)."""

from __future__ import annotations

import csv
import io
import math
import statistics
from collections import Counter, defaultdict
from decimal import Decimal
from pathlib import Path

import openpyxl  # type: ignore[import-untyped]
import pytest

from readers.base import Batch, Parsed, ScopeMismatch, UnsupportedOperation
from readers.ops import BadOperation, Operation, build_operation, matches, parse_where
from readers.table.reader import TableReader
from tests.reader_conformance import MemorySource

DATA = Path(__file__).resolve().parents[4] / "shared" / "data"
COVID = DATA / "csv" / "datasets-covid-19"
SHEETS = DATA / "xlsx" / "sheetcopilot"
READER = TableReader()


def parse(name: str, data: bytes) -> Parsed:
    return READER.parse(MemorySource(name, data))


def run(parsed: Parsed, name: str, target: str | None = None, k: int | None = None, max_chars: int = 2000,
        **options: str) -> Batch:
    return READER.operate(parsed, build_operation(name, target, options, k), max_chars)


def text(batch: Batch) -> str:
    return "\n".join(item.text for item in batch.items)


def records(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"), newline="")))


def fmt(value: float) -> str:
    return f"{int(value):,}" if value == int(value) else f"{value:,.15g}"


@pytest.fixture(scope="module")
def world() -> Parsed:
    return parse("worldwide-aggregate.csv", (COVID / "worldwide-aggregate.csv").read_bytes())


def test_sum_is_exact_integer_sum(world: Parsed) -> None:
    rows = records(COVID / "worldwide-aggregate.csv")
    batch = run(world, "sum", "confirmed")  # header names are case-insensitive
    expected = sum(int(r["Confirmed"]) for r in rows)
    assert f"sum(Confirmed) = {expected:,} (exact integer sum" in text(batch)
    item = batch.items[0]
    assert item.anchor.char_start == item.anchor.char_end == 0
    assert item.anchor.label == f"col:Confirmed R1-{len(rows)}"
    assert batch.scope.units_scanned == len(rows) and batch.scope.method == "exact" and batch.scope.unit == "rows"


def test_mean_min_max_skip_empty_cells(world: Parsed) -> None:
    values = [float(r["Increase rate"]) for r in records(COVID / "worldwide-aggregate.csv") if r["Increase rate"]]
    mean = text(run(world, "mean", "Increase rate"))
    assert f"= {fmt(math.fsum(values) / len(values))} " in mean and "1 empty" in mean
    assert abs(statistics.fmean(values) - math.fsum(values) / len(values)) < 1e-9
    assert f"max(Increase rate) = {fmt(max(values))} " in text(run(world, "max", "#5"))
    assert f"min(Increase rate) = {fmt(min(values))} " in text(run(world, "min", "#5"))


def test_where_filters_and_count(world: Parsed) -> None:
    rows = records(COVID / "worldwide-aggregate.csv")
    conditions = parse_where("Deaths>=100000, Date~^2020-0[4-6]")
    wanted = [r for r in rows if all(matches(c, r[c.field]) for c in conditions)]
    batch = run(world, "count", where="Deaths>=100000, Date~^2020-0[4-6]")
    assert text(batch).startswith(f"count = {len(wanted):,} rows (of {len(rows):,} processed)")
    summed = run(world, "sum", "Deaths", where="Deaths>=100000, Date~^2020-0[4-6]")
    assert f"= {sum(int(r['Deaths']) for r in wanted):,} " in text(summed)
    assert "filter Deaths >= 100000 and Date ~ ^2020-0[4-6]" in summed.scope.note


def test_decimal_sum_is_exact_and_says_so() -> None:
    parsed = parse("d.csv", b"x\n" + b"0.1\n" * 10 + b"n/a\n\n0.3\n")
    out = text(run(parsed, "sum", "x"))
    assert sum([0.1] * 10 + [0.3]) != 1.3
    assert out.startswith(f"sum(x) = {sum([Decimal('0.1')] * 10 + [Decimal('0.3')])} (exact decimal sum")
    assert "1 non-numeric skipped" in out  # the blank line is not a row; n/a is skipped


def test_formatted_numbers_use_fsum() -> None:
    parsed = parse("m.csv", b'amount\n"1,000.5"\n$2.25\n1e3\n')
    out = text(run(parsed, "sum", "amount"))
    assert out.startswith(f"sum(amount) = {fmt(math.fsum([1000.5, 2.25, 1000.0]))} (math.fsum")


def test_group_by_and_distinct_against_plain_python() -> None:
    path = COVID / "reference.csv"
    rows = records(path)
    parsed = parse("reference.csv", path.read_bytes())
    groups: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if r["Population"]:
            groups[r["Country_Region"]].append(float(r["Population"]))
    totals = sorted(((math.fsum(v), k) for k, v in groups.items()), key=lambda p: (-p[0], p[1]))
    batch = run(parsed, "sum", "Population", k=3, by="Country_Region")
    lines = text(batch).split("\n")
    countries = {r["Country_Region"] for r in rows}
    assert lines[0].startswith(f"sum(Population) by Country_Region: {len(countries):,} groups")
    assert lines[1:] == [f"{k}\t{fmt(v)}" for v, k in totals[:3]]
    counts = Counter(r["iso3"] for r in rows)
    top = text(run(parsed, "distinct", "iso3", k=2)).split("\n")
    assert top[0].startswith(f"distinct(iso3) = {len(counts):,} distinct values")
    assert top[1:] == [f"{v}\t{n:,}" for v, n in counts.most_common(2)]


def test_rows_projection_is_bounded_and_flagged(world: Parsed) -> None:
    rows = records(COVID / "worldwide-aggregate.csv")
    small = run(world, "rows", "2-3", cols="date,#3")
    assert text(small) == "\n".join(
        ["row\tDate\tRecovered"] + [f"{i}\t{rows[i - 1]['Date']}\t{rows[i - 1]['Recovered']}" for i in (2, 3)]
    )
    assert small.items[0].anchor.label == "R2-3"
    big = run(world, "rows", "1-816", max_chars=300)
    assert sum(len(item.text) for item in big.items) <= 300
    assert any(flag.startswith("results-truncated") and "of 816" in flag for flag in big.flags)


def test_results_never_exceed_max_chars(world: Parsed) -> None:
    for limit in (20, 60, 200):
        for op in ("sum", "distinct"):
            batch = run(world, op, "Date", max_chars=limit)
            assert sum(len(item.text) for item in batch.items) <= limit


def test_bad_column_names_the_closest() -> None:
    parsed = parse("reference.csv", (COVID / "reference.csv").read_bytes())
    with pytest.raises(BadOperation) as info:
        run(parsed, "sum", "Populaton")
    assert "Population" in info.value.hint
    with pytest.raises(BadOperation):
        run(parsed, "sum", "#99")
    with pytest.raises(BadOperation):
        run(parsed, "sum", "Population", sheet="Sales")
    with pytest.raises(BadOperation):
        run(parsed, "rows", "5000-6000")
    with pytest.raises(UnsupportedOperation):
        READER.operate(parsed, Operation("path", "$.x"), 500)


def test_xlsx_sum_against_openpyxl_with_cell_range_provenance() -> None:
    data = (SHEETS / "SummerSales.xlsx").read_bytes()
    sheet = openpyxl.load_workbook(io.BytesIO(data), data_only=True).worksheets[0]
    header = [c.value for c in sheet[1]]
    col = header.index("Revenue ($)")
    values = [row[col] for row in sheet.iter_rows(min_row=2, values_only=True) if row[col] is not None]
    parsed = parse("SummerSales.xlsx", data)
    batch = run(parsed, "sum", "revenue ($)")
    expected = sum(Decimal(repr(float(v))) for v in values)
    assert f"sum(Revenue ($)) = {expected:,} (exact decimal sum" in text(batch)
    letter = openpyxl.utils.get_column_letter(col + 1)
    assert batch.items[0].anchor.label == f"Sheet1!{letter}2:{letter}{sheet.max_row}"
    assert text(run(parsed, "sum", letter)) == text(batch)  # Excel letter reference
    assert READER.focus(parsed, batch.items[0].anchor.label).items


def test_xlsx_sheet_choice_is_stated() -> None:
    parsed = parse("GDPBreakdown.xlsx", (SHEETS / "GDPBreakdown.xlsx").read_bytes())
    first = run(parsed, "count")
    assert "the first of 2" in first.scope.note
    second = run(parsed, "distinct", "#1", sheet="sheet2")
    book = openpyxl.load_workbook(SHEETS / "GDPBreakdown.xlsx", read_only=True)
    names = [r[0] for r in book["Sheet2"].iter_rows(min_row=2, values_only=True) if r[0]]
    assert text(second).startswith(f"distinct(Chosen Countries) = {len(set(names))} distinct values")
    with pytest.raises(ScopeMismatch) as info:
        run(parsed, "count", sheet="Nope")
    assert "Sheet2" in info.value.hint


def test_short_rows_count_as_empty_and_group_counts() -> None:
    data = b"team,player,score\nred,ann,3\nblue,bob\nred,cy,4\nred,ann,5\nblue,dee,x\n"
    rows = list(csv.reader(io.StringIO(data.decode())))[1:]
    parsed = parse("g.csv", data)
    out = text(run(parsed, "sum", "score"))
    assert out.startswith("sum(score) = 12 (exact integer sum; 3 numeric cells of 5 matched rows; ")
    assert "1 non-numeric skipped, 1 empty" in out
    per_team = Counter(r[0] for r in rows)
    assert text(run(parsed, "count", by="team")).split("\n")[1:] == [f"{t}\t{n}" for t, n in per_team.most_common()]
    players: dict[str, set[str]] = defaultdict(set)
    for r in rows:
        players[r[0]].add(r[1])
    distinct = text(run(parsed, "distinct", "player", by="team")).split("\n")
    assert distinct[1:] == [f"{t}\t{len(p)}" for t, p in sorted(players.items(), key=lambda kv: (-len(kv[1]), kv[0]))]
    means = text(run(parsed, "mean", "score", by="team")).split("\n")
    assert means[0].endswith("1 non-numeric cells skipped; top 2 by value:")
    assert means[1:] == ["red\t4", "blue\tn/a"]


def test_the_scaled_sum_is_the_decimal_sum_wherever_it_answers() -> None:
    """A cold @sum over a million plain decimals must stay within 1 s (issue 27): the integer path gives
    exactly what the Decimal sum gives (value, trailing zeros, method, mean), and declines what it cannot."""
    import random

    import numpy as np

    from readers.table.operations import exact_sum, scaled_sum

    rng = random.Random(7)
    for places in (0, 1, 2, 5, 9):
        cells = [f"{rng.uniform(-1e6, 1e6):.{places}f}" for _ in range(2_000)] + ["", "+3", "-0", "7."]
        texts = [c for c in cells if c]
        nums = np.array(texts, dtype=np.float64)
        assert scaled_sum(cells, nums) == exact_sum(texts, nums), places
    for declined in (["1e5", "2"], ["12345678901234567.5", "1"], ["1.25", "x"]):
        numeric = [c for c in declined if c.replace(".", "").replace("e", "").isdigit()]
        assert scaled_sum(declined, np.array(numeric, dtype=np.float64)) is None, declined
