"""The Tables Reader: CSV/TSV and XLSX/XLSM as a compact TSV full view, with exact operations.

Parsing is in :mod:`readers.table.delimited` / :mod:`readers.table.xlsx`, the full
view and column access in :mod:`readers.table.model`, the ``@scout`` preview in
:mod:`readers.table.preview`, exact operations in :mod:`readers.table.operations`.

Anchors (all accepted by ``@focus=`` and ``&scope=``)::

    R12  R12-40               data rows (1-based, the header is not a data row)
    Sales!R12-40              rows of one sheet ('My Sheet'!R1-9 when quoted)
    sheet:Sales               a whole sheet, with its header
    Sales!C2:C4001  C2:C40    the rows an Excel cell range covers
    col:revenue R1-1000       the rows an exact result was computed from

Intent reads rank data rows by any location method (:mod:`readers.retrieval.locate`
over the shared :class:`UnitIndex`, built on the first intent read, not at parse
time) and return row groups, exact slices of the full view, whose anchor
heading names the columns.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

import numpy as np

from readers.base import (
    Anchor,
    ArtifactSource,
    ArtifactTooLarge,
    BadAnchor,
    Batch,
    CostProfile,
    EvidenceItem,
    Parsed,
    Scope,
)
from readers.kit.anchors import CONTEXT_LINES
from readers.kit.source import read_within
from readers.ops import Operation
from readers.retrieval.bm25index import UnitIndex
from readers.retrieval.locate import RankingReader, UnitView
from readers.retrieval.methods import LABELS
from readers.table.delimited import parse_csv
from readers.table.model import Sheet, build_view, letter_index, no_gc, quote_sheet
from readers.table.operations import operate
from readers.table.preview import preview
from readers.text import extension_of

_XLSX = frozenset({".xlsx", ".xlsm"})
_CSV = frozenset({".csv", ".tsv", ".tab"})
_ROWS = re.compile(r"R(\d{1,12})(?:-R?(\d{1,12}))?", re.IGNORECASE)
_CELLS = re.compile(r"([A-Z]{1,3})(\d{1,12})(?::([A-Z]{1,3})(\d{1,12}))?", re.IGNORECASE)
_COL = re.compile(r"col:.*?\s(R\d{1,12}(?:-\d{1,12})?)", re.IGNORECASE)
_SHEET_ROWS = re.compile(r"((?:'[^']*'|[^!']+)!)?R(\d{1,12})(?:-R?(\d{1,12}))?", re.IGNORECASE)
_METHOD = LABELS["bm25"]
MAX_INDEXED_ROWS = 250_000
"""Intent reads rank rows with BM25; past this many rows the index costs seconds and
hundreds of MiB (1M rows: 5-8 s, 890 MiB), so bigger tables are asked with exact operations."""


class TableReader(RankingReader):
    """CSV/TSV and XLSX workbooks."""

    name = "table"
    extensions = _XLSX | _CSV
    magic = (b"PK\x03\x04",)
    operations = frozenset({"sum", "mean", "min", "max", "count", "distinct", "rows"})
    max_bytes = 64 * 1024 * 1024
    # measured by scripts/bench_tables.py: CSV 19-37 ms/MiB (plain/quoted), xlsx ~210 ms per compressed MiB
    cost = CostProfile(parse_ms_per_mb=40.0, per_call_chars=160, full_view_ratio=0.95)

    def accepts(self, name: str, head: bytes) -> bool:
        ext = extension_of(name)
        if ext in _XLSX:
            return head.startswith(b"PK\x03\x04")
        utf16 = head.startswith((b"\xff\xfe", b"\xfe\xff"))
        return ext in _CSV and not head.startswith(b"PK\x03\x04") and (utf16 or b"\x00" not in head)

    def parse(self, source: ArtifactSource) -> Parsed:
        data = read_within(source, self.max_bytes, "Tables", "read parts with @raw (head -c) or split the file")
        with no_gc():
            return self._parse(source.name, data)

    def _parse(self, name: str, data: bytes) -> Parsed:
        if extension_of(name) in _XLSX or data.startswith(b"PK\x03\x04"):
            from readers.table.xlsx import parse_xlsx

            view, sheets = build_view(parse_xlsx(data), titled=True)
            kind = "xlsx"
        else:
            view, sheets = build_view([parse_csv(data, name)], titled=False)
            kind = "tsv" if extension_of(name) in (".tsv", ".tab") else "csv"
        starts = np.concatenate([sh.row_starts for sh in sheets])
        ends = np.concatenate([sh.row_ends for sh in sheets])
        firsts = np.cumsum([0] + [sh.n_rows for sh in sheets])
        return Parsed(view, kind, {"sheets": sheets, "unit_starts": starts, "unit_ends": ends, "first_unit": firsts})

    def preview(self, parsed: Parsed, max_chars: int) -> str:
        return preview(parsed, max_chars)

    def operate(self, parsed: Parsed, operation: Operation, max_chars: int) -> Batch:
        if operation.name not in self.operations:
            return super().operate(parsed, operation, max_chars)
        with no_gc():
            return operate(parsed, operation, max_chars)

    # -- locate: the pipeline's hooks (readers.retrieval.locate) ---------------

    def units(self, parsed: Parsed, scope: str | None) -> UnitView:
        """Data rows, all or those of ``&scope=`` (rows, cells, a sheet)."""
        lo, hi, note = (0, len(parsed.data["unit_starts"]), "")
        if scope is not None:
            lo, hi = _unit_range(parsed, scope, "&scope=")
            note = f"scope {scope.strip()}"
        starts, ends = parsed.data["unit_starts"][lo:hi], parsed.data["unit_ends"][lo:hi]
        span = (int(starts[0]), int(ends[-1])) if hi > lo else (0, 0)
        view_scope = Scope(hi - lo, "rows", _METHOD, span[1] - span[0], note)
        index = functools.partial(_index, parsed)
        return UnitView(starts, ends, lo, view_scope, index, span=span, empty="no-data-rows")

    def anchor(self, parsed: Parsed, view: UnitView, run: Sequence[int]) -> Anchor:
        return _rows_anchor(parsed, run[0] + view.first, run[-1] + view.first)

    def runs(self, parsed: Parsed, view: UnitView, run: list[int]) -> list[list[int]]:
        """A passage never crosses from one sheet to the next."""
        return [[u - view.first for u in part] for part in _split_at_sheets(parsed, [u + view.first for u in run])]

    def widen(self, parsed: Parsed, anchor: str) -> list[str]:
        """Rows of context around a row range, within its sheet: ``R12-14`` -> ``R2-24``, ``R8-18``, ``R11-15``."""
        match = _SHEET_ROWS.fullmatch(anchor.strip())
        if not match:
            return []
        sheet, first, last = match.group(1) or "", int(match.group(2)), int(match.group(3) or match.group(2))
        rows = _sheet_rows(parsed, sheet.rstrip("!"))
        wider = [f"{sheet}R{max(1, first - n)}-{min(rows, last + n)}" for n in CONTEXT_LINES]
        return [w for w in dict.fromkeys(wider) if w != anchor.strip()]

    # -- focus -----------------------------------------------------------------

    def focus(self, parsed: Parsed, anchor: str) -> Batch:
        spec = anchor.strip()
        sheets: list[Sheet] = parsed.data["sheets"]
        if spec.lower().startswith("sheet:"):
            sheet = _sheet_named(sheets, spec[6:].strip(), spec)
            item = EvidenceItem(
                Anchor(f"sheet:{sheet.name}", sheet.start, sheet.end, heading=_heading(sheet)),
                parsed.full_view[sheet.start : sheet.end],
            )
            return Batch((item,), Scope(sheet.n_rows, "rows", "focus", sheet.end - sheet.start))
        first, last = _unit_range(parsed, spec, "@focus=")
        found = _rows_anchor(parsed, first, last - 1)
        item = EvidenceItem(found, parsed.full_view[found.char_start : found.char_end])
        return Batch((item,), Scope(last - first, "rows", "focus", found.char_end - found.char_start))


# -- helpers -------------------------------------------------------------------------


def _check_indexable(parsed: Parsed) -> None:
    rows = len(parsed.data["unit_starts"])
    if rows > MAX_INDEXED_ROWS:
        raise ArtifactTooLarge(
            f"{rows:,} rows is over the {MAX_INDEXED_ROWS:,} rows an intent read ranks",
            hint="find rows exactly: @rows&where=column~word (matching rows), @count&where=..., "
            "@distinct=column, or @sum=column&by=other; @scout shows the columns",
        )


def _index(parsed: Parsed) -> UnitIndex:
    """The rows' index, built on the first intent read (exact operations never need it)."""
    _check_indexable(parsed)
    if "index" not in parsed.data:
        view = parsed.full_view
        pairs = zip(parsed.data["unit_starts"].tolist(), parsed.data["unit_ends"].tolist(), strict=True)
        with no_gc():
            parsed.data["index"] = UnitIndex([view[s:e].replace("\t", " ") for s, e in pairs])
    index = parsed.data["index"]
    assert isinstance(index, UnitIndex)
    return index


