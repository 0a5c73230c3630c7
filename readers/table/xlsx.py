"""XLSX/XLSM parsing: zip bounds first, then cell values per sheet.

Before any spreadsheet library sees the bytes, the zip directory is checked
(entry count, total and per-entry uncompressed size, compression ratio,
sharedStrings.xml size) and every entry is inflated once with a running cap, so
a zip bomb, a lying size field, a truncated or corrupted archive is refused
with a ReaderError. Values come from python-calamine (Rust; ~0.5 s for 600k
cells where openpyxl read-only takes ~5 s), or from openpyxl read-only with
``data_only=True`` when calamine is not installed; both give the cached value
of a formula cell. Formula cells are counted by a scan of the sheet XML (bounded
by the checked sizes), and those without a cached value (shown empty) are
named in the sheet notes.
"""

from __future__ import annotations

import datetime as dt
import io
import re
import zipfile
import zlib
from itertools import zip_longest
from typing import Any
from xml.etree import ElementTree

import numpy as np

from readers.base import ArtifactTooLarge, ReaderError, UnsupportedArtifact
from readers.table.model import SheetSpec, col_letter, escape

MAX_ENTRIES = 10_000
MAX_TOTAL = 512 * 1024 * 1024
MAX_ENTRY = 256 * 1024 * 1024
MAX_SHARED_STRINGS = 128 * 1024 * 1024
MAX_RATIO = 200
MAX_CELLS = 20_000_000
_RATIO_FLOOR = 1024 * 1024  # small entries may compress as well as they like
_HINT = "read the original bytes with @raw, or export the sheet to CSV"
_CELL_REF = re.compile(rb'\br="([A-Z]{1,3}\d+)"')
_CACHED = re.compile(rb"<(?:\w+:)?v>[^<]|<(?:\w+:)?is>")
_CELL_END = re.compile(rb"</(?:\w+:)?c>")  # a formula cell is never self-closing
_FORMULA = re.compile(rb"<f[ >/]|<\w+:f[ >/]")
_ZIP_ERRORS = (zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError, NotImplementedError, RuntimeError)
_NS_REL = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}id"


def check_zip(data: bytes) -> tuple[zipfile.ZipFile, dict[str, bytes]]:
    """The archive, once it is a bounded, intact workbook, and the worksheet XML
    that holds formulas; ReaderError otherwise."""
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
        infos = zf.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as err:
        raise UnsupportedArtifact(f"not a readable xlsx (corrupted zip: {err})", hint=_HINT) from None
    names = {i.filename for i in infos}
    if "xl/workbook.xml" not in names:
        raise UnsupportedArtifact("a zip without xl/workbook.xml is not an xlsx workbook", hint=_HINT)
    _check_sizes(infos)
    return zf, _inflate_all(zf, infos)


def _check_sizes(infos: list[zipfile.ZipInfo]) -> None:
    total = sum(i.file_size for i in infos)
    if len(infos) > MAX_ENTRIES or total > MAX_TOTAL:
        raise ArtifactTooLarge(
            f"workbook expands to {total:,} bytes in {len(infos):,} entries (bound {MAX_TOTAL:,})", hint=_HINT
        )
    for info in infos:
        ratio = info.file_size / max(1, info.compress_size)
        too_big = info.file_size > (MAX_SHARED_STRINGS if info.filename.endswith("sharedStrings.xml") else MAX_ENTRY)
        if too_big or (info.file_size > _RATIO_FLOOR and ratio > MAX_RATIO):
            raise ArtifactTooLarge(
                f"{info.filename} expands to {info.file_size:,} bytes (ratio {ratio:,.0f}:1): refused as a zip bomb",
                hint=_HINT,
            )


