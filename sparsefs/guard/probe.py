"""Cheap facts about a file for a guard decision that must not wait for a parse.

A FUSE open must answer quickly (on the kernel backend one slow open stalls
every request behind it), and a cold parse of a 250-page PDF takes seconds.
So when the artifact is not parsed yet, the guard decides from what is cheap:
``stat``, the extension, and a bounded look at the file — the first
``HEAD_BYTES`` of a text file, or what the Reader's own probe finds (a PDF's
page count and the text of its first pages: ``readers.pdf.probe``). What
applies to an extension is its registration's (``readers.registry.guarding``:
``probe``, ``chars_per_byte``, ``binary``). The estimate of the full view's
length ``L`` this gives is only used to decide; the card says what is known
(bytes, pages) and never an estimated ``L``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from readers import registry
from readers.base import Glance
from sparsefs.source.rootfs import SourceRoot

log = logging.getLogger("sparsefs.guard")

HEAD_BYTES = 4096
Probe = Glance


def probe(root: SourceRoot, rel: str, size: int) -> Probe:
    """Facts about ``rel`` without parsing it; falls back to the size alone."""
    ext = os.path.splitext(rel)[1].lower()
    registration = registry.guarding(ext)
    if registration is not None and registration.probe:
        return _look(root, rel, size, registry.resolve(registration.probe, registration))
    ratio = registration.chars_per_byte.get(ext) if registration is not None else None
    binary = registration is not None and ext in registration.binary
    if ratio is not None:
        return Probe(int(size * ratio), "", "" if binary else _head(root, rel))
    if binary:
        return Probe(size, "", "")
    return Probe(size, f"up to {size:,} characters", _head(root, rel))  # UTF-8: never more characters than bytes


def _head(root: SourceRoot, rel: str) -> str:
    fd = root.open_file(rel, os.O_RDONLY | os.O_NONBLOCK)
    try:
        data = os.pread(fd, HEAD_BYTES, 0)
    finally:
        os.close(fd)
    return data.decode("utf-8", "replace").rpartition("\n")[0] or data.decode("utf-8", "replace")


def _look(root: SourceRoot, rel: str, size: int, look: Callable[[str, int], Glance]) -> Probe:
    """The Reader's probe, handed the file opened confined to the root (it never resolves the name itself)."""
    fd = root.open_file(rel, os.O_RDONLY | os.O_NONBLOCK)
    try:
        return look(f"/proc/self/fd/{fd}", size)
    finally:
        os.close(fd)
