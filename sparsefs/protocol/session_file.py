"""``.sparsefs/session``: the one writable control file, behaving like one small file.

While any process has it open for writing there is one shared draft, as
there is one inode on disk: writes land at their offsets (``O_APPEND``
writes at its end), a truncate by path or by handle cuts it for every
writer, and when the last writer closes, the draft becomes the session
intent. The kernel backend does not negotiate atomic O_TRUNC, so ``echo x >``
arrives as a truncate by path followed by an open: both touch the same draft.
Writes past MAX_SESSION_BYTES are accepted and dropped (the intent is cut,
never wiped); ``normalize_session`` turns control bytes into spaces.
"""

from __future__ import annotations

import errno
import os
import threading

from sparsefs.protocol.intents import MAX_SESSION_CHARS, SessionIntent

MAX_SESSION_BYTES = 4 * MAX_SESSION_CHARS
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


class SessionFile:
    """The shared draft of ``.sparsefs/session`` and when it becomes the session intent."""

    def __init__(self, session: SessionIntent) -> None:
        self.session = session
        self._lock = threading.Lock()
        self._draft: bytearray | None = None
        self._writers = 0
        self._dirty = False

    def opened(self, flags: int) -> bytearray | None:
        """The shared draft for a writer (None for a reader, who sees the session intent)."""
        if not flags & WRITE_FLAGS:
            return None
        with self._lock:
            if self._draft is None:
                self._draft, self._dirty = bytearray(self.session.content()), False
            if flags & os.O_TRUNC:
                del self._draft[:]
                self._dirty = True
            self._writers += 1
            return self._draft

    def write(self, data: bytes, offset: int, append: bool) -> int:
        with self._lock:
            draft = self._draft
            if draft is None:
                raise OSError(errno.EBADF, "the session file is not open for writing")
            start = len(draft) if append else offset
            kept = data[: max(0, MAX_SESSION_BYTES - start)]
            if kept:
                draft[len(draft) : start] = bytes(max(0, start - len(draft)))
                draft[start : start + len(kept)] = kept
            self._dirty = True
        return len(data)

    def truncate(self, length: int) -> None:
        with self._lock:
            if self._draft is not None:
                del self._draft[length:]
                self._dirty = True
                return
        self.session.set(self.session.content()[:length].decode("utf-8", "replace"))

    def closed(self) -> None:
        """A writer closed; the last one turns the draft into the session intent."""
        with self._lock:
            self._writers -= 1
            if self._writers > 0 or self._draft is None:
                return
            draft, dirty, self._draft = bytes(self._draft), self._dirty, None
        if dirty:
            self.session.set(draft.decode("utf-8", "replace"))