def _inflate_all(zf: zipfile.ZipFile, infos: list[zipfile.ZipInfo]) -> dict[str, bytes]:
    """Inflate every entry with a running cap (catches lying sizes and bad CRCs);
    keep the worksheets that contain formulas."""
    budget = MAX_TOTAL
    kept: dict[str, bytes] = {}
    for info in infos:
        try:
            with zf.open(info) as handle:
                chunks = []
                while chunk := handle.read(1 << 20):
                    budget -= len(chunk)
                    if budget < 0:
                        raise ArtifactTooLarge("workbook inflates past its bound", hint=_HINT)
                    chunks.append(chunk)
            if info.filename.startswith("xl/worksheets/"):
                xml = b"".join(chunks)
                if (b"<f" in xml or b":f" in xml) and _FORMULA.search(xml):  # memchr-fast prefilter
                    kept[info.filename] = xml
        except _ZIP_ERRORS as err:
            raise UnsupportedArtifact(f"corrupted xlsx entry {info.filename}: {err}", hint=_HINT) from None
    return kept


def sheet_paths(zf: zipfile.ZipFile) -> dict[str, str]:
    """Sheet name -> worksheet XML path, from workbook.xml and its relationships."""
    try:
        book = ElementTree.fromstring(zf.read("xl/workbook.xml"))
        rels = ElementTree.fromstring(zf.read("xl/_rels/workbook.xml.rels"))
    except (KeyError, ElementTree.ParseError, LookupError, ValueError, *_ZIP_ERRORS):
        return {}  # the values still come from the spreadsheet library, which judges the file
    targets = {r.get("Id"): r.get("Target", "") for r in rels}
    paths = {}
    for node in book.iter():
        if node.tag.endswith("}sheet") and node.get("name") is not None:
            target = targets.get(node.get(_NS_REL), "").lstrip("/")
            paths[str(node.get("name"))] = target if target.startswith("xl/") else "xl/" + target
    return paths


def formula_report(xml: bytes | None) -> tuple[int, list[str]]:
    """(formula cells, refs of those without a cached value) in one sheet's XML."""
    if xml is None:
        return 0, []
    count, missing = 0, []
    for match in _FORMULA.finditer(xml):
        count += 1
        end = _CELL_END.search(xml, match.end())
        stop = end.start() if end else len(xml)
        if not _CACHED.search(xml, match.end(), stop):
            cell = xml.rfind(b"<c", 0, match.start())
            ref = _CELL_REF.search(xml, cell, match.start())
            missing.append(ref.group(1).decode() if ref else "?")
    return count, missing


