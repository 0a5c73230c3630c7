"""Open files unlinked through an mfusepy mount: held by the daemon under libfuse's hidden name.

libfuse's path layer answers ``fstat`` on a file unlinked while open with
ESTALE when it forgets the name at once (``hard_remove``): the kernel sends
``fstat`` as a GETATTR without the handle, and libfuse finds no path for the
node. So SparseFS lets libfuse hide the open file instead — it renames it to
``.fuse_hiddenXXXXXXXXXXXXXXXX`` in the same directory and keeps asking by that
name — but that name never reaches the source. The "rename" holds the file by
an ``O_PATH`` fd and unlinks it in the source at once (so the source looks
exactly as after a local unlink: no ``.fuse_hidden*`` file, ever); every later
request on the hidden name (fstat, fchmod, fchown, futimens, ftruncate,
fgetxattr, a reopen through ``/proc/PID/fd``) is answered through that fd; the
last close makes libfuse unlink the hidden name, which lets the fd go.

When libfuse hides a file that a rename is about to replace, the source name
is absent for the microseconds between that unlink and the rename. Through the
mount nobody sees it (libfuse holds both names locked for the whole request);
a process reading the source directly (mirror mode) could.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable
from typing import TypeVar

from sparsefs.source.rootfs import SourceRoot, relative, stat_dict

PREFIX = ".fuse_hidden"
T = TypeVar("T")


def is_hidden_name(path: str) -> bool:
    """A name libfuse gives a hidden file: ``.fuse_hidden`` and 16 hex digits."""
    name = path.rpartition("/")[2]
    return len(name) == len(PREFIX) + 16 and name.startswith(PREFIX)


class HiddenFiles:
    """Hidden name → an O_PATH fd on the unlinked file; thread-safe."""

    def __init__(self, root: SourceRoot) -> None:
        self.root = root
        self._fds: dict[str, int] = {}
        self._lock = threading.Lock()

    def holds(self, path: str | None) -> bool:
        """Is ``path`` a hidden file held here? (A substring test first: this is on every request.)"""
        if path is None or PREFIX not in path:
            return False
        with self._lock:
            return path in self._fds

    def hide(self, path: str, hidden: str) -> None:
        """libfuse's ``rename(path, hidden)``: hold the file, unlink its source name."""
        rel = relative(path)
        fd = self.root.open_file(rel, os.O_PATH | os.O_NOFOLLOW)
        try:
            self.root.unlink(rel)
        except BaseException:
            os.close(fd)
            raise
        with self._lock:
            old = self._fds.pop(hidden, None)
            self._fds[hidden] = fd
        if old is not None:
            os.close(old)

    def forget(self, hidden: str) -> None:
        """libfuse unlinks the hidden name at the last close: let the file go."""
        with self._lock:
            fd = self._fds.pop(hidden, None)
        if fd is not None:
            os.close(fd)

    def on(self, hidden: str, action: Callable[[str], T]) -> T:
        """``action('/proc/self/fd/N')`` on the held file (following that link reaches the file itself)."""
        with self._lock:
            fd = self._fds.get(hidden)
            if fd is None:
                raise OSError(errno.ENOENT, "no such hidden file")
            return action(f"/proc/self/fd/{fd}")

    def getattr(self, hidden: str) -> dict[str, int]:
        return self.on(hidden, lambda path: stat_dict(os.stat(path)))

    def reopen(self, hidden: str, flags: int) -> int:
        """A new open of the unlinked file (``open('/proc/PID/fd/N')`` by its holder)."""
        return self.on(hidden, lambda path: os.open(path, (flags & ~os.O_CREAT) | os.O_CLOEXEC))

    def close_all(self) -> None:
        with self._lock:
            fds, self._fds = list(self._fds.values()), {}
        for fd in fds:
            os.close(fd)
