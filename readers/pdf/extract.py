"""Text extraction for the PDF Reader: one pymupdf pass over the pages.

The full view is the text of every page as mupdf lays it out (its blocks in
its order, no images, a blank line between blocks; inside a block, the words
on one baseline are one line, so a table's row keeps its label and values
together: ``readers.pdf.rows``), each page introduced by a marker line::

    --- p1 ---

    <text of page 1>

    --- p2 (no text layer) ---

A page without a text layer (a scan) gets only its marker; it is reported,
never OCR'd. Control characters mupdf emits for glyphs without a Unicode
mapping become U+FFFD, so the view is plain text. The blank line between
blocks (one character each) lets the segmenter see paragraphs and a
statement's title apart from its figures, which BM25 ranks much better.

One mupdf text page per page gives the words with their positions
(``extractWORDS``: the same words as ``get_text("text")``) and, when the document has no outline, the
dict of spans with their fonts (the text is not rebuilt from the dict:
pymupdf 1.26's dict drops some paragraphs). Headings come from the document
outline when it has one, else from lines set in a font noticeably larger
than the body text or bold numbered section titles (see
``readers.pdf.headings``).

Bounded work: more than :data:`MAX_PAGES` pages, more than
:data:`MAX_CHARS` characters of text, or more than :data:`MAX_SECONDS` of
extraction (checked between pages) raise ArtifactTooLarge; an encrypted or
unreadable file raises UnsupportedArtifact. mupdf's own error and warning
output is switched off (the daemon's stderr stays clean).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pymupdf as _pymupdf

from readers.base import ArtifactTooLarge, UnsupportedArtifact
from readers.pdf.headings import FontLine, PdfHeading, font_headings, toc_headings
from readers.pdf.rows import page_text

pymupdf: Any = _pymupdf  # pymupdf's functions are untyped: keep mypy --strict quiet in one place

MAX_PAGES = 5_000
MAX_CHARS = 32_000_000
MAX_SECONDS = 20.0

TEXT_FLAGS = pymupdf.TEXT_PRESERVE_LIGATURES | pymupdf.TEXT_MEDIABOX_CLIP | pymupdf.TEXT_CID_FOR_UNKNOWN_UNICODE
"""mupdf's default text flags without TEXT_PRESERVE_WHITESPACE (tabs become spaces) and images."""

MUPDF_ERRORS: tuple[type[Exception], ...] = (
    RuntimeError,  # pymupdf.FileDataError and friends
    ValueError,
    TypeError,
    IndexError,
    KeyError,
    _pymupdf.mupdf.FzErrorBase,  # errors mupdf raises from C
)
"""What mupdf raises on a damaged file; anything else is a bug and propagates."""
MUPDF_LOCK = threading.RLock()
"""PyMuPDF is not thread-safe (one global mupdf context; find_tables flips global
settings): every use of it in the PDF Reader holds this lock. A fork waits for
it (mupdf idle, its lock free), so a forked child never inherits it held."""
os.register_at_fork(before=MUPDF_LOCK.acquire, after_in_parent=MUPDF_LOCK.release, after_in_child=MUPDF_LOCK.release)
_BOLD = 16  # span flag bit
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_RAW_HINT = "read the original bytes with @raw (e.g. pdftotext file.pdf - | less)"

pymupdf.TOOLS.mupdf_display_errors(False)
pymupdf.TOOLS.mupdf_display_warnings(False)
if hasattr(pymupdf, "no_recommend_layout"):  # pymupdf >= 1.26.? prints a one-time advert
    pymupdf.no_recommend_layout()


def marker(page: int, has_text: bool) -> str:
    """The line that introduces page ``page`` (1-based) in the full view."""
    return f"--- p{page} ---" if has_text else f"--- p{page} (no text layer) ---"


@dataclass(frozen=True)
class Extracted:
    """The full view and where each page sits in it (1-based page p at index p - 1).

    ``marker_starts[i]`` is where page i+1's marker line begins; its text is
    ``view[text_starts[i]:text_ends[i]]`` (empty for a page without text).
    """

    view: str
    marker_starts: tuple[int, ...]
    text_starts: tuple[int, ...]
    text_ends: tuple[int, ...]
    headings: tuple[PdfHeading, ...]
    outline: str
    title: str
    repaired: bool
    seconds: float

    @property
    def page_count(self) -> int:
        return len(self.marker_starts)

    def no_text_pages(self) -> list[int]:
        return [i + 1 for i, (s, e) in enumerate(zip(self.text_starts, self.text_ends, strict=True)) if s == e]

    def page_chars(self) -> list[int]:
        return [e - s for s, e in zip(self.text_starts, self.text_ends, strict=True)]


def open_pdf(data: bytes) -> Any:
    """The document, or UnsupportedArtifact when it is not a readable, unlocked PDF."""
    try:
        doc = pymupdf.open(stream=data, filetype="pdf")
        needs_pass, count = bool(doc.needs_pass), (0 if doc.needs_pass else doc.page_count)
    except MUPDF_ERRORS as exc:
        raise UnsupportedArtifact(f"not a readable PDF ({_short(exc)})", hint=_RAW_HINT) from None
    finally:
        pymupdf.TOOLS.reset_mupdf_warnings()
    if needs_pass:
        doc.close()
        raise UnsupportedArtifact(
            "the PDF is encrypted (a password is needed to read its text)",
            hint="decrypt a copy (qpdf --decrypt --password=... in.pdf out.pdf) and read that; @raw gives the bytes",
        )
    if count == 0:
        doc.close()
        raise UnsupportedArtifact("the PDF has no readable pages (damaged or truncated file?)", hint=_RAW_HINT)
    if count > MAX_PAGES:
        doc.close()
        raise ArtifactTooLarge(f"{count:,} pages is over the PDF Reader's {MAX_PAGES:,}-page bound", hint=_RAW_HINT)
    return doc


