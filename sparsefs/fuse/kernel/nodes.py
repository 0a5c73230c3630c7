"""Kernel node ids and the names they stand for. Pure bookkeeping, no I/O.

The kernel talks in node ids; the operations core talks in paths. A node is
one (parent node, name) the kernel has looked up, with the inode number it
named then. Paths are computed by walking parents, so renaming a directory
through the mount moves everything below it at once, and an open file keeps
its node (and its passthrough backing) across renames. When a later lookup of
the same name finds a different inode (the file was replaced), it gets a new
node id; the old one lives on, detached, until the kernel forgets it. Node ids
are never reused, so no generation counter is needed.

Lookup counts follow the protocol: every reply that hands the kernel an entry
(LOOKUP, CREATE, MKNOD, MKDIR, SYMLINK, LINK, each READDIRPLUS entry) adds
one; FORGET subtracts what the kernel says; a node at zero is dropped.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field

ROOT = 1


@dataclass(eq=False)
class Node:
    """One inode the kernel knows."""

    nodeid: int
    parent: int  # 0 once detached (unlinked, replaced, or renamed over)
    name: str
    ino: int
    nlookup: int = 0
    generated: bool = False  # an EvidencePack or control file: built by the core, never passthrough
    backing_id: int | None = None  # kernel passthrough backing, one per node
    keeper_fd: int = -1  # an fd on the file while it is open: fstat/fsync/ftruncate reach the opened inode
    open_count: int = 0  # passthrough handles the kernel holds on this node
    passthrough: bool = True  # False once passthrough failed here: a node never mixes the two modes
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class NodeTable:
    """Node ids ↔ (parent, name), thread-safe."""

    def __init__(self, root_ino: int) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count(ROOT + 1)
        root = Node(ROOT, 0, "", root_ino, nlookup=1)
        self._nodes: dict[int, Node] = {ROOT: root}
        self._by_name: dict[tuple[int, str], Node] = {}

    def __len__(self) -> int:
        return len(self._nodes)

    def get(self, nodeid: int) -> Node:
        node = self._nodes.get(nodeid)
        if node is None:
            raise KeyError(nodeid)
        return node

    def peek(self, nodeid: int) -> Node | None:
        return self._nodes.get(nodeid)

    def path(self, nodeid: int) -> str | None:
        """'/a/b' for a node still attached to the root, None for a detached one."""
        parts: list[str] = []
        with self._lock:
            node = self._nodes.get(nodeid)
            while node is not None and node.nodeid != ROOT:
                if node.parent == 0:
                    return None
                parts.append(node.name)
                node = self._nodes.get(node.parent)
        if node is None:
            return None
        return "/" + "/".join(reversed(parts))

    def child_path(self, parent: int, name: str) -> str | None:
        base = self.path(parent)
        if base is None:
            return None
        return base + name if base == "/" else f"{base}/{name}"

    def remember(self, parent: int, name: str, ino: int, generated: bool = False) -> Node:
        """The node for ``name`` in ``parent`` (new if it named another inode), counted once more."""
        with self._lock:
            node = self._by_name.get((parent, name))
            if node is None or node.ino != ino or node.generated != generated:
                if node is not None:
                    node.parent = 0
                node = Node(next(self._ids), parent, name, ino, generated=generated)
                self._nodes[node.nodeid] = node
                self._by_name[(parent, name)] = node
            node.nlookup += 1
            return node

    def find(self, path: str) -> Node | None:
        """The attached node for '/a/b', if the kernel knows one."""
        node: Node | None = self._nodes[ROOT]
        with self._lock:
            for name in filter(None, path.split("/")):
                node = self._by_name.get((node.nodeid, name)) if node is not None else None
        return node

    def forget(self, nodeid: int, count: int) -> Node | None:
        """Subtract ``count`` lookups; the node if that dropped it (its resources are the caller's to free)."""
        with self._lock:
            node = self._nodes.get(nodeid)
            if node is None or nodeid == ROOT:
                return None
            node.nlookup -= count
            if node.nlookup > 0:
                return None
            del self._nodes[nodeid]
            if node.parent and self._by_name.get((node.parent, node.name)) is node:
                del self._by_name[(node.parent, node.name)]
            return node

    def detach(self, parent: int, name: str) -> None:
        """``name`` is gone from ``parent`` (unlink, rmdir)."""
        with self._lock:
            node = self._by_name.pop((parent, name), None)
            if node is not None:
                node.parent = 0

    def rename(self, parent: int, name: str, new_parent: int, new_name: str, exchange: bool = False) -> None:
        """Move the entry; whatever ``new_name`` named is replaced, or swapped in with ``exchange``."""
        with self._lock:
            moving = self._by_name.pop((parent, name), None)
            target = self._by_name.pop((new_parent, new_name), None)
            if target is not None:
                if exchange:
                    self._place(target, parent, name)
                else:
                    target.parent = 0
            if moving is not None:
                self._place(moving, new_parent, new_name)

    def _place(self, node: Node, parent: int, name: str) -> None:
        node.parent, node.name = parent, name
        self._by_name[(parent, name)] = node

    def all_nodes(self) -> list[Node]:
        with self._lock:
            return list(self._nodes.values())
