"""CSV/TSV parsing: encoding, delimiter and header sniffing, rows as TSV lines.

Encoding: UTF-8 (a BOM is dropped), UTF-16 with a BOM; otherwise cp1252 when
every byte is defined there (cp1252 and latin-1 only differ in 0x80-0x9F, where
latin-1 has control characters no text uses), and the sheet notes say so.

Delimiter: of ``, \\t ; |`` the one that splits the first rows into the most
consistent number of fields (csv.Sniffer guesses wrong on quoted, numeric or
one-column files). Header: the first row is a header when none of its cells is
a number and either a column below it is mostly numbers/dates while its cell is
text, or each of its cells is absent from the column below (a repeated value is
data). Headerless files name their columns ``#1``, ``#2``, ….

Two parse paths give the same rows: a file without any quote character is split
with str methods (C speed); otherwise :mod:`csv` (strict quoting) reads it in
chunks. A quoting error, NUL bytes, or rows so ragged that no field count covers
half of them are refused as not a table.
"""

from __future__ import annotations

import csv
import io
import re
from collections import Counter
from collections.abc import Iterator
from itertools import islice
from operator import methodcaller

import numpy as np
import numpy.typing as npt

from readers.base import UnsupportedArtifact
from readers.ops import as_number
from readers.table.model import Offsets, SheetSpec, escape

DELIMITERS = (",", "\t", ";", "|")
SAMPLE_ROWS = 200
_CHUNK = 65536
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}|\d{1,2}/\d{1,2}/\d{2,4}")
_HINT = "read it as text with @raw, or fix the file"


