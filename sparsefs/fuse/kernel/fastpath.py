"""The two requests every file read costs, answered straight from the raw request: OPEN and RELEASE.

``grep -r``, ``rg``, ``cat`` and ``tar`` cost one OPEN and one RELEASE per
file (issue 26, item 3). The general path (``sparsefs.fuse.kernel.dispatch``)
builds a request object, records the caller, finds the handler and maps
errors; for a read-only reopen of a kept file (no system call but the
revalidation's ``fstat``) and for a RELEASE, the reader answers from the raw
bytes instead, and anything else (a first open, a write, a guard card, a
generated file, an error) falls back to the general path.

A RELEASE is answered first and its bookkeeping done after: the kernel sends
it in the background (the closing process does not wait), so the reply costs
the next request nothing but a write, and the work runs while the caller is
busy with the file it opened next.
"""

from __future__ import annotations

import logging
import struct

from sparsefs.fuse.kernel import proto as k
from sparsefs.fuse.kernel.dispatch import Dispatcher
from sparsefs.fuse.kernel.ops import KernelOps

log = logging.getLogger("sparsefs.kernel")

_HEAD = struct.Struct("=IQQ")  # opcode unique nodeid, at offset 4 of the request header
_RELEASE_REPLY_LEN = k.OUT_HEADER.size


class FastPath:
    """Answers OPEN (read-only reopen) and RELEASE from raw request bytes; thread-safe."""

    def __init__(self, ops: KernelOps, dispatcher: Dispatcher) -> None:
        self.ops = ops
        self.dispatcher = dispatcher
        self.device = dispatcher.device

    def answer(self, fd: int, raw: bytes) -> bool:
        """True if ``raw`` was answered here; False: dispatch it as usual."""
        opcode, unique, nodeid = _HEAD.unpack_from(raw, 4)
        if opcode == k.OPEN:
            return self._open(fd, raw, unique, nodeid)
        if opcode == k.RELEASE:
            return self._release(fd, raw, unique)
        return False

    def _open(self, fd: int, raw: bytes, unique: int, nodeid: int) -> bool:
        flags, open_flags = k.OPEN_IN.unpack_from(raw, k.IN_HEADER.size)
        if open_flags:
            return False
        try:
            payload = self.ops.reopen(nodeid, flags)
        except Exception:  # noqa: BLE001 - the general path answers it again, with its errno
            return False
        if payload is None:
            return False
        self.dispatcher.counts[k.OPEN] += 1
        self.device.send(fd, k.OUT_HEADER.pack(k.OUT_HEADER.size + len(payload), 0, unique) + payload)
        return True

    def _release(self, fd: int, raw: bytes, unique: int) -> bool:
        (fh,) = k.U64.unpack_from(raw, k.IN_HEADER.size)
        self.dispatcher.counts[k.RELEASE] += 1
        self.device.send(fd, k.OUT_HEADER.pack(_RELEASE_REPLY_LEN, 0, unique))
        try:
            self.ops.files.release(fh)
        except Exception:  # already answered; the loop goes on
            log.exception("release of handle %d failed", fh)
        return True
