"""Bounded text for previews: lines within a character budget, and the two ways a line is shortened.

Every Object Preview (``@scout``) must stay within its ``max_chars`` whatever a Reader adds to it, and
each family used to keep its own copy of the class that ensures it; the copies drifted (one cut a
first line silently, one with an ellipsis, one cut any line while room was left). This is the one
class, with the cut policy a parameter.
"""

from __future__ import annotations

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
        """Append ``line`` if it fits (clipped where the policy says); False when it was not added."""
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

    def extend(self, other: BoundedLines) -> None:
        """Add the lines of a part built within its own share of the room, while they fit."""
        for line in other.lines:
            self.add(line)

    def text(self) -> str:
        """The lines joined by newlines."""
        return "\n".join(self.lines)
