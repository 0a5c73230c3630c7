"""Workspace text made safe to print inside a pack: the one escaping rule, for names and for content.

An agent reads a pack as lines, and whoever wrote the workspace chose its file names, headings, sheet and
column names, keys and text. So nothing from the workspace may start a line of its own or pass for the
pack's syntax (issue 24):

* :func:`escape_name` — a single-line field (a file or folder name, a section label, a sheet or column
  name, a key, an anchor, a slot, a message quoting any of them): every control character (tab, newline
  and carriage return included), DEL, the C1 controls (U+0085 among them), the Unicode line and paragraph
  separators, bidirectional overrides, isolates and marks, zero-width characters and look-alikes of the
  pack's ``·`` separator become visible escapes (``\\n``, ``\\t``, ``\\x1b``, ``\\u2028``, ``\\u00b7``); bytes
  that are not UTF-8 (surrogate-escaped) become ``\\xNN``.
* :func:`escape_text` — content shown as lines (a passage, a preview): the same, except that newlines and
  tabs are content (a pack prefixes each content line itself: ``sparsefs.protocol.pack_text``), a carriage
  return before a newline stays (CRLF files), and the separator look-alikes are left alone.

Backslashes are not doubled: an escape can be told from a name that holds a backslash only by context,
which costs nothing and forges nothing. Both functions are idempotent and leave ordinary text unchanged.
Readers use them where they print a name or label into a preview, a full view's member marker or an
anchor; the protocol applies them again at the pack-rendering boundary, to everything.
"""

from __future__ import annotations

import re

_C0 = {code: f"\\x{code:02x}" for code in range(0x20)} | {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}
_C1 = {code: f"\\x{code:02x}" for code in range(0x7F, 0xA0)}  # DEL and the C1 controls (NEL: U+0085)
_UNICODE = {code: f"\\u{code:04x}" for code in (
    0x2028, 0x2029,  # line and paragraph separators
    0x202A, 0x202B, 0x202C, 0x202D, 0x202E, 0x2066, 0x2067, 0x2068, 0x2069,  # bidi embeddings, overrides, isolates
)}
_NAME_ONLY = {code: f"\\u{code:04x}" for code in (
    0x061C, 0x200E, 0x200F,  # bidi marks
    0x200B, 0x200C, 0x200D, 0x2060, 0xFEFF,  # zero-width characters
    0x00B7, 0x0387, 0x2022, 0x2219, 0x22C5, 0x30FB, 0xFF65,  # look-alikes of the pack's " · " separator
)}
_NAME_TABLE = str.maketrans(_C0 | _C1 | _UNICODE | _NAME_ONLY)
_TEXT_TABLE = str.maketrans({k: v for k, v in (_C0 | _C1 | _UNICODE).items() if k not in (0x09, 0x0A, 0x0D)})
_LONE_CR = re.compile(r"\r(?!\n)")
_SURROGATE = re.compile("[\udc80-\udcff]")


def escape_name(text: str) -> str:
    """A single-line field: nothing in it can break a line, reorder the display or imitate a separator."""
    if _SURROGATE.search(text):
        text = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return text.translate(_NAME_TABLE)


def escape_text(text: str) -> str:
    """Content shown as lines: newlines and tabs stay (the pack prefixes each line); everything else that
    could break or disguise a line is escaped."""
    if _SURROGATE.search(text):
        text = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return _LONE_CR.sub("\\\\r", text.translate(_TEXT_TABLE))


def escape_line(text: str) -> str:
    """One line of a preview (a heading, a sample record, a key): as :func:`escape_text`, and its own line
    breaks escaped too, so a Reader's line stays one line; tabs stay (a table's sample rows use them)."""
    return escape_text(text).replace("\r", "\\r").replace("\n", "\\n")
