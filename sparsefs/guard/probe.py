"""Cheap facts about a file for a guard decision that must not wait for a parse.

A FUSE open must answer quickly (on the kernel backend one slow open stalls
every request behind it), and a cold parse of a 250-page PDF takes seconds.
So when the artifact is not parsed yet, the guard decides from what is cheap:
``stat``, the extension, and a bounded look at the file — the first
``HEAD_BYTES`` of a text file, or a PDF's page count and the text of its
first pages (PyMuPDF opens lazily; a few pages cost milliseconds). The
estimate of the full view's length ``L`` this gives is only used to decide;
the card says what is known (bytes, pages) and never an estimated ``L``.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

from sparsefs.source.rootfs import SourceRoot

log = logging.getLogger("sparsefs.guard")

HEAD_BYTES = 4096
PDF_SAMPLE_PAGES = 2
PDF_PROBE_MAX_BYTES = 512 * 1024 * 1024
# Markup loses most of its bytes in the full view; spreadsheets and PDFs are compressed.
_CHARS_PER_BYTE = {".html": 0.35, ".htm": 0.35, ".xhtml": 0.35, ".xml": 0.5, ".xlsx": 2.0}


@dataclass(frozen=True)
class Probe:
    """What a cheap look found: an estimate of L (to decide), facts and a preview (for the card)."""

    estimate: int
    facts: str
    preview: str


def probe(root: SourceRoot, rel: str, size: int) -> Probe:
    """Facts about ``rel`` without parsing it; falls back to the size alone."""
    ext = os.path.splitext(rel)[1].lower()
    if ext == ".pdf":
        return _pdf(root, rel, size)
    if ext in _CHARS_PER_BYTE:
        return Probe(int(size * _CHARS_PER_BYTE[ext]), "", "" if ext == ".xlsx" else _head(root, rel))
    return Probe(size, f"up to {size:,} characters", _head(root, rel))  # UTF-8: never more characters than bytes


def _head(root: SourceRoot, rel: str) -> str:
    fd = root.open_file(rel, os.O_RDONLY | os.O_NONBLOCK)
    try:
        data = os.pread(fd, HEAD_BYTES, 0)
    finally:
        os.close(fd)
    return data.decode("utf-8", "replace").rpartition("\n")[0] or data.decode("utf-8", "replace")


def _pdf(root: SourceRoot, rel: str, size: int) -> Probe:
    if size > PDF_PROBE_MAX_BYTES:
        return Probe(size, "", "")
    import pymupdf

    from readers.pdf.extract import MUPDF_LOCK

    mupdf: Any = pymupdf  # untyped
    fd = root.open_file(rel, os.O_RDONLY | os.O_NONBLOCK)
    try:  # PyMuPDF reads the cross-reference table and the sampled pages, not the whole file
        with MUPDF_LOCK, mupdf.open(f"/proc/self/fd/{fd}", filetype="pdf") as doc:
            if doc.needs_pass:
                return Probe(0, "", "")  # locked: not readable as an artifact, so the bytes are all there is
            pages = int(doc.page_count)
            sample = "".join(str(doc[n].get_text()) for n in range(min(pages, PDF_SAMPLE_PAGES)))
    finally:
        os.close(fd)
    per_page = len(sample) / max(1, min(pages, PDF_SAMPLE_PAGES))
    return Probe(int(per_page * pages), f"{pages:,} pages", sample)