def render(value: Any) -> str:
    """A cell value as full-view text (ints without '.0', floats shortest round-trip)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e16 else repr(value)
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ") if value.time() != dt.time(0) else value.date().isoformat()
    if isinstance(value, (dt.date, dt.time, dt.timedelta)):
        return value.isoformat() if not isinstance(value, dt.timedelta) else str(value)
    return escape(str(value))


def parse_xlsx(data: bytes) -> list[SheetSpec]:
    zf, formulas = check_zip(data)
    paths = sheet_paths(zf)
    try:
        grids = _calamine_grids(data)
    except ImportError:
        grids = _openpyxl_grids(data)
    specs = []
    for name, origin, rows in grids:
        specs.append(_spec(name, origin, rows, *formula_report(formulas.get(paths.get(name, "")))))
    if not specs:
        raise UnsupportedArtifact("the workbook has no worksheets", hint=_HINT)
    return specs


Grid = tuple[str, tuple[int, int], list[list[str]]]


def _rendered(rows: list[list[Any]]) -> list[list[str]]:
    """Rendered cells, a column at a time (one Python call per cell is most of a parse)."""
    width = max(map(len, rows), default=0)
    if len(rows) * width > MAX_CELLS:
        raise ArtifactTooLarge(f"{len(rows):,} rows x {width} columns is over {MAX_CELLS:,} cells", hint=_HINT)
    if not rows:
        return []
    head = [render(v) for v in rows[0]]
    columns = [render_column(list(col)) for col in zip_longest(*rows[1:], fillvalue=None)]
    out = [head] + [list(r) for r in zip(*columns, strict=True)] if columns else [head] + [[] for _ in rows[1:]]
    for line in out:
        while line and not line[-1]:
            line.pop()
    return out


def render_column(col: list[Any]) -> list[str]:
    """``render`` of each value; whole-column fast paths for floats, strings, dates and blanks."""
    kinds = set(map(type, col))
    if kinds <= {float, type(None)}:
        return _floats(col)
    if kinds == {str}:
        joined = "".join(col)
        return col if "\t" not in joined and "\n" not in joined and "\r" not in joined else list(map(escape, col))
    if kinds == {dt.date}:
        return list(map(dt.date.isoformat, col))
    return [render(v) for v in col]


def _floats(col: list[float | None]) -> list[str]:
    blank = [v is None for v in col]
    values = np.array([0.0 if v is None else v for v in col], dtype=np.float64)
    integral = (values == np.floor(values)) & (np.abs(values) < 1e16)
    ints = list(map(str, np.where(integral, values, 0).astype(np.int64).tolist()))
    if integral.all() and not any(blank):
        return ints
    reprs = list(map(repr, values.tolist()))
    return [
        "" if b else (i if m else r)
        for b, i, m, r in zip(blank, ints, integral.tolist(), reprs, strict=True)
    ]


def _calamine_grids(data: bytes) -> list[Grid]:
    from python_calamine import CalamineWorkbook

    try:
        book = CalamineWorkbook.from_filelike(io.BytesIO(data))
        grids = []
        for name in book.sheet_names:
            sheet = book.get_sheet_by_name(name)
            start = sheet.start or (0, 0)
            grids.append((str(name), (int(start[0]), int(start[1])), _rendered(sheet.to_python(skip_empty_area=True))))
    except (ReaderError, KeyboardInterrupt, SystemExit):
        raise
    except BaseException as err:  # noqa: BLE001 - a third-party parser on hostile bytes: any failure is the file's
        raise UnsupportedArtifact(f"unreadable xlsx: {type(err).__name__}: {err}"[:300], hint=_HINT) from None
    return grids


def _openpyxl_grids(data: bytes) -> list[Grid]:
    import openpyxl  # type: ignore[import-untyped]

    try:
        book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
        grids = []
        for sheet in book.worksheets:
            origin = ((sheet.min_row or 1) - 1, (sheet.min_column or 1) - 1)
            rows = sheet.iter_rows(min_row=origin[0] + 1, min_col=origin[1] + 1, values_only=True)
            grid = _rendered([list(r) for r in rows])
            grids.append((str(sheet.title), origin, grid))
        book.close()
    except (ReaderError, KeyboardInterrupt, SystemExit):
        raise
    except BaseException as err:  # noqa: BLE001 - as above
        raise UnsupportedArtifact(f"unreadable xlsx: {type(err).__name__}: {err}"[:300], hint=_HINT) from None
    return grids


def _spec(name: str, origin: tuple[int, int], rows: list[list[str]], formulas: int, missing: list[str]) -> SheetSpec:
    from readers.table.delimited import has_header

    while rows and not rows[-1]:
        rows.pop()
    header = rows[0] if rows and has_header(rows[:200]) else None
    body = rows[1:] if header is not None else rows
    notes = []
    if formulas:
        notes.append(f"{formulas:,} formula cells (cached values shown)")
    if missing:
        shown = ", ".join(missing[:5]) + (", …" if len(missing) > 5 else "")
        notes.append(f"no-cached-value: {len(missing):,} formula cells have no cached value, shown empty ({shown})")
    width = max(map(len, rows), default=0)
    if width:
        first = f"{col_letter(origin[1])}{origin[0] + 1}"
        last = f"{col_letter(origin[1] + width - 1)}{origin[0] + len(rows)}"
        notes.append(f"cells {first}:{last}")
    return SheetSpec(name, header, ["\t".join(r) for r in body], origin, notes, width)
