"""Bounded text for previews: lines within a character budget, and the two ways a line is shortened.

Every Object Preview (``@scout``) must stay within its ``max_chars`` whatever a Reader adds to it, and
each family used to keep its own copy of the class that ensures it; the copies drifted (one cut a
first line silently, one with an ellipsis, one cut any line while room was left). This is the one
class, with the cut policy a parameter.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from readers.escape import escape_line

ELLIPSIS = "…"


def shorten(text: str, limit: int) -> str:
    """``text`` cut after ``limit`` characters with an ellipsis added (at most ``limit + 1`` characters):
    for a line shown as a sample, where the ellipsis says there is more."""
    return text if len(text) <= limit else text[:limit] + ELLIPSIS


def clip(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters, its last one an ellipsis when it was cut: for a line that
    must fit a bound exactly ('' when nothing fits)."""
    if len(text) <= limit:
        return text
    return text[: limit - 1] + ELLIPSIS if limit >= 1 else ""


class BoundedLines:
    """Lines of text that never exceed ``limit`` characters once joined by newlines.

    A line that does not fit is refused (:meth:`add` returns False, so a caller can stop a list or
    move on to a shorter line). It is clipped instead (:func:`clip`) when it is the first line, so a
    preview always says something, or, with ``cut_from``, while at least that many characters are
    left, so a long record still shows its start.
    """

    def __init__(self, limit: int, cut_from: int | None = None) -> None:
        self.limit = limit
        self.cut_from = cut_from
        self.lines: list[str] = []
        self.size = -1  # no newline before the first line

    def room(self) -> int:
        """Characters the next line may have."""
        return self.limit - self.size - 1

    def add(self, line: str) -> bool:
        """Append ``line`` if it fits (clipped where the policy says); False when it was not added.

        The line is escaped first (``readers.escape.escape_line``): what a workspace put in it (a heading,
        a key, a record) cannot break it into lines of its own, and the bound holds for what is shown."""
        line = escape_line(line)
        room = self.room()
        if len(line) > room and (not self.lines or (self.cut_from is not None and room >= self.cut_from)):
            line = clip(line, room)
            if not line:
                return False
        if len(line) > room:
            return False
        self.lines.append(line)
        self.size += len(line) + 1
        return True

    def add_list(
        self, lines: Iterable[str], total: int, more: Callable[[int], str], reserve: int | None = None
    ) -> int:
        """Add ``lines`` (the first of ``total``) while each leaves room for the line that says how many
        are left out (``more(n)``, or ``reserve`` characters for it), then that line; how many were shown.
        A list cut short says so instead of ending as if it were whole."""
        shown = 0
        for line in lines:
            rest = total - shown - 1
            if rest and self.room() - len(line) - 1 < (len(more(rest)) if reserve is None else reserve):
                break
            if not self.add(line):
                break
            shown += 1
        if shown < total:
            self.add(more(total - shown))
        return shown

    def extend(self, other: BoundedLines) -> None:
        """Add the lines of a part built within its own share of the room, while they fit."""
        for line in other.lines:
            self.add(line)

    def text(self) -> str:
        """The lines joined by newlines."""
        return "\n".join(self.lines)
