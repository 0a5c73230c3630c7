"""Kernel node ids and the names they stand for. Pure bookkeeping, no I/O.

The kernel talks in node ids; the operations core talks in paths. A node is
one inode the kernel has looked up, under one or more (parent node, name)
entries. Paths are computed by walking parents from the node's first name, so
renaming a directory through the mount moves everything below it at once, and
an open file keeps its node (and its passthrough backing) across renames. When
a later lookup of the same name finds a different inode (the file was
replaced), or the same inode number as another file type (ext4 reuses inode
numbers at once: a file replaced by a directory may get its number), it gets a
new node id; the old one lives on, detached, until the kernel forgets it. Node
ids are never reused, so no generation counter is needed.

**Hard links share a node.** A file the source reports with more than one link
is kept once per (device, inode): every name of it gets the same node id, so
the kernel has one inode for all of them and a chmod, chown, write, link or
unlink through one name is seen through every other at once, as on a local
filesystem. Directories and generated files are never shared.

Lookup counts follow the protocol: every reply that hands the kernel an entry
(LOOKUP, CREATE, MKNOD, MKDIR, SYMLINK, LINK, each READDIRPLUS entry) adds
one; FORGET subtracts what the kernel says; a node at zero is dropped.
"""

from __future__ import annotations

import itertools
import stat
import threading
from dataclasses import dataclass, field

from sparsefs.fuse.pagecache import Pages

ROOT = 1
Name = tuple[int, str]  # (parent node id, name)


