"""The kernel backend's dispatcher: one request in, one reply out.

A request that may build an EvidencePack (a lookup of an '@' name, anything on
a generated file) or wait long for the disk (fsync) runs on a small pool, so a
slow pack never holds a plain request behind it; everything else is answered
on the thread that read it. Any exception becomes an errno reply (EIO for bugs,
logged); the loop goes on. An INTERRUPT cancels a pooled request that has not
started (EINTR); a running one finishes.
"""

from __future__ import annotations

import collections
import errno
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from sparsefs.fuse.errors import to_errno
from sparsefs.fuse.kernel import proto as k
from sparsefs.fuse.kernel.ops import KernelOps
from sparsefs.fuse.kernel.transport import FuseDevice

SLOW_WORKERS = 4
_SLOW_ON_GENERATED = frozenset({k.GETATTR, k.OPEN, k.OPENDIR, k.READDIR, k.READDIRPLUS, k.ACCESS, k.LOOKUP,
                                k.READ})  # a READ by node (--no-open) may have to build its pack again
_SLOW_ALWAYS = frozenset({k.FSYNC, k.FSYNCDIR})  # may wait for the disk for seconds
_AT = ord("@")
Handler = Callable[[k.Request], bytes | memoryview | None]


class Dispatcher:
    """Requests to ``KernelOps`` handlers, replies to the device; thread-safe."""

    def __init__(self, ops: KernelOps, device: FuseDevice) -> None:
        self.ops = ops
        self.device = device
        self.handlers = handler_table(ops)
        self.pool = ThreadPoolExecutor(SLOW_WORKERS, thread_name_prefix="sparsefs-slow")
        self.counts: collections.Counter[int] = collections.Counter()  # requests per opcode (stats.json)
        self.busy_ns: collections.Counter[int] = collections.Counter()  # CPU answering them (SPARSEFS_REQUEST_CPU)
        self._pending: dict[int, tuple[int, Future[None]]] = {}
        self._pending_lock = threading.Lock()

    def dispatch(self, fd: int, request: k.Request) -> None:
        """Answer ``request`` (read from ``fd``) here, or on the pool if it may be slow."""
        opcode = request.opcode
        self.counts[opcode] += 1
        if opcode == k.INTERRUPT:
            self._interrupt(request)
        elif opcode in _SLOW_ALWAYS or (opcode in _SLOW_ON_GENERATED and self._may_build(request)):
            future = self.pool.submit(self.answer, fd, request)
            with self._pending_lock:
                self._pending[request.unique] = (fd, future)
            future.add_done_callback(lambda _: self._forget_pending(request.unique))
        else:
            self.answer(fd, request)

    def _may_build(self, request: k.Request) -> bool:
        """Could this build an EvidencePack? (The control tree renders in microseconds: stats.json, ready and
        git's fsmonitor queries are answered inline; a pack's name has an '@'.)"""
        node = self.ops.nodes.peek(request.nodeid)
        if node is not None and node.generated and not self.ops.in_control_tree(node):
            return True
        return request.opcode == k.LOOKUP and _AT in request.body  # a memoryview holds ints

    def answer(self, fd: int, request: k.Request) -> None:
        handler = self.handlers.get(request.opcode)
        if handler is None:
            self.device.send(fd, k.reply(request.unique, error=errno.ENOSYS))
            return
        self.ops.set_caller(request)
        try:
            payload = handler(request)
        except Exception as exc:  # noqa: BLE001 - one request's failure must not end the loop
            self.device.send(fd, k.reply(request.unique, error=to_errno(exc, getattr(handler, "__name__", "op"))))
            return
        if isinstance(payload, memoryview):
            self.device.send_parts(fd, request.unique, payload)
        elif payload is not None:
            self.device.send(fd, k.reply(request.unique, payload))

    def _interrupt(self, request: k.Request) -> None:
        """A caller gave up: answer EINTR if its request has not started yet (running ones finish)."""
        (unique,) = k.U64.unpack_from(request.body)
        with self._pending_lock:
            fd, future = self._pending.get(unique, (-1, None))
        if future is not None and future.cancel():
            self.device.send(fd, k.reply(unique, error=errno.EINTR))

    def _forget_pending(self, unique: int) -> None:
        with self._pending_lock:
            self._pending.pop(unique, None)

    def requests(self) -> dict[str, int]:
        """Requests answered so far, per opcode name (``kernel_requests`` in stats.json)."""
        return {k.OPCODE_NAMES.get(code, str(code)): count for code, count in sorted(self.counts.items())}

    def request_us(self) -> dict[str, float]:
        """Mean CPU microseconds a reader thread spent answering each opcode (reply included; for requests
        handed to the pool, only the handing over; CPU, not wall time, so a loaded machine does not inflate
        it): ``kernel_request_us`` in stats.json, measured only with ``SPARSEFS_REQUEST_CPU=1`` (it costs
        two system calls per request)."""
        return {k.OPCODE_NAMES.get(code, str(code)): round(busy / 1000 / self.counts[code], 1)
                for code, busy in sorted(self.busy_ns.items()) if self.counts[code]}

    def shutdown(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


def handler_table(ops: KernelOps) -> dict[int, Handler]:
    """Opcode → handler. OPENDIR is absent on purpose: its ENOSYS tells the kernel to open directories
    without asking (no OPENDIR, no RELEASEDIR) and to cache their listings (sparsefs.fuse.kernel.dirs)."""
    return {
        k.LOOKUP: ops.lookup, k.FORGET: ops.forget, k.BATCH_FORGET: ops.batch_forget,
        k.GETATTR: ops.getattr, k.SETATTR: ops.setattr, k.READLINK: ops.readlink, k.SYMLINK: ops.symlink,
        k.MKNOD: ops.mknod, k.MKDIR: ops.mkdir, k.UNLINK: ops.unlink, k.RMDIR: ops.rmdir,
        k.RENAME: ops.rename, k.RENAME2: ops.rename2, k.LINK: ops.link, k.OPEN: ops.open, k.READ: ops.read,
        k.WRITE: ops.write, k.STATFS: ops.statfs, k.RELEASE: ops.release, k.FSYNC: ops.fsync,
        k.READDIR: ops.dirs.readdir, k.READDIRPLUS: ops.dirs.readdirplus,
        k.RELEASEDIR: ops.dirs.releasedir, k.FSYNCDIR: ops.dirs.fsyncdir, k.ACCESS: ops.access, k.CREATE: ops.create,
        k.GETXATTR: ops.xattrs.getxattr, k.LISTXATTR: ops.xattrs.listxattr, k.SETXATTR: ops.xattrs.setxattr,
        k.REMOVEXATTR: ops.xattrs.removexattr, k.DESTROY: lambda request: b"",
    }
