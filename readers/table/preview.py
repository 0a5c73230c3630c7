"""The ``@scout`` Object Preview of a table: per sheet, shape, typed columns, sample rows.

Column types (int, float, date, bool, text) and the share of empty cells come
from at most :data:`SAMPLE` rows spread evenly over the sheet (the preview says
when it sampled), so a preview costs the same for a hundred rows or a million.
Each sheet gets an even share of the character bound; columns past what fits
are counted, never cut mid-line.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from readers.base import Parsed
from readers.kit.bounded import BoundedLines, shorten
from readers.table.delimited import cell_type
from readers.table.model import Sheet

SAMPLE = 1000
SAMPLE_ROWS = 3
MAX_COLUMNS = 100
LINE_CHARS = 160


def sample_rows(view: str, sheet: Sheet) -> tuple[list[list[str]], bool]:
    """Up to SAMPLE rows spread over the sheet, and whether that is a sample."""
    n = sheet.n_rows
    picks = np.unique(np.linspace(0, n - 1, num=min(n, SAMPLE)).astype(np.int64)) if n else np.zeros(0, np.int64)
    starts, ends = sheet.row_starts[picks].tolist(), sheet.row_ends[picks].tolist()
    return [view[s:e].split("\t") for s, e in zip(starts, ends, strict=True)], len(picks) < n


def column_lines(view: str, sheet: Sheet) -> tuple[list[str], bool]:
    """One line per column (at most MAX_COLUMNS: no preview has room for more)."""
    rows, sampled = sample_rows(view, sheet)
    lines: list[str] = []
    if not rows:
        return [f"  {name}" for name in sheet.columns[:MAX_COLUMNS]], False
    for j, name in enumerate(sheet.columns[:MAX_COLUMNS]):
        cells = [r[j] for r in rows if len(r) > j and r[j].strip()]
        empty = 100 * (len(rows) - len(cells)) / max(1, len(rows))
        kinds = Counter(map(cell_type, cells))
        kind = _kind(kinds, len(cells))
        example = cells[0][:30] if cells else ""
        ref = f"#{j + 1}" if name == f"#{j + 1}" else f"{name} (#{j + 1}{_letter(sheet, j)})"
        lines.append(f"  {ref}: {kind}, {empty:.0f}% empty" + (f", e.g. {example}" if example else ""))
    return lines, sampled


def _letter(sheet: Sheet, j: int) -> str:
    return f", {sheet.excel_col(j)}" if sheet.origin is not None else ""


def _kind(kinds: Counter[str], n: int) -> str:
    if not n:
        return "empty"
    top, count = kinds.most_common(1)[0]
    if set(kinds) <= {"int", "float"}:
        return "float" if "float" in kinds else "int"
    return top if count == n else f"mostly {top}"


def preview(parsed: Parsed, max_chars: int) -> str:
    if max_chars <= 0:
        return ""
    sheets: list[Sheet] = parsed.data["sheets"]
    out = BoundedLines(max_chars)
    out.add(_summary(parsed, sheets))
    for s, sheet in enumerate(sheets):
        share = out.room() // max(1, len(sheets) - s)
        part = BoundedLines(share)
        _sheet_preview(part, parsed.full_view, sheet)
        out.extend(part)
    return out.text()


def _summary(parsed: Parsed, sheets: list[Sheet]) -> str:
    rows = sum(sh.n_rows for sh in sheets)
    if sheets[0].name is None:
        return f"{parsed.kind} table: {rows:,} data rows, full view {len(parsed.full_view):,} chars"
    names = ", ".join(sh.name or "" for sh in sheets[:10]) + (", …" if len(sheets) > 10 else "")
    return f"workbook: {len(sheets)} sheets ({names}), {rows:,} data rows, full view {len(parsed.full_view):,} chars"


def _sheet_preview(out: BoundedLines, view: str, sheet: Sheet) -> None:
    where = f"sheet {sheet.name}" if sheet.name is not None else "table"
    header = "header row" if sheet.has_header else f"no header (columns #1..#{len(sheet.columns)})"
    if not sheet.columns:
        header = "empty"
    anchor = f"@focus=sheet:{sheet.name}" if sheet.name is not None else f"@focus=R1-{sheet.n_rows}"
    if not sheet.n_rows and sheet.name is None:
        anchor = "@full"
    if not out.add(f"{where}: {sheet.n_rows:,} rows x {len(sheet.columns)} columns, {header}; {anchor}"):
        return
    for note in sheet.notes:
        out.add(f"  note: {note[:LINE_CHARS]}")
    lines, sampled = column_lines(view, sheet)
    if lines:
        out.add("columns" + (f" (types from {SAMPLE} sampled rows):" if sampled else ":"))
    room_for_rows = min(out.room() // 3, SAMPLE_ROWS * (LINE_CHARS + 8))
    shown = 0
    for line in lines:
        if out.room() - len(line) - 1 < room_for_rows + 30 or not out.add(line[:LINE_CHARS]):
            break
        shown += 1
    if shown < len(sheet.columns):
        out.add(f"  … {len(sheet.columns) - shown} more columns")
    for i in range(min(SAMPLE_ROWS, sheet.n_rows)):
        row = view[int(sheet.row_starts[i]) : int(sheet.row_ends[i])]
        if not out.add(f"  R{i + 1}\t{shorten(row, LINE_CHARS)}"):
            break
