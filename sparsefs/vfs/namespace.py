"""Which names of the mount may be written: the control tree never, the virtual namespace never.

A real file whose name reads as a request would shadow the pack from then on (a real name always wins),
and one made before its base exists (``touch 'x@scout'``, then ``x``) would too. So a name the grammar
reserves (``sparsefs.protocol.grammar.reserved_name``) is never created in the source, base or not, and a
virtual file that ``stat`` shows is read-only: EROFS, as for a write. Real files that already have such a
name keep working.
"""

from __future__ import annotations

import errno

from readers.ops import OPERATIONS
from sparsefs.protocol.grammar import reads_as_virtual, reserved_name
from sparsefs.source.rootfs import SourceRoot, relative
from sparsefs.vfs.control import CONTROL_DIR

CONTROL_PREFIX = "/" + CONTROL_DIR


class Namespace:
    """Path checks before a namespace change reaches the source."""

    def __init__(self, root: SourceRoot) -> None:
        self.root = root

    def is_virtual(self, path: str) -> bool:
        """Does ``path`` read as a virtual file (a pack or an error pack), as ``stat`` would show it?"""
        parent, _, name = relative(path).rpartition("/")
        return "@" in name and reads_as_virtual(name, lambda part: self.root.exists(_join(parent, part)), OPERATIONS)

    @staticmethod
    def writable(path: str | None) -> str:
        """``path`` relative to the root, unless it is in the control tree (EROFS)."""
        if path is not None and is_control(path):
            raise OSError(errno.EROFS, "the control tree is read-only")
        return relative(path)

    def new(self, path: str) -> str:
        """A name about to be created, renamed or linked onto: never one the grammar reserves."""
        rel = self.writable(path)
        name = rel.rpartition("/")[2]
        if "@" in name and reserved_name(name, OPERATIONS) and not self.root.exists(rel):
            raise OSError(errno.EROFS, "a name that reads as a virtual file cannot be created")
        return rel

    def existing(self, path: str) -> str:
        """An entry about to be changed (unlinked, renamed away, chmod...): a virtual file answers EROFS, as
        ``stat`` shows it exists and is generated; any other absent name gets the source's own answer."""
        if self.is_virtual(path):
            raise OSError(errno.EROFS, "virtual files are read-only")
        return self.writable(path)


def is_control(path: str) -> bool:
    return path == CONTROL_PREFIX or path.startswith(CONTROL_PREFIX + "/")


def _join(parent: str, name: str) -> str:
    return f"{parent}/{name}" if parent else name
