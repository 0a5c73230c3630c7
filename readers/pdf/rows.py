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

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise

Word = tuple[float, float, float, float, str, int, int, int]  # x0, y0, x1, y1, text, block, line, word
SAME_ROW = 0.5
"""Two lines whose vertical centres are closer than this share of the taller one's height are one row."""
CELL_GAP = 1.0
"""A horizontal gap wider than this many text heights separates cells (two spaces instead of one)."""


@dataclass
class _Line:
    top: float
    bottom: float
    left: float
    right: float
    text: str

    @property
    def middle(self) -> float:
        return (self.top + self.bottom) / 2

    @property
    def height(self) -> float:
        return max(self.bottom - self.top, 1e-3)


def page_text(words: Iterable[Sequence[object]]) -> str:
    """The page's blocks (in mupdf's order) separated by a blank line, each block's rows one line each."""
    blocks: dict[int, dict[int, list[Word]]] = defaultdict(lambda: defaultdict(list))
    for w in words:
        word: Word = (float(w[0]), float(w[1]), float(w[2]), float(w[3]), str(w[4]),  # type: ignore[arg-type]
                      int(w[5]), int(w[6]), int(w[7]))  # type: ignore[call-overload]
        blocks[word[5]][word[6]].append(word)
    texts = (_block(lines) for _, lines in sorted(blocks.items()))
    return "\n\n".join(t for t in texts if t)


def _block(lines: dict[int, list[Word]]) -> str:
    rows: list[list[_Line]] = []
    for line in sorted((_line(ws) for ws in lines.values()), key=lambda ln: (ln.middle, ln.left)):
        if rows and _same_row(rows[-1], line):
            rows[-1].append(line)
        else:
            rows.append([line])
    return "\n".join(_row(row) for row in rows)


def _line(words: list[Word]) -> _Line:
    words = sorted(words, key=lambda w: (w[7], w[0]))
    return _Line(min(w[1] for w in words), max(w[3] for w in words), words[0][0], max(w[2] for w in words),
                 " ".join(w[4] for w in words))


def _same_row(row: list[_Line], line: _Line) -> bool:
    last = row[-1]
    return abs(line.middle - last.middle) < SAME_ROW * max(line.height, last.height)


def _row(row: list[_Line]) -> str:
    cells = sorted(row, key=lambda ln: ln.left)
    out = [cells[0].text]
    for before, cell in pairwise(cells):
        gap = cell.left - before.right
        out.append(" " if gap < CELL_GAP * max(before.height, cell.height) else "  ")
        out.append(cell.text)
    return "".join(out).strip()
