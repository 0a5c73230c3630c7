"""Extended attributes for the kernel backend: GETXATTR, LISTXATTR, SETXATTR, REMOVEXATTR.

Each is passed to the core (``Core.getxattr`` and friends: the source entry's own
attributes, reached through a confined O_PATH fd; generated files have none and
refuse changes). A file unlinked while open is reached through its kept fd, as
``fgetxattr`` on a local filesystem would.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from typing import TypeVar

from sparsefs.fuse.kernel import proto as k
from sparsefs.fuse.kernel.files import FileOps
from sparsefs.fuse.kernel.nodes import NodeTable
from sparsefs.vfs.core import Core

T = TypeVar("T")


class XattrOps:
    """The four xattr requests; thread-safe (no state of its own)."""

    def __init__(self, core: Core, nodes: NodeTable, files: FileOps) -> None:
        self.core = core
        self.nodes = nodes
        self.files = files

    def _on(self, nodeid: int, by_path: Callable[[str], T], by_fd: Callable[[int], T]) -> T:
        """By path while the node has one; through the kept fd of a file unlinked while open."""
        path = self.nodes.path(nodeid)
        if path is not None:
            return by_path(path)
        node = self.nodes.get(nodeid)
        with node.lock:
            if node.keeper_fd >= 0:
                return by_fd(node.keeper_fd)
        raise OSError(errno.ESTALE, "no longer in the tree")

    def getxattr(self, request: k.Request) -> bytes:
        size, _ = k.TWO_U32.unpack_from(request.body)
        (name,) = k.split_names(request.body[k.TWO_U32.size :], 1)
        value = self._on(request.nodeid, lambda path: self.core.getxattr(path, name),
                         lambda fd: os.getxattr(fd, name))
        return _sized(value, size)

    def listxattr(self, request: k.Request) -> bytes:
        size, _ = k.TWO_U32.unpack_from(request.body)
        names = self._on(request.nodeid, self.core.listxattr, os.listxattr)
        return _sized(b"".join(os.fsencode(name) + b"\0" for name in names), size)

    def setxattr(self, request: k.Request) -> bytes:
        size, flags = k.TWO_U32.unpack_from(request.body)
        raw = bytes(request.body[k.TWO_U32.size :])
        end = raw.index(b"\0")
        name, value = os.fsdecode(raw[:end]), raw[end + 1 : end + 1 + size]
        self._on(request.nodeid, lambda path: self.core.setxattr(path, name, value, flags),
                 lambda fd: os.setxattr(fd, name, value, flags))
        return b""

    def removexattr(self, request: k.Request) -> bytes:
        (name,) = k.split_names(request.body, 1)
        self._on(request.nodeid, lambda path: self.core.removexattr(path, name),
                 lambda fd: os.removexattr(fd, name))
        return b""


def _sized(value: bytes, size: int) -> bytes:
    """The protocol's two-step read: size 0 asks for the length only; too small a buffer is ERANGE."""
    if size == 0:
        return k.TWO_U32.pack(len(value), 0)
    if len(value) > size:
        raise OSError(errno.ERANGE, "buffer too small")
    return value
