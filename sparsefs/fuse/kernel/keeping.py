"""Files the kernel backend keeps while nobody has them open, and when it lets them go.

A node keeps its keeper fd (and, under passthrough, its backing id) after its
last close, so the next open of the same file costs no system call. Idle files
are kept in two tiers: with their keeper fd, up to ``limit`` (half the fd
limit), then with their backing id only (up to :data:`BACKED_LIMIT`: kernel
memory, no fd; for a file served without passthrough this tier holds nothing
but its place in the order). A file is let go for good when the kernel
forgets its node, when it leaves the tree while nobody has it open (its disk
space must not be held), or when it falls out of the second tier.
"""

from __future__ import annotations

import logging
import os
import resource
import threading
from collections import OrderedDict
from typing import Protocol

from sparsefs.fuse.kernel.nodes import Node

log = logging.getLogger("sparsefs.kernel")

BACKED_LIMIT = 131_072  # idle files kept by backing id alone (kernel memory, no fd)


class Backings(Protocol):
    def backing_close(self, backing_id: int) -> None: ...


class IdleFiles:
    """The two tiers of idle files, least recently closed first; thread-safe."""

    def __init__(self, device: Backings) -> None:
        self.device = device
        self.limit = max(64, resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 2)
        self._lock = threading.Lock()
        self._idle: OrderedDict[int, Node] = OrderedDict()  # kept files nobody has open, oldest first
        self._backed: OrderedDict[int, Node] = OrderedDict()  # idle past the fd budget: backing id only

    def count(self) -> int:
        with self._lock:
            return len(self._idle) + len(self._backed)

    def busy(self, node: Node) -> None:
        """``node`` is open again: it is no longer idle."""
        with self._lock:
            self._idle.pop(node.nodeid, None)
            self._backed.pop(node.nodeid, None)

    def keep(self, node: Node) -> None:
        """Keep a file nobody has open: its keeper within the fd budget, then its backing id alone."""
        with self._lock:
            self._idle[node.nodeid] = node
            self._idle.move_to_end(node.nodeid)
            demoted = [self._idle.popitem(last=False)[1] for _ in range(len(self._idle) - self.limit)]
            for victim in demoted:
                self._backed[victim.nodeid] = victim
            excess = [self._backed.popitem(last=False)[1] for _ in range(len(self._backed) - BACKED_LIMIT)]
        for victim in demoted:
            _drop_keeper(victim)
        for victim in excess:
            self.let_go(victim)

    def let_go(self, node: Node) -> None:
        """Close the keeper and the backing id of a node nobody has open (a no-op while it is open)."""
        with node.lock:
            if node.open_count > 0 or node.cached_opens > 0:  # cached_opens: also write handles through the daemon
                return
            keeper, node.keeper_fd = node.keeper_fd, -1
            backing, node.backing_id = node.backing_id, None
        self.busy(node)
        close_fd(keeper)
        if backing is not None:
            try:
                self.device.backing_close(backing)
            except OSError as err:
                log.debug("backing close %d: %s", backing, err)


def _drop_keeper(node: Node) -> None:
    with node.lock:
        if node.open_count > 0:
            return
        keeper, node.keeper_fd = node.keeper_fd, -1
    close_fd(keeper)


def close_fd(fd: int) -> None:
    if fd >= 0:
        os.close(fd)