def _sheet_of(parsed: Parsed, unit: int) -> int:
    return int(np.searchsorted(parsed.data["first_unit"], unit, side="right")) - 1


def _split_at_sheets(parsed: Parsed, run: list[int]) -> list[list[int]]:
    parts: list[list[int]] = []
    for u in run:
        if parts and _sheet_of(parsed, u) == _sheet_of(parsed, parts[-1][-1]):
            parts[-1].append(u)
        else:
            parts.append([u])
    return parts


def _heading(sheet: Sheet) -> str:
    cols = " | ".join(sheet.columns)
    text = f"columns: {cols}" if len(cols) <= 300 else f"columns: {cols[:300]}… ({len(sheet.columns)} in all)"
    return (f"sheet {sheet.name}; " if sheet.name is not None else "") + text


def _rows_anchor(parsed: Parsed, first: int, last: int) -> Anchor:
    """Global units first..last (inclusive, one sheet): their rows' anchor, the columns as its heading."""
    s = _sheet_of(parsed, first)
    sheet: Sheet = parsed.data["sheets"][s]
    base = int(parsed.data["first_unit"][s])
    start, end = int(parsed.data["unit_starts"][first]), int(parsed.data["unit_ends"][last])
    label = sheet.rows_label(first - base + 1, last - base + 1)
    return Anchor(label, start, end, first - base + 1, last - base + 1, _heading(sheet))