def extract(data: bytes, max_seconds: float = MAX_SECONDS) -> Extracted:
    """Open, check and extract the whole document (see the module docstring)."""
    with MUPDF_LOCK:
        started = time.monotonic()
        doc = open_pdf(data)
        try:
            return _extract(doc, started, max_seconds)
        finally:
            doc.close()
            pymupdf.TOOLS.reset_mupdf_warnings()


def _extract(doc: Any, started: float, max_seconds: float) -> Extracted:
    builder = _ViewBuilder()
    font_lines: list[FontLine] = []
    toc = _toc(doc)
    for number, (words, page_dict) in enumerate(_pages(doc, started, max_seconds, fonts=not toc), 1):
        text = _page_text(words)
        offset = builder.add_page(number, text)
        font_lines.extend(_font_lines(number, offset, text, page_dict))
        if len(builder) > MAX_CHARS:
            raise ArtifactTooLarge(f"over {MAX_CHARS:,} characters of text", hint=_focus_hint(number, doc.page_count))
    view = builder.text()
    headings = toc_headings(toc, view, builder.text_starts, builder.text_ends) if toc else font_headings(font_lines)
    return Extracted(
        view,
        tuple(builder.marker_starts),
        tuple(builder.text_starts),
        tuple(builder.text_ends),
        headings,
        "outline" if toc else "font sizes",
        _title(doc),
        bool(getattr(doc, "is_repaired", False)),
        time.monotonic() - started,
    )


def _pages(doc: Any, started: float, max_seconds: float, fonts: bool) -> Iterator[tuple[list[Any], dict[str, Any]]]:
    """Each page's words and, with ``fonts``, its dict (spans with fonts), from one mupdf text page."""
    count = doc.page_count
    for index in range(count):
        if time.monotonic() - started > max_seconds:
            raise ArtifactTooLarge(
                f"text extraction took over {max_seconds:g} s (stopped at page {index + 1} of {count})",
                hint=_focus_hint(index + 1, count),
            )
        try:
            textpage = doc.load_page(index).get_textpage(flags=TEXT_FLAGS)
            words = list(textpage.extractWORDS())
            result: tuple[list[Any], dict[str, Any]] = (words, textpage.extractDICT() if fonts else {})
        except MUPDF_ERRORS as exc:
            message = f"page {index + 1} of the PDF is damaged ({_short(exc)})"
            raise UnsupportedArtifact(message, hint=_RAW_HINT) from None
        yield result


def _focus_hint(page: int, count: int) -> str:
    last = min(count, page + 49)
    return f"the PDF is too big to index whole; read pages with @raw (e.g. pdftotext -f {page} -l {last} file.pdf -)"


def _page_text(words: list[Any]) -> str:
    """Blocks separated by a blank line, rows one line each, blank lines and control characters gone."""
    cleaned = (_block_text(_CONTROL.sub("\ufffd", block)) for block in page_text(words).split("\n\n"))
    return "\n\n".join(b for b in cleaned if b)


def _block_text(block: str) -> str:
    return "\n".join(x for x in (line.strip() for line in block.split("\n")) if x)


def _font_lines(page: int, offset: int, text: str, page_dict: dict[str, Any]) -> Iterator[FontLine]:
    """The dict's lines with their offsets in the page's text (lines not found there are skipped)."""
    cursor = 0
    for line, size, bold in _lines(page_dict):
        at = text.find(line, cursor)
        if at >= 0:
            yield FontLine(page, offset + at, line, size, bold)
            cursor = at + len(line)


def _lines(page_dict: dict[str, Any]) -> Iterator[tuple[str, float, bool]]:
    """(text, largest font size, all bold) of each non-blank text line, in mupdf's order."""
    for block in page_dict.get("blocks", ()):
        if block.get("type") != 0:
            continue
        for line in block.get("lines", ()):
            spans = line.get("spans", ())
            text = _CONTROL.sub("\ufffd", "".join(span.get("text", "") for span in spans)).strip()
            if text:
                inked = [s for s in spans if s.get("text", "").strip()]
                size = max((float(s.get("size", 0.0)) for s in inked), default=0.0)
                yield text, size, all(int(s.get("flags", 0)) & _BOLD for s in inked)


class _ViewBuilder:
    """Accumulates the full view page by page, recording where each page lands."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.size = 0
        self.marker_starts: list[int] = []
        self.text_starts: list[int] = []
        self.text_ends: list[int] = []

    def __len__(self) -> int:
        return self.size

    def _add(self, text: str) -> None:
        self.parts.append(text)
        self.size += len(text)

    def add_page(self, number: int, text: str) -> int:
        """Append page ``number``; returns the offset of its text."""
        if number > 1:
            self._add("\n\n")
        self.marker_starts.append(self.size)
        self._add(marker(number, bool(text)))
        if text:
            self._add("\n\n")
        start = self.size
        self.text_starts.append(start)
        self._add(text)
        self.text_ends.append(self.size)
        return start

    def text(self) -> str:
        return "".join(self.parts)


def _toc(doc: Any) -> list[tuple[int, str, int]]:
    try:
        raw = doc.get_toc(simple=True)
    except MUPDF_ERRORS:  # a damaged outline is no reason to refuse the text
        return []
    return [(int(level), str(title), int(page)) for level, title, page, *_ in raw]


def _title(doc: Any) -> str:
    meta = doc.metadata or {}
    title = "".join(c for c in str(meta.get("title") or "") if c.isprintable())
    return " ".join(title.split())[:200]


def _short(exc: Exception) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:120]
