"""systemd readiness (``Type=notify``): the sd_notify datagram protocol in pure Python.

When ``$NOTIFY_SOCKET`` is set (systemd started us), ``READY=1`` is sent once
the FUSE backend marks the mount's binding ready (``sparsefs.vfs.binding``) — the
mount answers requests — so units
ordered ``After=`` the mount start only then; ``STOPPING=1`` when it unmounts.
Without the variable every notify is a no-op. A foreground mount also prints,
once ready, what is mounted where and how to stop it (``announce``). The protocol is one datagram of
``KEY=VALUE`` lines to an AF_UNIX socket (a leading '@' names an abstract one).
"""

from __future__ import annotations

import os
import socket
import threading

from sparsefs.vfs.binding import LateBinding

_POLL_S = 0.02


def notify(state: str) -> bool:
    """Send ``state`` (e.g. 'READY=1') to systemd; False when not run by systemd or the send failed."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    target = "\0" + address[1:] if address.startswith("@") else address
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.sendto(state.encode(), target)
    except OSError:
        return False
    return True


class Readiness:
    """Tells systemd READY=1 once the backend marks ``binding`` ready, and STOPPING=1 at :meth:`stopping`."""

    def __init__(self, binding: LateBinding, backend: str, announce: str = "") -> None:
        self.binding = binding
        self.backend = backend
        self.announce = announce  # printed on stdout once ready (a foreground mount says where and how to stop)
        self._done = threading.Event()
        self.thread: threading.Thread | None = None
        if os.environ.get("NOTIFY_SOCKET") or announce:
            self.thread = threading.Thread(target=self._wait, name="sparsefs-sdnotify", daemon=True)
            self.thread.start()

    def _wait(self) -> None:
        while not self.binding.wait_ready(_POLL_S):
            if self._done.is_set():
                return
        if self.announce:
            print(self.announce, flush=True)
        notify(f"READY=1\nSTATUS=serving ({self.backend} backend)\nMAINPID={os.getpid()}")

    def stopping(self) -> None:
        """The mount is going away (unmounted or signalled)."""
        self._done.set()
        notify("STOPPING=1")
