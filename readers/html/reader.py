"""The HTML Reader: a saved web page, read as its main text.

Full view: the page's main text without boilerplate (navigation, headers and
footers, asides, scripts, cookie banners, menus), rendered as markdown-ish
text by :mod:`readers.html.extract` (``# Heading`` lines, paragraphs,
``- item`` lines, ``| a | b |`` table rows). Everything else is the Text
Reader's: sentence units, BM25, passages, ``L10-40`` and ``#Heading`` anchors
(the heading text as it appears on the page) and ``&scope=``.

Decoding never fails: a byte-order mark, else the charset the page declares
(``<meta charset>``, ``http-equiv``, an XML declaration), else UTF-8, else
windows-1252 with replacement characters. A file that is mostly control bytes
is refused as binary. Bounded: a tokenizer and no tree, so deep nesting costs
nothing extra; at most :attr:`HtmlReader.max_bytes` bytes.
"""

from __future__ import annotations

import codecs
import re

from readers import text as textreader
from readers.base import ArtifactSource, CostProfile, Parsed, UnsupportedArtifact
from readers.html.extract import Page, extract
from readers.kit.anchors import segmentation_of, segmented
from readers.kit.bounded import BoundedLines
from readers.kit.source import read_within
from readers.retrieval.segment import segment

_DECLARED = re.compile(rb"""<meta[^>]{0,200}?charset\s*=\s*["']?\s*([A-Za-z0-9._:-]{1,40})""", re.IGNORECASE)
_XML_DECLARED = re.compile(rb"""^\s*<\?xml[^>]{0,100}?encoding\s*=\s*["']([A-Za-z0-9._:-]{1,40})""", re.IGNORECASE)
_BOMS = ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))
_CONTROL = bytes(c for c in range(32) if c not in (9, 10, 12, 13))
BINARY_SHARE = 0.05
"""A file whose first 64 KiB are more than this share of control bytes is binary, not a page."""

_HINT = "read the original bytes with @raw"


class HtmlReader(textreader.TextReader):
    """Saved web pages (.html, .htm, .xhtml, or content starting with <!doctype html / <html)."""

    name = "html"
    extensions = frozenset({".html", ".htm", ".xhtml"})
    magic = (b"<!DOCTYPE html", b"<!DOCTYPE HTML", b"<!doctype html", b"<!doctype HTML", b"<html", b"<HTML")
    # (a page behind a byte-order mark is still recognised: looks_like_html, as the sniffer)
    cost = CostProfile(parse_ms_per_mb=650.0, per_call_chars=120, full_view_ratio=0.3)

    def accepts(self, name: str, head: bytes) -> bool:
        return textreader.extension_of(name) in self.extensions or looks_like_html(head)

    def parse(self, source: ArtifactSource) -> Parsed:
        data = read_within(source, self.max_bytes, "HTML", "read parts with @raw, or grep it")
        if _binary(data):
            raise UnsupportedArtifact("binary data, not an HTML page", hint=_HINT)
        html, charset = decode(data)
        page = extract(html.replace("\x00", "").lstrip("\ufeff"))
        if not page.text.strip():
            raise UnsupportedArtifact("the page has no visible text", hint=_HINT)
        text = page.text
        seg = segment(text, prose=True, markdown=True)
        return Parsed(
            full_view=text,
            kind="html",
            data={
                **segmented(seg, [text[s:e] for s, e in seg.units]),
                "page": page,
                "charset": charset,
                "source_bytes": len(data),
            },
        )

    def unit_word(self, parsed: Parsed) -> str:
        return "line groups" if segmentation_of(parsed).coarse else "sentences"

    def preview(self, parsed: Parsed, max_chars: int) -> str:
        if max_chars <= 0:
            return ""
        page: Page = parsed.data["page"]
        seg = segmentation_of(parsed)
        out = BoundedLines(max_chars)
        out.add(f'html page: "{page.title or "(no title)"}"'[: textreader.PREVIEW_LINE_CHARS])
        where = "marked main content" if page.used_main else "page body, link lists dropped"
        out.add(
            f"main text: {len(parsed.full_view):,} chars, {len(seg.line_starts):,} lines, {page.blocks:,} blocks "
            f"from {where} ({page.dropped:,} more blocks left out); "
            f"{page.links:,} links on the page, {page.links_kept:,} in the main text; "
            f"{parsed.data['source_bytes']:,} bytes, {parsed.data['charset']}"
        )
        outline = BoundedLines(out.room() * 3 // 5)
        textreader.outline_lines(outline, seg.headings, seg.headings_dropped)
        out.extend(outline)
        textreader.first_lines(out, parsed.full_view, seg.line_starts)
        return out.text()


def looks_like_html(head: bytes) -> bool:
    """True when the head (after a BOM and whitespace) opens an HTML document."""
    start = head[:1024]
    for bom, _ in _BOMS:
        if start.startswith(bom):
            start = start[len(bom) :]
            break
    start = start.lstrip().lower()
    return start.startswith((b"<!doctype html", b"<html"))


def _binary(data: bytes) -> bool:
    sample = data[:65536]
    if not sample or sample.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return False
    controls = len(sample) - len(sample.translate(None, _CONTROL))
    return controls > BINARY_SHARE * len(sample)


def decode(data: bytes) -> tuple[str, str]:
    """The page's text and the charset used (see the module docstring)."""
    for bom, codec in _BOMS:
        if data.startswith(bom):
            return data.decode(codec, "replace"), codec
    declared = _declared(data[:4096])
    for codec in dict.fromkeys([c for c in (declared, "utf-8") if c]):
        try:
            return data.decode(codec), codec
        except (UnicodeDecodeError, LookupError):
            continue
    return data.decode("cp1252", "replace"), "windows-1252 (fallback)"


def _declared(head: bytes) -> str | None:
    match = _DECLARED.search(head) or _XML_DECLARED.search(head)
    if not match:
        return None
    name = match.group(1).decode("ascii", "ignore").lower()
    try:
        codec = codecs.lookup(name).name
    except LookupError:
        return None
    # Browsers read latin-1/ascii declarations as windows-1252; UTF-16 without a BOM is a lie.
    if codec in ("latin-1", "iso8859-1", "ascii"):
        return "cp1252"
    return None if codec.startswith("utf-16") or codec.startswith("utf-32") else codec