def _sheet_rows(parsed: Parsed, name: str) -> int:
    """Data rows of the sheet named ``name`` ('' or unknown: the first sheet)."""
    sheets: list[Sheet] = parsed.data["sheets"]
    wanted = name.strip("'").casefold()
    return next((sh.n_rows for sh in sheets if sh.name is not None and sh.name.casefold() == wanted), sheets[0].n_rows)


def _sheet_named(sheets: list[Sheet], name: str, spec: str) -> Sheet:
    wanted = name.strip().strip("'").casefold()
    for sheet in sheets:
        if sheet.name is not None and sheet.name.casefold() == wanted:
            return sheet
    raise BadAnchor(f"no sheet {name!r} ({spec!r})", hint=_anchor_hint(sheets))


def _anchor_hint(sheets: list[Sheet]) -> str:
    if sheets[0].name is None:
        return f"anchors are data rows: @focus=R1-{max(1, sheets[0].n_rows)}"
    shown = ", ".join(f"{quote_sheet(sh.name or '')}!R1-{max(1, sh.n_rows)} or sheet:{sh.name}" for sh in sheets[:5])
    return "anchors: " + shown


def _unit_range(parsed: Parsed, spec: str, how: str) -> tuple[int, int]:
    """Global unit range [first, last) of a rows / cells / sheet anchor."""
    sheets: list[Sheet] = parsed.data["sheets"]
    text = spec.strip()
    col = _COL.fullmatch(text)
    if col:
        text = col.group(1)
    if text.lower().startswith("sheet:"):
        s = sheets.index(_sheet_named(sheets, text[6:], spec))
        base = int(parsed.data["first_unit"][s])
        if not sheets[s].n_rows:
            name = sheets[s].name
            raise BadAnchor(f"sheet {name} has no data rows", hint=f"read it with {how}sheet:{name}")
        return base, base + sheets[s].n_rows
    s = 0
    if "!" in text:
        name, _, text = text.rpartition("!")
        s = sheets.index(_sheet_named(sheets, name, spec))
    sheet = sheets[s]
    first, last = _rows_of(sheet, text, spec, how)
    if not 1 <= first <= last <= sheet.n_rows:
        raise BadAnchor(f"rows {first}-{last} are outside 1-{sheet.n_rows} ({spec!r})", hint=_anchor_hint(sheets))
    base = int(parsed.data["first_unit"][s])
    return base + first - 1, base + last


def _rows_of(sheet: Sheet, text: str, spec: str, how: str) -> tuple[int, int]:
    rows = _ROWS.fullmatch(text)
    if rows:
        first = int(rows.group(1))
        return first, int(rows.group(2)) if rows.group(2) else first
    cells = _CELLS.fullmatch(text)
    if cells and sheet.origin is not None:
        top = int(sheet.origin[0]) + int(sheet.has_header)
        first = int(cells.group(2)) - top
        last = int(cells.group(4) or cells.group(2)) - top
        letter_index(cells.group(1))  # a valid column reference; rows are what is returned
        return max(1, first), min(last, sheet.n_rows)
    hint = f"write {how}R12-40, {how}Sales!R12-40 or {how}sheet:Sales"
    raise BadAnchor(f"unknown anchor {spec!r} for a table", hint=hint)
