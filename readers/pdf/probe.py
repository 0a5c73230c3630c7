"""A PDF's page count and the text of its first pages, in milliseconds: the guard's look before a parse.

PyMuPDF opens lazily: it reads the cross-reference table and the sampled
pages, not the whole file. The estimate of the full view's length is the
first pages' characters times the page count; it is only used to decide, and
the guard's card says only what is known (the page count).
"""

from __future__ import annotations

from typing import Any

import pymupdf

from readers.base import Glance
from readers.pdf.extract import MUPDF_LOCK

SAMPLE_PAGES = 2
MAX_BYTES = 512 * 1024 * 1024


def glance(path: str, size: int) -> Glance:
    """Pages and a sample of ``path`` (a file the caller opened, e.g. ``/proc/self/fd/N``)."""
    if size > MAX_BYTES:
        return Glance(size, "", "")
    mupdf: Any = pymupdf  # untyped
    with MUPDF_LOCK, mupdf.open(path, filetype="pdf") as doc:
        if doc.needs_pass:
            return Glance(0, "", "")  # locked: not readable as an artifact, so the bytes are all there is
        pages = int(doc.page_count)
        sample = "".join(str(doc[n].get_text()) for n in range(min(pages, SAMPLE_PAGES)))
    per_page = len(sample) / max(1, min(pages, SAMPLE_PAGES))
    return Glance(int(per_page * pages), f"{pages:,} pages", sample)
