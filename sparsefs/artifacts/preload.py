"""A fleet host warms up before it mounts (issue 26, item 6): every Reader imported, the dense model loaded.

A host whose shared store (``--cache``) already holds a document's parse,
indexes and vectors answers its first intent read without parsing anything;
what was left of that read was per-process start-up: importing the Reader
(pymupdf for a PDF: a quarter of a second) and loading the embedding model
(onnxruntime and its session: half a second). A mount with ``--cache`` does
both while the daemon builds its core, and mounts once they are done (waiting
at most :data:`WAIT_S`), so its first read pays neither. A mount without a
shared store starts as before: its first read parses anyway, and a test suite
mounts hundreds of times.
"""

from __future__ import annotations

import logging
import threading
import time

from readers import registry
from readers.base import UnsupportedArtifact
from readers.retrieval import dense

log = logging.getLogger("sparsefs.preload")

WAIT_S = 15.0


def start() -> threading.Thread:
    """Begin warming up on a thread of its own."""
    thread = threading.Thread(target=_warm, name="sparsefs-preload", daemon=True)
    thread.start()
    return thread


def wait(thread: threading.Thread, timeout: float = WAIT_S) -> None:
    """Let the warm-up finish (at most ``timeout`` seconds: a slow one goes on behind the mount)."""
    thread.join(timeout)
    if thread.is_alive():
        log.warning("warming up took over %.0f s; mounting now, the first evidence read may wait for it", timeout)


def _warm() -> None:
    started = time.monotonic()
    for registration in registry.registrations():
        try:
            registry.load(registration)
        except UnsupportedArtifact as err:  # an extra not installed: that Reader says so when asked
            log.debug("not preloaded: %s", err)
    dense.available()  # loads the model if the extra is installed; never raises
    log.info("warmed up in %.2f s (Readers, dense model)", time.monotonic() - started)
