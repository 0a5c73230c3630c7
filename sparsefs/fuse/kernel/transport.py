"""The /dev/fuse transport: mounting, the device and its ioctls, reading requests and writing replies.

Nothing here knows what a request means: a reader hands the dispatcher
(``sparsefs.fuse.kernel.dispatch``) one request at a time and the dispatcher
hands back reply bytes to :meth:`FuseDevice.send`. A reply must go back on the
fd its request came from, so every reader thread owns one (cloned) fd.

A reader keeps polling its non-blocking fd for ``spin_us`` after each request
before it sleeps in poll(2): on the measured 2-vCPU machine waking a sleeping
thread cost more than most requests (small files warm 5.5x -> 3x native at
200 us).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import select
import threading
import time
from collections.abc import Callable

from sparsefs.fuse.kernel import proto as k

log = logging.getLogger("sparsefs.kernel")

MAX_WRITE = 1 << 20
BUFFER_SIZE = MAX_WRITE + 8192  # the kernel wants room for one full WRITE plus headers
_GONE = (errno.ENOENT, errno.ENODEV)  # reply to an interrupted request / connection ended
_RETRY = (errno.EINTR, errno.EAGAIN, errno.ENOENT)


class FuseDevice:
    """An open /dev/fuse connection and its ioctls."""

    def __init__(self, fd: int = -1) -> None:
        """``fd``: the mounted /dev/fuse fd (``sparsefs.fuse.kernel.mounting``), set once mounted."""
        self.fd = fd

    def clone(self) -> int | None:
        """A new fd on this connection for another reader thread; None if /dev/fuse cannot be opened here
        (an unprivileged daemon whose fd fusermount3 opened, on a host where /dev/fuse is 0600): the
        thread then shares this fd."""
        try:
            fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
        except PermissionError:
            return None
        try:
            fcntl.ioctl(fd, k.DEV_IOC_CLONE, bytearray(k.U32.pack(self.fd)), True)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def backing_open(self, fd: int) -> int:
        # Only a mutable buffer with mutate_flag makes fcntl.ioctl return the syscall's result.
        return int(fcntl.ioctl(self.fd, k.DEV_IOC_BACKING_OPEN, bytearray(k.BACKING_MAP.pack(fd, 0, 0)), True))

    def backing_close(self, backing_id: int) -> None:
        fcntl.ioctl(self.fd, k.DEV_IOC_BACKING_CLOSE, bytearray(k.U32.pack(backing_id)), True)

    def send(self, fd: int, data: bytes) -> None:
        """Write one reply; a reply the kernel no longer wants (interrupted, unmounted) is dropped."""
        try:
            os.write(fd, data)
        except OSError as err:
            if err.errno not in _GONE:
                log.error("reply of %d bytes refused: %s", len(data), err)

    def send_parts(self, fd: int, unique: int, payload: memoryview) -> None:
        """A successful reply whose payload is sent from where it lies (a READ's buffer): no copy in Python."""
        try:
            os.writev(fd, [k.OUT_HEADER.pack(k.OUT_HEADER.size + len(payload), 0, unique), payload])
        except OSError as err:
            if err.errno not in _GONE:
                log.error("reply of %d bytes refused: %s", len(payload), err)

    def notify(self, code: int, payload: bytes) -> bool:
        """Send a notification (unique 0); False if the kernel refused it (an old kernel, a gone node)."""
        try:
            os.write(self.fd, k.notification(code, payload))
        except OSError as err:
            log.debug("notification %d: %s", code, err)
            return False
        return True

    def close(self) -> None:
        os.close(self.fd)


_buffers = threading.local()


def read_buffer(size: int) -> memoryview:
    """A ``size``-byte view of this thread's read buffer (grown as needed, never shrunk): a READ reads into
    it and its reply is sent from it (``FuseDevice.send_parts``) before the thread reads its next request."""
    buffer: bytearray | None = getattr(_buffers, "buffer", None)
    if buffer is None or len(buffer) < size:
        buffer = _buffers.buffer = bytearray(max(size, 1 << 17))
    return memoryview(buffer)[:size]


def read_first(fd: int) -> bytes:
    """One request, blocking (INIT, before any reader thread runs)."""
    while True:
        try:
            return os.read(fd, BUFFER_SIZE)
        except OSError as err:
            if err.errno not in _RETRY:
                raise


def request_reader(fd: int, spin_ns: int) -> Callable[[], bytes | None]:
    """A function returning the next request read from ``fd`` (None once the connection is gone).

    One buffer per reader, read into (allocating a 1 MiB bytes object per request cost ~15 µs);
    each request is copied out, since pool requests outlive the buffer. With ``spin_ns`` the fd
    is polled that long after each request before the thread sleeps.
    """
    buffer = bytearray(BUFFER_SIZE)
    view = memoryview(buffer)
    read = _spinning(fd, spin_ns) if spin_ns > 0 else _blocking(fd)

    def next_request() -> bytes | None:
        size = read(buffer)
        return bytes(view[:size]) if size > 0 else None

    return next_request


def _blocking(fd: int) -> Callable[[bytearray], int]:
    def read(buffer: bytearray) -> int:
        while True:
            try:
                return os.readv(fd, [buffer])
            except OSError as err:
                if err.errno not in _RETRY:
                    raise

    return read


def _spinning(fd: int, spin_ns: int) -> Callable[[bytearray], int]:
    """Read from a non-blocking ``fd``, retrying for ``spin_ns`` before sleeping in poll(2)."""
    os.set_blocking(fd, False)
    poller = select.poll()
    poller.register(fd, select.POLLIN)

    def read(buffer: bytearray) -> int:
        deadline = time.perf_counter_ns() + spin_ns
        while True:
            try:
                return os.readv(fd, [buffer])
            except BlockingIOError:
                if time.perf_counter_ns() > deadline:
                    poller.poll()
                    deadline = time.perf_counter_ns() + spin_ns
            except OSError as err:
                if err.errno not in _RETRY:
                    raise

    return read