def decode(data: bytes) -> tuple[str, str]:
    """(text, encoding note); UnsupportedArtifact for binary or ambiguous bytes."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16"), "UTF-16"
        except UnicodeDecodeError:
            raise UnsupportedArtifact("broken UTF-16 table", hint=_HINT) from None
    if b"\x00" in data:
        raise UnsupportedArtifact("binary data (NUL bytes), not a CSV/TSV table", hint=_HINT)
    try:
        return data.decode("utf-8-sig"), ""
    except UnicodeDecodeError:
        pass
    try:
        text = data.decode("cp1252")
    except UnicodeDecodeError:
        raise UnsupportedArtifact(
            "neither UTF-8 nor cp1252 text (bytes undefined in cp1252)", hint=_HINT
        ) from None
    return text, "not UTF-8: decoded as cp1252 (every byte is defined there)"


def _binary(text: str) -> bool:
    sample = text[:65536]
    controls = sum(1 for ch in sample if ch < " " and ch not in "\t\r\n")
    return controls > max(8, len(sample) // 100)


def sniff_delimiter(sample: str, tab_first: bool) -> str:
    """The delimiter that gives the most consistent multi-field rows."""
    best, best_score = "\t" if tab_first else ",", (-1.0, 0)
    order = ("\t", *DELIMITERS) if tab_first else DELIMITERS
    for delim in order:
        try:
            rows = [r for r in islice(csv.reader(io.StringIO(sample, newline=""), delimiter=delim), SAMPLE_ROWS) if r]
        except csv.Error:
            continue
        if len(rows) > 1:
            rows = rows[:-1]  # the sample may cut the last row
        counts = Counter(map(len, rows))
        width, freq = counts.most_common(1)[0] if counts else (1, 0)
        if width < 2:
            continue
        score = (freq / max(1, len(rows)), width)
        if score > best_score:
            best, best_score = delim, score
    return best


_INT = re.compile(r"[+-]?\d+")
_DATE_FULL = re.compile(r"\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2}(\.\d+)?)?)?|\d{1,2}/\d{1,2}/\d{2,4}")


def cell_type(cell: str) -> str:
    """int | float | date | bool | text (digits with a leading zero are text: codes, not numbers)."""
    text = cell.strip()
    if _INT.fullmatch(text):
        return "text" if len(text) > 1 and text.lstrip("+-").startswith("0") else "int"
    if as_number(text) is not None:
        return "float"
    if _DATE_FULL.fullmatch(text):
        return "date"
    if text.upper() in ("TRUE", "FALSE"):
        return "bool"
    return "text"


def _typed(cell: str) -> bool:
    text = cell.strip()
    return as_number(text) is not None or bool(_DATE.match(text)) or text.lower() in ("true", "false")


def column_kind(cells: list[str]) -> str:
    """The dominant type of non-empty cells (ints mixed with floats are float)."""
    kinds = Counter(map(cell_type, cells))
    if kinds and set(kinds) <= {"int", "float"}:
        return "float" if "float" in kinds else "int"
    return kinds.most_common(1)[0][0] if kinds else "empty"


def has_header(rows: list[list[str]]) -> bool:
    """Is the first row a header? (see the module docstring)."""
    if not rows:
        return False
    first, below = rows[0], rows[1:]
    cells = [c.strip() for c in first]
    if not any(cells) or all(_typed(c) for c in cells if c):
        return False
    if not below:
        return True
    typed_col, absent_everywhere = False, True
    for j, cell in enumerate(cells):
        column = [r[j].strip() for r in below if len(r) > j and r[j].strip()]
        if not column or not cell:
            continue
        kind = column_kind(column)
        if _typed(cell) and cell_type(cell) == kind:
            return False  # a number over numbers of its kind is data
        if not _typed(cell) and kind in ("int", "float", "date", "bool"):
            typed_col = True
        if cell in column:
            absent_everywhere = False
    return typed_col or (absent_everywhere and len(set(cells)) == len(cells))


def parse_csv(data: bytes, name: str) -> SheetSpec:
    text, note = decode(data)
    if _binary(text):
        raise UnsupportedArtifact("binary data (control bytes), not a CSV/TSV table", hint=_HINT)
    tab_first = name.lower().endswith((".tsv", ".tab"))
    delim = sniff_delimiter(text[:65536], tab_first)
    header = has_header(_sample(text, delim))
    block = _fast_block(text, delim) if '"' not in text else None
    if block is not None:
        body, lengths, widths = block
    else:
        lines, widths = _fast_lines(text, delim) if '"' not in text else _csv_lines(text, delim)
    if not widths:
        raise UnsupportedArtifact("empty table (no rows)", hint=_HINT)
    notes = [note] if note else []
    width = _check_ragged(widths, notes)
    if delim != ",":
        notes.append("delimiter: " + {"\t": "tab", ";": "semicolon", "|": "pipe"}[delim])
    if block is not None:
        head, body, lengths = _split_header(body, lengths) if header else (None, body, lengths)
        return SheetSpec(None, head, [], None, notes, width, body=body, lengths=lengths)
    head = lines.pop(0).split("\t") if header else None
    return SheetSpec(None, head, lines, None, notes, width)


def _split_header(body: str, lengths: Offsets) -> tuple[list[str], str, Offsets]:
    first = int(lengths[0])
    return body[:first].split("\t"), body[first + 1 :], lengths[1:]


def _fast_block(text: str, delim: str) -> tuple[str, Offsets, Counter[int]] | None:
    """No quote, ASCII, no blank line, no tab inside a cell: the view's rows as one block (the text with
    tabs for delimiters) and each row's length, found by numpy over the bytes instead of a string per
    row (1M rows: ~0.15 s instead of ~0.5 s); None where :func:`_fast_lines` must do it row by row.
    The block, lengths and widths are the ones ``_fast_lines`` + ``build_view`` make (tests compare)."""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if text.endswith("\n"):
        text = text[:-1]
    if not text or not text.isascii() or (delim != "\t" and "\t" in text):
        return None
    body = text.replace(delim, "\t") if delim != "\t" else text
    raw = np.frombuffer(body.encode("ascii"), np.uint8)
    found = np.equal(raw, 10)  # one flag buffer, used twice: fresh pages cost a cold process more than the scans
    ends = np.append(np.flatnonzero(found), len(raw))
    starts = np.concatenate(([0], ends[:-1] + 1))
    lengths: Offsets = (ends - starts).astype(np.int64)
    if not lengths.all():
        return None  # a blank line: no row, so the row-by-row path drops it
    tabs = np.flatnonzero(np.equal(raw, 9, out=found))
    widths = np.searchsorted(tabs, ends) - np.searchsorted(tabs, starts) + 1
    return body, lengths, _counted(widths.astype(np.int64))


def _sample(text: str, delim: str) -> list[list[str]]:
    """The first rows (lenient: the cut at 64 KiB may fall inside a quoted field)."""
    rows: list[list[str]] = []
    try:
        for row in islice(csv.reader(io.StringIO(text[:65536], newline=""), delimiter=delim), SAMPLE_ROWS + 1):
            if row:
                rows.append(row)
    except csv.Error:
        pass
    if len(text) > 65536 and len(rows) > 1:
        rows.pop()  # may be cut
    return rows[:SAMPLE_ROWS]


def _reader(text: str, delim: str) -> Iterator[list[str]]:
    return csv.reader(io.StringIO(text, newline=""), delimiter=delim, strict=True)


def _fast_lines(text: str, delim: str) -> tuple[list[str], Counter[int]]:
    """No quote anywhere: rows are lines, fields split at the delimiter."""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    split_here = delim != "\t" and "\t" in text  # cells hold tabs: escape them per cell
    if delim != "\t" and not split_here:
        text = text.replace(delim, "\t")
    lines = text.split("\n")
    if lines and not lines[-1]:
        lines.pop()
    if "" in lines:
        lines = list(filter(None, lines))
    if split_here:
        lines = ["\t".join(map(escape, line.split(delim))) for line in lines]
    tabs = np.fromiter(map(methodcaller("count", "\t"), lines), np.int64, len(lines))
    return lines, _counted(tabs + 1)


def _counted(widths: npt.NDArray[np.int64]) -> Counter[int]:
    """Row widths as a Counter {width: rows}."""
    counts = np.bincount(widths) if len(widths) else np.zeros(0, np.int64)
    return Counter({w: int(n) for w, n in enumerate(counts.tolist()) if n})


def _csv_lines(text: str, delim: str) -> tuple[list[str], Counter[int]]:
    """Quoted fields: the csv module, a chunk of rows at a time."""
    lines: list[str] = []
    widths: Counter[int] = Counter()
    reader = _reader(text, delim)
    try:
        while batch := list(islice(reader, _CHUNK)):
            chunk = list(filter(None, batch))  # blank lines are no rows
            lengths = np.fromiter(map(len, chunk), np.int64, len(chunk))
            widths.update(_counted(lengths))
            joined = list(map("\t".join, chunk))
            block = "\n".join(joined)
            clean = block.count("\n") == len(chunk) - 1 and "\r" not in block
            if chunk and not (clean and block.count("\t") == int(lengths.sum()) - len(chunk)):
                joined = ["\t".join(map(escape, row)) for row in chunk]
            lines.extend(joined)
    except csv.Error as err:
        raise UnsupportedArtifact(f"malformed CSV after row {len(lines):,}: {err}", hint=_HINT) from None
    return lines, widths


def _check_ragged(widths: Counter[int], notes: list[str]) -> int:
    """The table width; refuse when no field count covers half of the rows."""
    total = sum(widths.values())
    width, freq = widths.most_common(1)[0]
    if total >= 4 and freq < total / 2:
        raise UnsupportedArtifact(
            f"not a consistent table: the most common row width ({width} fields) covers {freq} of {total} rows",
            hint=_HINT,
        )
    if freq < total:
        notes.append(f"ragged: {total - freq:,} of {total:,} rows do not have {width} fields")
    return max(widths)
