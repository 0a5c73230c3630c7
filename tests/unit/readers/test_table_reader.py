"""The Tables Reader: conformance (CSV with and without header, XLSX) and CSV parsing.

Full views are checked against an independent reading (the csv module for
CSV, openpyxl for XLSX), never against the Reader itself.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import zipfile
from functools import cache
from pathlib import Path
from typing import Any

import openpyxl  # type: ignore[import-untyped]
import pytest

from readers.base import BadAnchor, Parsed, ReaderError, ReadIntent, UnsupportedArtifact
from readers.ops import Operation, parse_where
from readers.table.reader import TableReader
from tests.reader_conformance import MemorySource, ReaderConformance, Sample

DATA = Path(__file__).resolve().parents[4] / "shared" / "data"
ZIP_CODES = DATA / "csv" / "elastic-examples" / "zip_codes.csv"
COVID = DATA / "csv" / "datasets-covid-19"
SHEETS = DATA / "xlsx" / "sheetcopilot"
READER = TableReader()


def parse(name: str, data: bytes) -> Parsed:
    return READER.parse(MemorySource(name, data))


def tsv_cell(cell: str) -> str:
    return cell.replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def csv_lines(data: bytes, delimiter: str = ",") -> list[str]:
    """The expected full-view lines: every non-empty record, cells joined by tabs."""
    text = data.decode("utf-8-sig")
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    return ["\t".join(map(tsv_cell, row)) for row in reader if row]


def xlsx_cell(value: Any) -> str:
    """openpyxl's cached value as the full view should show it."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, (int, float)):
        return str(int(value)) if float(value).is_integer() else repr(float(value))
    if isinstance(value, dt.datetime):
        return value.date().isoformat() if value.time() == dt.time(0) else value.isoformat(sep=" ")
    return tsv_cell(str(value))


def xlsx_lines(data: bytes) -> list[str]:
    """The expected full view of a workbook, read independently with openpyxl."""
    book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    lines = []
    for sheet in book.worksheets:
        lines.append(f"## sheet: {sheet.title}")
        rows = [[xlsx_cell(v) for v in row] for row in sheet.iter_rows(values_only=True)]
        while rows and not any(rows[-1]):
            rows.pop()
        lines += ["\t".join(row).rstrip("\t") for row in rows]
    return lines


