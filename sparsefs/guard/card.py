"""The guard card: what a guarded plain read of a large artifact gets instead of its bytes.

The card is short (the Object Preview is cut to ``PREVIEW_CHARS``), says what the
file is and how large its full view is, gives copyable commands with the
absolute path in the mount (the agent's working directory is unknown here), and
says plainly that nothing is hidden: ``@full``, ``@raw`` and simply reading the
file again all give everything. Its first line starts with ``MARK`` so a human
(or a test) can tell a card from content.
"""

from __future__ import annotations

from readers.escape import escape_name
from sparsefs.protocol.pack_text import lines_of_content

MARK = "[sparsefs guard]"
END = "--- end of the sparsefs guard notice ---"
PREVIEW_CHARS = 1_200


def render_card(path: str, what: str, preview: str, skill: str) -> str:
    """The card text for ``path`` (absolute, in the mount); ``what`` says how large it is (``describe``)."""

    path = escape_name(path)  # a name cannot add lines to the card (issue 24)

    def cat(suffix: str) -> str:
        return "cat " + _quote(path + suffix)

    lines = [
        f"{MARK} Not shown: {path} is large: {what}.",
        "This workspace is a SparseFS mount: ask for what you need instead of reading it all.",
        f"  {cat('@intent=WHAT YOU NEED; ANOTHER NEED')}",
        "      a few passages with anchors, one coverage line per need (use the document's words; write / as %2F)",
        f"  {cat('@scout')}",
        "      the outline: headings, pages, columns or keys, first lines",
        f"  {cat('@focus=ANCHOR')}",
        "      one region whole: p12, p12-14, L120-180, #Heading, sheet:Sales, $.key",
        "Nothing is hidden: " + cat("@full") + " is the full view, " + cat("@raw") + " the original bytes,",
        "and reading this file again gives its bytes (this notice is shown once per file in this mount).",
        f"How to read here: cat {_quote(skill)}",
        "",
        "--- object preview ---",
        lines_of_content(_cut(preview.rstrip("\n"), PREVIEW_CHARS)),  # no preview line can pass for END
        END,
    ]
    return "\n".join(lines) + "\n"


def describe(read_as: str, size_bytes: int, full_view_chars: int | None, facts: str = "") -> str:
    """'869,274 characters of text (2.3 MiB, read as pdf)', or without a parse '252 pages, 2.3 MiB, pdf'."""
    if full_view_chars is not None:
        return f"{full_view_chars:,} characters of text ({_size(size_bytes)}, read as {read_as})"
    return ", ".join(part for part in (facts, _size(size_bytes), read_as) if part)


def _quote(text: str) -> str:
    """Always single-quoted, as SKILL.md writes paths (a suffix may hold spaces, ';' or '&')."""
    return "'" + text.replace("'", "'\\''") + "'"


def _size(size_bytes: int) -> str:
    if size_bytes >= 1 << 20:
        return f"{size_bytes / (1 << 20):.1f} MiB"
    return f"{size_bytes / 1024:.0f} KiB"


def _cut(text: str, limit: int) -> str:
    """At most ``limit`` characters, cut at a line end when one is near."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    line_end = head.rfind("\n")
    return (head[:line_end] if line_end > limit // 2 else head) + "\n[... preview cut]"
