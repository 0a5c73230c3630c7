"""The parsed table: sheets laid out in one compact TSV full view, and column access.

Full view (this defines L): for a CSV, the header line (when the file has one)
then one line per data row, cells joined by tabs; for a workbook, per sheet a
``## sheet: <name>`` line, then the same. A tab, newline or carriage return
inside a cell is written as ``\\t``, ``\\n``, ``\\r`` so that one data row is
always one line. Rows are never copied elsewhere: a column is cut out of the
view on first use and cached (as strings, and as a float array for numeric
operations) in ``Parsed.data``, so a million-row file costs its view plus one
offset pair per row.
"""

from __future__ import annotations

import difflib
import gc
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from readers.ops import BadOperation

Offsets = npt.NDArray[np.int64]
_ESCAPES = str.maketrans({"\t": "\\t", "\n": "\\n", "\r": "\\r"})
_LETTERS = re.compile(r"[A-Za-z]{1,3}")


@contextmanager
def no_gc() -> Iterator[None]:
    """Pause the cyclic GC: building a million short-lived row lists otherwise
    triggers collections that cost more than the parse (0.8 s vs 2.2 s for 1M rows)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def escape(cell: str) -> str:
    """A cell as it appears in the full view (one line, no tabs)."""
    return cell.translate(_ESCAPES) if ("\t" in cell or "\n" in cell or "\r" in cell) else cell


@dataclass
class SheetSpec:
    """What a format parser hands over: rendered data lines and the header, if any."""

    name: str | None
    header: list[str] | None
    lines: list[str]
    origin: tuple[int, int] | None = None  # 0-based (row, col) of the first cell, for xlsx
    notes: list[str] = field(default_factory=list)
    width: int = 0
    body: str | None = None  # the data lines already joined by newlines (then ``lines`` is empty) ...
    lengths: Offsets | None = None  # ... and each one's length: a million-row CSV needs no string per row


@dataclass
class Sheet:
    """One table of the full view: its columns and where its rows are."""

    name: str | None
    columns: tuple[str, ...]
    has_header: bool
    start: int
    end: int
    row_starts: Offsets
    row_ends: Offsets
    origin: tuple[int, int] | None
    notes: list[str]

    @property
    def n_rows(self) -> int:
        return len(self.row_starts)

    def label(self) -> str:
        return self.name if self.name is not None else "table"

    def prefix(self) -> str:
        """Anchor prefix: ``Sales!`` on a workbook sheet, nothing for a CSV."""
        return f"{quote_sheet(self.name)}!" if self.name is not None else ""

    def rows_label(self, first: int, last: int) -> str:
        """``R12-40`` / ``Sales!R12-40`` for data rows first..last (1-based)."""
        return f"{self.prefix()}R{first}" + (f"-{last}" if last != first else "")

    def excel_row(self, row: int) -> int:
        """Excel row number of data row ``row`` (1-based)."""
        assert self.origin is not None
        return self.origin[0] + int(self.has_header) + row

    def excel_col(self, col: int) -> str:
        assert self.origin is not None
        return col_letter(self.origin[1] + col)


def quote_sheet(name: str) -> str:
    return f"'{name}'" if re.search(r"[^A-Za-z0-9_]", name) else name


def col_letter(index: int) -> str:
    """0 -> A, 25 -> Z, 26 -> AA."""
    out = ""
    index += 1
    while index:
        index, rem = divmod(index - 1, 26)
        out = chr(65 + rem) + out
    return out


def letter_index(letters: str) -> int:
    """A -> 0, AA -> 26."""
    value = 0
    for ch in letters.upper():
        value = value * 26 + ord(ch) - 64
    return value - 1


def build_view(specs: Sequence[SheetSpec], titled: bool) -> tuple[str, list[Sheet]]:
    """The full view and its sheets; ``titled`` writes ``## sheet:`` lines (workbooks)."""
    parts: list[str] = []
    sheets: list[Sheet] = []
    pos = 0
    for spec in specs:
        start = pos + (1 if parts else 0)  # after the newline that separates sheets
        head: list[str] = []
        if titled:
            head.append(f"## sheet: {spec.name}")
        if spec.header is not None:
            head.append("\t".join(spec.header))  # cells come rendered (escaped)
        prefix = "".join(line + "\n" for line in head)
        if parts:
            prefix = "\n" + prefix
        body = spec.body if spec.body is not None else "\n".join(spec.lines)
        lengths = spec.lengths if spec.lengths is not None else \
            np.fromiter(map(len, spec.lines), np.int64, len(spec.lines))
        ends = np.cumsum(lengths + 1) - 1 + pos + len(prefix)
        starts = ends - lengths
        section = prefix + body if len(lengths) else prefix.rstrip("\n")
        parts.append(section)
        pos += len(section)
        sheets.append(_sheet(spec, start, pos, starts, ends))
    return "".join(parts), sheets


def _sheet(spec: SheetSpec, start: int, end: int, starts: Offsets, ends: Offsets) -> Sheet:
    width = max(spec.width, len(spec.header or ()))
    names = [f"#{j + 1}" for j in range(width)]
    for j, cell in enumerate(spec.header or ()):
        if cell.strip():
            names[j] = cell.strip()
    return Sheet(
        spec.name, tuple(names), spec.header is not None, start, end,
        starts.astype(np.int64), ends.astype(np.int64), spec.origin, list(spec.notes),
    )


# -- columns -----------------------------------------------------------------------


def resolve_column(sheet: Sheet, ref: str) -> int:
    """0-based index of a column named ``ref``: header name, ``#3``, or an Excel letter."""
    text = ref.strip()
    exact = [j for j, name in enumerate(sheet.columns) if name == text]
    folded = exact or [j for j, name in enumerate(sheet.columns) if name.casefold() == text.casefold()]
    if len(folded) > 1:
        where = ", ".join(f"#{j + 1}" for j in folded[:6])
        raise BadOperation(
            f"{len(folded)} columns are named {text!r} in {sheet.label()}",
            hint=f"name one by position: {where}",
        )
    if folded:
        return folded[0]
    if text.startswith("#") and text[1:].isdigit():
        j = int(text[1:]) - 1
        if 0 <= j < len(sheet.columns):
            return j
    if sheet.origin is not None and _LETTERS.fullmatch(text):
        j = letter_index(text) - sheet.origin[1]
        if 0 <= j < len(sheet.columns):
            return j
    close = difflib.get_close_matches(text, sheet.columns[:5000], n=3, cutoff=0.4)
    shown = ", ".join(close) if close else ", ".join(sheet.columns[:8])
    letter = " or an Excel letter (C)" if sheet.origin is not None else ""
    raise BadOperation(
        f"no column {text!r} in {sheet.label()}",
        hint=f"closest columns: {shown}; name a column by header, by position (#3){letter}",
    )


def column_values(
    cache: dict[tuple[int, int], list[str]], view: str, sheets: Sequence[Sheet], s: int, j: int
) -> list[str]:
    """Column ``j`` of sheet ``s`` as strings ('' where a row is short); cached.

    One regex pass over the sheet body: each match consumes one whole line (the
    empty alternative takes a short line), so no per-row list is ever built.
    """
    key = (s, j)
    if key not in cache:
        sheet = sheets[s]
        if not sheet.n_rows:
            return []
        body = view[int(sheet.row_starts[0]) : int(sheet.row_ends[-1])]
        pattern = re.compile(r"^(?:(?:[^\t\n]*\t){" + str(j) + r"}([^\t\n]*)|)[^\n]*", re.MULTILINE)
        cache[key] = pattern.findall(body)
    return cache[key]
