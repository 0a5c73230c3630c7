"""A page's text with table rows kept as rows: each row's label and values on one line.

mupdf emits a financial statement one cell per line (``Net sales`` / ``$`` /
``34,229``), so a passage found by its label carries none of its numbers.
Within each text block, the words mupdf places on one baseline are one row
here, ordered left to right; cells further apart than the text's height are
separated by two spaces::

    Net sales  $ 34,229 $  35,355 $  32,184

Rows are only ever joined inside one block, so the columns of a two-column
article (separate blocks) are never interleaved, and prose lines (one per
baseline) come out as mupdf wrote them. The words come from the same text
page as before (``extractWORDS``, about 0.5 ms a page).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import groupby, pairwise

Word = tuple[float, float, float, float, str, int, int, int]  # x0, y0, x1, y1, text, block, line, word
Line = tuple[float, float, float, float, str]  # top, bottom, left, right, text
SAME_ROW = 0.5
"""Two lines whose vertical centres are closer than this share of the taller one's height are one row."""
CELL_GAP = 1.0
"""A horizontal gap wider than this many text heights separates cells (two spaces instead of one)."""


def page_text(words: Iterable[Sequence[object]]) -> str:
    """The page's blocks (in mupdf's order) separated by a blank line, each block's rows one line each.

    Words arrive in mupdf's order (block, line, word), so one pass groups them; a block whose lines
    all sit on baselines of their own (prose) is joined as mupdf wrote it, and only a block with
    several lines on one baseline (a table) is regrouped into rows.
    """
    texts = (_block([_line(list(ws)) for _, ws in groupby(b, key=_line_no)]) for _, b in groupby(words, key=_block_no))
    return "\n\n".join(t for t in texts if t)


def _block_no(word: Sequence[object]) -> object:
    return word[5]


def _line_no(word: Sequence[object]) -> object:
    return word[6]


def _line(words: list[Sequence[object]]) -> Line:
    top = min(float(w[1]) for w in words)  # type: ignore[arg-type]
    bottom = max(float(w[3]) for w in words)  # type: ignore[arg-type]
    right = max(float(w[2]) for w in words)  # type: ignore[arg-type]
    return top, bottom, float(words[0][0]), right, " ".join(str(w[4]) for w in words)  # type: ignore[arg-type]


def _block(lines: list[Line]) -> str:
    ordered = sorted(lines, key=lambda ln: (ln[0] + ln[1], ln[2]))
    if not any(_same_row(a, b) for a, b in pairwise(ordered)):
        return "\n".join(ln[4] for ln in lines)
    rows: list[list[Line]] = []
    for line in ordered:
        if rows and _same_row(rows[-1][-1], line):
            rows[-1].append(line)
        else:
            rows.append([line])
    return "\n".join(_row(row) for row in rows)


def _same_row(last: Line, line: Line) -> bool:
    height = max(line[1] - line[0], last[1] - last[0], 1e-3)
    return abs((line[0] + line[1]) - (last[0] + last[1])) / 2 < SAME_ROW * height


def _row(row: list[Line]) -> str:
    cells = sorted(row, key=lambda ln: ln[2])
    out = [cells[0][4]]
    for before, cell in pairwise(cells):
        gap = cell[2] - before[3]
        height = max(before[1] - before[0], cell[1] - cell[0], 1e-3)
        out.append(" " if gap < CELL_GAP * height else "  ")
        out.append(cell[4])
    return "".join(out).strip()