class TestTableConformance(ReaderConformance):
    reader = READER

    def samples(self) -> list[Sample]:
        return [
            Sample("reference.csv", (COVID / "reference.csv").read_bytes(), "population of Germany"),
            Sample("zip_codes.csv", ZIP_CODES.read_bytes(), "ADJUNTAS; HOLTSVILLE", ("ADJUNTAS", "HOLTSVILLE")),
            Sample("GDPBreakdown.xlsx", (SHEETS / "GDPBreakdown.xlsx").read_bytes(), "GDP of Argentina"),
        ]

    def malformed(self) -> list[tuple[str, bytes]]:
        good = (SHEETS / "SummerSales.xlsx").read_bytes()
        return [
            ("broken.xlsx", b"PK\x03\x04" + b"\x13garbage" * 200),
            ("truncated.xlsx", good[: len(good) // 2]),
            ("bomb.xlsx", shared_strings_bomb()),
            ("ragged.csv", b"a,b,c\n1\n1,2,3,4,5\n1,2\n1,2,3,4,5,6,7\nx\n1,2,3,4\n"),
            ("binary.csv", bytes(range(256)) * 8),
            ("open-quote.csv", b'a,b\n1,"never closed\n2,3\n'),
        ]

    def operation_samples(self) -> list[tuple[Sample, Operation]]:
        reference, _, book = self.samples()
        where = parse_where("Population>1000000, Combined_Key~^[A-C]")
        return [
            (reference, Operation("sum", "Population", where=where)),
            (reference, Operation("mean", "Population", by="Country_Region")),
            (reference, Operation("max", "Lat", rows=(10, 400))),
            (reference, Operation("count", where=where)),
            (reference, Operation("distinct", "Country_Region")),
            (reference, Operation("rows", cols=("Combined_Key", "Population"), rows=(1, 300))),
            (book, Operation("min", "2005", sheet="Sheet1", where=parse_where("Country:Argentina"))),
        ]

    def check_faithful(self, sample: Sample, parsed: Parsed) -> None:
        if sample.name.endswith(".xlsx"):
            expected = xlsx_lines(sample.data)
            assert parsed.full_view.split("\n") == expected
        else:
            assert parsed.full_view.split("\n") == csv_lines(sample.data)


@cache
def shared_strings_bomb() -> bytes:
    """A small zip whose sharedStrings.xml inflates to 140 MiB of one repeated byte."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("xl/workbook.xml", "<workbook/>")
        with zf.open("xl/sharedStrings.xml", "w") as handle:
            block = b"A" * (1 << 20)
            for _ in range(140):
                handle.write(block)
    return out.getvalue()


# -- CSV parsing ---------------------------------------------------------------------


def test_zip_codes_has_no_header_and_all_rows() -> None:
    data = ZIP_CODES.read_bytes()
    parsed = parse("zip_codes.csv", data)
    sheet = parsed.data["sheets"][0]
    records = [r for r in csv.reader(io.StringIO(data.decode(), newline="")) if r]
    assert not sheet.has_header
    assert sheet.n_rows == len(records) == 42_741
    assert sheet.columns[:3] == ("#1", "#2", "#3")
    assert parsed.full_view.split("\n", 1)[0] == "\t".join(records[0])  # "00501" keeps its zeros


@pytest.mark.parametrize("name", ["worldwide-aggregate.csv", "key-countries-pivoted.csv", "reference.csv"])
def test_covid_files_have_headers(name: str) -> None:
    data = (COVID / name).read_bytes()
    parsed = parse(name, data)
    header = next(csv.reader(io.StringIO(data.decode())))
    sheet = parsed.data["sheets"][0]
    assert sheet.has_header and list(sheet.columns) == header
    assert parsed.full_view.split("\n") == csv_lines(data)


def test_quoted_fields_with_delimiters_newlines_and_doubled_quotes() -> None:
    data = b'name,note,amount\r\n"Smith, J","said ""hi""\nthen left",3\r\nLee,plain,4\r\n'
    parsed = parse("q.csv", data)
    assert parsed.full_view.split("\n") == csv_lines(data)
    assert parsed.full_view.split("\n")[1] == 'Smith, J\tsaid "hi"\\nthen left\t3'
    assert parsed.data["sheets"][0].n_rows == 2


@pytest.mark.parametrize(("delimiter", "name"), [(";", "x.csv"), ("\t", "x.tsv"), ("|", "x.csv"), ("\t", "x.tab")])
def test_delimiter_is_sniffed(delimiter: str, name: str) -> None:
    rows = [["city", "pop", "note"]] + [[f"c{i}", str(i * 10), "a,b" if i % 2 else "x"] for i in range(30)]
    buffer = io.StringIO()
    csv.writer(buffer, delimiter=delimiter).writerows(rows)
    parsed = parse(name, buffer.getvalue().encode())
    assert parsed.data["sheets"][0].columns == ("city", "pop", "note")
    assert parsed.full_view.split("\n") == ["\t".join(r) for r in rows]


def test_header_over_typed_columns_and_headerless_text() -> None:
    assert parse("h.csv", b"region,revenue\nEU,10\nUS,20\nEU,5\n").data["sheets"][0].has_header
    headerless = parse("n.csv", b"EU,10\nUS,20\nEU,5\n").data["sheets"][0]
    assert not headerless.has_header and headerless.columns == ("#1", "#2")
    assert not parse("r.csv", b"a,x\nb,x\na,y\n").data["sheets"][0].has_header  # 'a' recurs below: data


def test_encodings() -> None:
    bom = parse("b.csv", "\ufeffname,qty\nCafé,1\n".encode())
    assert bom.full_view == "name\tqty\nCafé\t1" and bom.data["sheets"][0].columns[0] == "name"
    cp = parse("c.csv", "name,qty\nCafé “x”,1\n".encode("cp1252"))
    assert cp.full_view == "name\tqty\nCafé “x”\t1"
    assert any("cp1252" in note for note in cp.data["sheets"][0].notes)
    assert "cp1252" in READER.preview(cp, 2000)
    with pytest.raises(UnsupportedArtifact):
        parse("u.csv", b"name,qty\n\x81\x8d,1\n")  # undefined in cp1252: ambiguous


def test_accepts_by_extension_and_magic() -> None:
    assert READER.accepts("a.csv", b"x,y\n1,2\n")
    assert READER.accepts("a.TSV", b"x\ty\n")
    assert READER.accepts("b.xlsx", b"PK\x03\x04rest")
    assert READER.accepts("b.xlsm", b"PK\x03\x04rest")
    assert not READER.accepts("b.xlsx", b"not a zip")
    assert not READER.accepts("doc.docx", b"PK\x03\x04rest")
    assert not READER.accepts("a.csv", b"PK\x03\x04rest")
    assert not READER.accepts("a.csv", b"bin\x00ary")
    assert not READER.accepts("notes.txt", b"x,y\n")


def test_preview_names_columns_types_and_rows() -> None:
    parsed = parse("worldwide-aggregate.csv", (COVID / "worldwide-aggregate.csv").read_bytes())
    text = READER.preview(parsed, 2000)
    assert "816 rows x 5 columns, header row" in text
    assert "Date (#1): date" in text and "Confirmed (#2): int" in text and "Increase rate (#5): float" in text
    assert "R1\t2020-01-22\t557\t30\t17" in text
    wide = parse("w.csv", ("\n".join(",".join(f"v{r}x{c}" for c in range(300)) for r in range(50))).encode())
    for limit in (120, 500, 2000):
        assert len(READER.preview(wide, limit)) <= limit
    assert "more columns" in READER.preview(wide, 2000)


def test_locate_returns_row_groups_with_column_heading() -> None:
    parsed = parse("reference.csv", (COVID / "reference.csv").read_bytes())
    batch = READER.locate(parsed, ReadIntent("population of Germany", ("population of Germany",)), 800)
    assert batch.items and batch.scope.unit == "rows"
    top = max(batch.items, key=lambda it: it.score)
    assert "Germany" in top.text
    assert top.anchor.label.startswith("R") and "Population" in (top.anchor.heading or "")
    assert parsed.full_view[top.anchor.char_start : top.anchor.char_end] == top.text


def test_focus_and_scope_anchors() -> None:
    data = b"region,revenue\nEU,10\nUS,20\nEU,5\nAPAC,7\n"
    parsed = parse("s.csv", data)
    assert READER.focus(parsed, "R2-3").items[0].text == "US\t20\nEU\t5"
    assert READER.focus(parsed, "col:revenue R1-2").items[0].text == "EU\t10\nUS\t20"
    with pytest.raises(BadAnchor) as info:
        READER.focus(parsed, "R3-9")
    assert "R1-4" in info.value.hint
    scoped = READER.locate(parsed, ReadIntent("EU", ("EU",), scope="R2-4"), 500)
    assert [it.anchor.label for it in scoped.items] == ["R3-4"]  # the hit and the row after it
    assert scoped.items[0].text == "EU\t5\nAPAC\t7" and scoped.scope.units_scanned == 3
    with pytest.raises(ReaderError):
        READER.locate(parsed, ReadIntent("EU", ("EU",), scope="Z9"), 500)