@dataclass(eq=False)
class Node:
    """One inode the kernel knows."""

    nodeid: int
    parent: int  # 0 once detached (every name unlinked, replaced, or renamed over)
    name: str
    ino: int
    kind: int = 0  # the file-type bits (stat.S_IFMT) it was looked up with; 0 if not known
    nlookup: int = 0
    generated: bool = False  # an EvidencePack or control file: built by the core, never passthrough
    backing_id: int | None = None  # kernel passthrough backing, one per node
    keeper_fd: int = -1  # an fd on the file while it is open: fstat/fsync/ftruncate reach the opened inode
    keeper_reads: bool = False  # the keeper was opened readable (page-cache opens read through it)
    open_count: int = 0  # passthrough and page-cache handles the kernel holds on this node
    cached_opens: int = 0  # handles in the kernel's page-cache mode (no passthrough open may join them)
    pages_stale: bool = False  # written by passthrough since the page cache was last dropped
    pages: Pages = field(default_factory=Pages)  # what the kernel's cached pages were started from
    paged: bool = False  # an open let the kernel cache pages of it (not passthrough, not direct I/O)
    settling: tuple[int, int, int, int] | None = None  # the stamp whose pages the notifier drops once, later
    written_at: float = float("-inf")  # time.monotonic() when a write handle through the mount last closed
    verified: bool = False  # the source file was opened for this node once: read-only reopens need no system call
    passthrough: bool = True  # False once passthrough failed here: a node never mixes the two modes
    key: tuple[int, int, int] | None = None  # (dev, ino, file type) of a shareable node
    aliases: tuple[Name, ...] = ()  # further names of a hard-linked file, beside (parent, name)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class NodeTable:
    """Node ids ↔ (parent, name), and (device, inode) ↔ node for hard links; thread-safe."""

    def __init__(self, root_ino: int) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count(ROOT + 1)
        root = Node(ROOT, 0, "", root_ino, stat.S_IFDIR, nlookup=1)
        self._nodes: dict[int, Node] = {ROOT: root}
        self._by_name: dict[Name, Node] = {}
        self._by_inode: dict[tuple[int, int, int], Node] = {}  # attached shareable nodes

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

    def remember(self, parent: int, name: str, ino: int, generated: bool = False,
                 dev: int = 0, mode: int = 0, nlink: int = 1) -> Node:
        """The node for ``name`` in ``parent`` (new if it named another inode), counted once more.

        ``dev``, ``mode`` and ``nlink`` are the source's: a non-directory with more than one link
        whose inode is already known under another name gets that name's node (the kernel then
        shares one inode between the names). Plain ints, not an object: this is the lookup path."""
        kind = stat.S_IFMT(mode)
        with self._lock:
            node = self._by_name.get((parent, name))
            if node is not None and node.ino == ino and node.generated == generated and node.kind in (kind, 0):
                node.nlookup += 1
                return node
            if node is not None:
                self._unname(node, (parent, name))
            key = None if generated or not mode or stat.S_ISDIR(mode) else (dev, ino, stat.S_IFMT(mode))
            node = self._by_inode.get(key) if key is not None and nlink > 1 else None
            if node is not None and node.parent != 0:
                self._add_name(node, (parent, name))
            else:
                node = Node(next(self._ids), parent, name, ino, kind, generated=generated, key=key)
                self._nodes[node.nodeid] = node
                self._by_name[(parent, name)] = node
                if node.key is not None:
                    self._by_inode[node.key] = node
            node.nlookup += 1
            return node

    def _add_name(self, node: Node, name: Name) -> None:
        node.aliases += (name,)
        self._by_name[name] = node

    def _unname(self, node: Node, name: Name) -> None:
        """``name`` no longer leads to ``node``: drop it; another name becomes the first, or none is left."""
        if self._by_name.get(name) is node:
            del self._by_name[name]
        if (node.parent, node.name) != name:
            node.aliases = tuple(alias for alias in node.aliases if alias != name)
            return
        if node.aliases:
            (node.parent, node.name), node.aliases = node.aliases[0], node.aliases[1:]
            return
        node.parent = 0
        if node.key is not None and self._by_inode.get(node.key) is node:
            del self._by_inode[node.key]

    def find(self, path: str) -> Node | None:
        """The attached node for '/a/b', if the kernel knows one."""
        node: Node | None = self._nodes[ROOT]
        with self._lock:
            for name in filter(None, path.split("/")):
                node = self._by_name.get((node.nodeid, name)) if node is not None else None
        return node

    def by_inode(self, dev: int, ino: int, mode: int) -> Node | None:
        """The attached node of a non-directory inode, if the kernel knows one (under any name)."""
        with self._lock:
            return self._by_inode.get((dev, ino, stat.S_IFMT(mode)))

    def entry(self, path: str) -> tuple[int, str] | None:
        """(parent node id, name) of '/a/b' if the kernel knows its parent directory."""
        head, _, name = path.rstrip("/").rpartition("/")
        parent = self.find(head or "/")
        return None if parent is None or not name else (parent.nodeid, name)

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
            for name in ((node.parent, node.name), *node.aliases) if node.parent else ():
                if self._by_name.get(name) is node:
                    del self._by_name[name]
            if node.key is not None and self._by_inode.get(node.key) is node:
                del self._by_inode[node.key]
            return node

    def detach(self, parent: int, name: str, only: Node | None = None) -> Node | None:
        """``name`` is gone from ``parent`` (unlink, rmdir); the node it named, if known (and ``only``, if given)."""
        with self._lock:
            node = self._by_name.get((parent, name))
            if node is not None and (only is None or node is only):
                self._unname(node, (parent, name))
                return node
            return None

    def rename(self, parent: int, name: str, new_parent: int, new_name: str, exchange: bool = False) -> None:
        """Move the entry; whatever ``new_name`` named is replaced, or swapped in with ``exchange``."""
        with self._lock:
            moving = self._by_name.get((parent, name))
            target = self._by_name.get((new_parent, new_name))
            if moving is not None and moving is target:
                return  # two names of one inode: rename(2) leaves both as they are
            if moving is not None:
                self._unname(moving, (parent, name))
            if target is not None:
                self._unname(target, (new_parent, new_name))
                if exchange:
                    self._place(target, (parent, name))
            if moving is not None:
                self._place(moving, (new_parent, new_name))

    def _place(self, node: Node, name: Name) -> None:
        """Give ``node`` the name ``name`` (its first name if it had none left)."""
        if node.parent == 0:
            node.parent, node.name = name
            self._by_name[name] = node
            if node.key is not None:
                self._by_inode.setdefault(node.key, node)
        else:
            self._add_name(node, name)

    def all_nodes(self) -> list[Node]:
        with self._lock:
            return list(self._nodes.values())
