"""XLSX specifics of the Tables Reader: every sheetcopilot workbook against openpyxl,
sheets and anchors, formulas without cached values, and hostile archives."""

from __future__ import annotations

import io
import sys
import zipfile

import openpyxl  # type: ignore[import-untyped]
import pytest

from readers.base import ArtifactTooLarge, BadAnchor, Parsed, ReaderError, ReadIntent, UnsupportedArtifact
from readers.ops import build_operation
from readers.table.reader import TableReader
from tests.reader_conformance import MemorySource
from tests.unit.readers.test_table_reader import SHEETS, shared_strings_bomb, xlsx_lines

READER = TableReader()
WORKBOOKS = sorted(SHEETS.glob("*.xlsx"))


def parse(name: str, data: bytes) -> Parsed:
    return READER.parse(MemorySource(name, data))


def workbook(build: dict[str, list[list[object]]]) -> bytes:
    book = openpyxl.Workbook()
    book.remove(book.active)
    for name, rows in build.items():
        sheet = book.create_sheet(name)
        for row in rows:
            sheet.append(row)
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def test_every_sheetcopilot_workbook_matches_openpyxl() -> None:
    assert len(WORKBOOKS) >= 28
    for path in WORKBOOKS:
        data = path.read_bytes()
        assert parse(path.name, data).full_view.split("\n") == xlsx_lines(data), path.name


def test_openpyxl_fallback_gives_the_same_view(monkeypatch: pytest.MonkeyPatch) -> None:
    data = (SHEETS / "PricingTable.xlsx").read_bytes()
    fast = parse("PricingTable.xlsx", data).full_view
    monkeypatch.setitem(sys.modules, "python_calamine", None)  # import fails: openpyxl read-only
    assert parse("PricingTable.xlsx", data).full_view == fast


def test_sheets_anchors_and_quoted_names() -> None:
    data = workbook({"My Sales": [["region", "amount"], ["EU", 10], ["US", 20]], "Notes": [["text"], ["hello"]]})
    parsed = parse("book.xlsx", data)
    assert parsed.full_view == "## sheet: My Sales\nregion\tamount\nEU\t10\nUS\t20\n## sheet: Notes\ntext\nhello"
    assert READER.focus(parsed, "'My Sales'!R2").items[0].text == "US\t20"
    assert READER.focus(parsed, "sheet:notes").items[0].text == "## sheet: Notes\ntext\nhello"
    assert READER.focus(parsed, "'My Sales'!B2:B3").items[0].text == "EU\t10\nUS\t20"
    batch = READER.operate(parsed, build_operation("sum", "amount", {}, None), 500)
    assert batch.items[0].anchor.label == "'My Sales'!B2:B3" and "= 30 " in batch.items[0].text
    hit = READER.locate(parsed, ReadIntent("hello", ("hello",)), 500).items[0]
    assert hit.anchor.label == "Notes!R1" and hit.text == "hello" and "text" in (hit.anchor.heading or "")
    with pytest.raises(BadAnchor) as info:
        READER.focus(parsed, "Nope!R1")
    assert "sheet:My Sales" in info.value.hint


def test_formula_without_cached_value_is_flagged() -> None:
    data = workbook({"Calc": [["item", "price", "double"], ["a", 2, "=B2*2"], ["b", 3, "=B3*2"]]})
    parsed = parse("calc.xlsx", data)
    notes = parsed.data["sheets"][0].notes
    assert "2 formula cells (cached values shown)" in notes
    assert any(n.startswith("no-cached-value: 2 formula cells") and "C2, C3" in n for n in notes)
    assert "no-cached-value" in READER.preview(parsed, 2000)
    with_cache = parse("s.xlsx", (SHEETS / "EntireSummerSales.xlsx").read_bytes()).data["sheets"][0].notes
    assert "4,000 formula cells (cached values shown)" in with_cache
    assert not any("no-cached-value" in n for n in with_cache)


def test_preview_of_a_workbook_is_bounded_per_sheet() -> None:
    parsed = parse("GDPBreakdown.xlsx", (SHEETS / "GDPBreakdown.xlsx").read_bytes())
    text = READER.preview(parsed, 2000)
    assert text.startswith("workbook: 2 sheets (Sheet1, Sheet2)")
    assert "sheet Sheet1: 3,685 rows x 16 columns, header row" in text and "sheet Sheet2: 8 rows" in text
    assert "Country (#1, A): text" in text and "more columns" in text
    for limit in (120, 400, 2000):
        assert len(READER.preview(parsed, limit)) <= limit


def test_zip_bomb_and_broken_archives_are_refused() -> None:
    with pytest.raises(ArtifactTooLarge) as info:
        parse("bomb.xlsx", shared_strings_bomb())
    assert "sharedStrings.xml" in info.value.message and info.value.hint
    good = (SHEETS / "SummerSales.xlsx").read_bytes()
    flipped = bytearray(good)
    entry = zipfile.ZipFile(io.BytesIO(good)).getinfo("xl/worksheets/sheet1.xml")
    flipped[entry.header_offset + 30 + len(entry.filename) + 40] ^= 0xFF  # inside its compressed data
    for data in (bytes(flipped), good[:3000], b"PK\x03\x04junk"):
        with pytest.raises(ReaderError):
            parse("x.xlsx", data)
    plain = io.BytesIO()
    with zipfile.ZipFile(plain, "w") as zf:
        zf.writestr("word/document.xml", "<w/>")
    with pytest.raises(UnsupportedArtifact) as refused:
        parse("fake.xlsx", plain.getvalue())
    assert "xl/workbook.xml" in refused.value.message


def test_default_sheet_is_the_first_with_data_and_empty_sheets_are_named() -> None:
    data = workbook({"Cover": [], "Data": [["item", "qty"], ["a", 2], ["b", 5]], "Head": [["x", "y"]]})
    parsed = parse("e.xlsx", data)
    batch = READER.operate(parsed, build_operation("sum", "qty", {}, None), 500)
    assert "= 7 " in batch.items[0].text and batch.items[0].anchor.label == "Data!B2:B3"
    assert "sheet Data (the first with data rows of 3" in batch.scope.note
    assert "sheet Cover: 0 rows x 0 columns, empty" in READER.preview(parsed, 2000)
    with pytest.raises(ReaderError) as info:
        READER.operate(parsed, build_operation("count", None, {"sheet": "head"}, None), 500)
    assert "no data rows" in info.value.message
