"""Directories as collection artifacts: a bounded, confined walk for the Folder Reader.

A folder's version (computed by ``ArtifactCache``) hashes each member's path
with its content fingerprint when one is known, else its stat key (device,
inode, size, mtime_ns), so editing, adding or removing a file under it makes a
new version, and two folders never share one. The walk never follows
symlinks, skips hidden entries and dependency/build directories, and stops at
:data:`MAX_WALK_ENTRIES` entries or :data:`MAX_DEPTH` levels, saying how many
files it left out.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from readers.base import Parsed, Reader
from readers.folder import Member
from sparsefs.source.access import VIEWER, Permissions
from sparsefs.source.rootfs import SourceRoot

StatKey = tuple[int, int, int, int, int]  # dev, ino, size, mtime_ns, ctime_ns
MAX_WALK_ENTRIES = 20_000
MAX_DEPTH = 12
SKIPPED_DIRS = frozenset({"node_modules", "__pycache__", "venv", ".venv", "site-packages", "dist-packages"})


@dataclass(frozen=True)
class Listing:
    """The members of one folder as walked now, with each member's stat key.

    ``left_out`` counts entries past the entry bound (not even stat-ed) plus
    directories not walked (too deep, dependency/build directories, unreadable).
    """

    members: tuple[Member, ...]
    keys: tuple[StatKey, ...]
    left_out: int


def walk(root: SourceRoot, rel: str) -> Listing:
    """Regular files under ``rel`` (breadth-first, bounded, symlinks not followed).

    Made for a caller (``sparsefs.source.access.VIEWER``), it leaves out, as if absent, every file that
    caller may not read and every directory it may not list and search: their names too."""
    members: list[Member] = []
    permissions = Permissions(root) if VIEWER.get() is not None else None
    keys: list[StatKey] = []
    queue: list[tuple[str, int]] = [("", 0)]
    budget, left_out = MAX_WALK_ENTRIES, 0
    while queue:
        sub, depth = queue.pop(0)
        names = sorted(_names(root, _join(rel, sub)))
        if len(names) > budget:
            left_out += len(names) - budget
            names = names[:budget]
        budget -= len(names)
        for name, st in sorted(_stats(root, _join(rel, sub), names).items()):
            path = _join(sub, name)
            if permissions is not None and not permissions.visible(_join(rel, path), st):
                continue
            if stat.S_ISDIR(st.st_mode):
                if depth < MAX_DEPTH and name not in SKIPPED_DIRS:
                    queue.append((path, depth + 1))
                else:
                    left_out += 1
            elif stat.S_ISREG(st.st_mode):
                members.append(Member(path, st.st_size, st.st_mtime_ns))
                keys.append((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    return Listing(tuple(members), tuple(keys), left_out)


def _stats(root: SourceRoot, rel: str, names: list[str]) -> dict[str, os.stat_result]:
    try:
        return root.stat_entries(rel, names)
    except OSError:
        return {}  # unreadable directory: its entries are simply not listed


@dataclass
class DirectoryCollection:
    """The CollectionSource the Folder Reader reads: a listing plus cached member parses."""

    rel: str
    listed: tuple[Member, ...]
    left_out: int
    load_member: Callable[[str], tuple[Reader, Parsed]]
    is_cached: Callable[[str], bool]

    @property
    def name(self) -> str:
        return self.rel

    def members(self) -> tuple[Sequence[Member], int]:
        return self.listed, self.left_out

    def parsed(self, rel: str) -> tuple[Reader, Parsed]:
        return self.load_member(_join(self.rel, rel))

    def cached(self, rel: str) -> bool:
        return self.is_cached(_join(self.rel, rel))


def _names(root: SourceRoot, rel: str) -> list[str]:
    try:
        _, entries = root.scandir(rel)
    except OSError:
        return []
    return [name for name, _, _ in entries if not name.startswith(".")]


def _join(parent: str, name: str) -> str:
    return f"{parent}/{name}" if parent and name else parent or name
