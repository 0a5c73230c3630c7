"""The one place where exceptions become errno values.

Exception tree seen by bindings::

    OSError(errno)         passthrough result or a deliberate refusal → that errno
    GrammarError           never reaches here: it becomes an error pack
    ReaderError            never reaches here: it becomes an error pack
    anything else          a bug → EIO, logged with its traceback; the mount stays up
"""

from __future__ import annotations

import errno
import logging

log = logging.getLogger("sparsefs")


def to_errno(exc: BaseException, operation: str) -> int:
    """The errno a request that raised ``exc`` must answer."""
    if isinstance(exc, OSError) and isinstance(exc.errno, int) and exc.errno > 0:
        return exc.errno
    log.error("internal error in %s: %r", operation, exc, exc_info=exc)
    return errno.EIO
