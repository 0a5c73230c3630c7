"""Directories as collection artifacts: a bounded, confined walk for the Folder Reader.

A folder's version is its listing: xxh3-128 over (path, size, mtime_ns) of
every member, so editing, adding or removing a file under it makes a new
version (members themselves keep content fingerprints). The walk never follows
symlinks, skips hidden entries and dependency/build directories, and stops at
:data:`MAX_WALK_ENTRIES` entries or :data:`MAX_DEPTH` levels, saying how many
files it left out.
"""

from __future__ import annotations

import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import xxhash

from readers.base import Parsed, Reader
from readers.folder import Member
from sparsefs.rootfs import SourceRoot

MAX_WALK_ENTRIES = 20_000
MAX_DEPTH = 12
SKIPPED_DIRS = frozenset({"node_modules", "__pycache__", "venv", ".venv", "site-packages", "dist-packages"})


@dataclass(frozen=True)
class Listing:
    """The members of one folder, as walked now."""

    members: tuple[Member, ...]
    left_out: int

    def fingerprint(self) -> str:
        digest = xxhash.xxh3_128()
        for m in self.members:
            digest.update(f"{m.rel}\0{m.size}\0{m.mtime_ns}\n".encode("utf-8", "surrogateescape"))
        digest.update(f"left-out {self.left_out}".encode())
        return digest.hexdigest()


def walk(root: SourceRoot, rel: str) -> Listing:
    """Regular files under ``rel`` (breadth-first, bounded, symlinks not followed)."""
    members: list[Member] = []
    queue: list[tuple[str, int]] = [("", 0)]
    seen = left_out = 0
    while queue:
        sub, depth = queue.pop(0)
        names = _names(root, _join(rel, sub))
        stats = root.stat_entries(_join(rel, sub), names)
        for name in sorted(stats):
            seen += 1
            if seen > MAX_WALK_ENTRIES:
                left_out += 1
                continue
            st = stats[name]
            if stat.S_ISDIR(st.st_mode) and depth < MAX_DEPTH and name not in SKIPPED_DIRS:
                queue.append((_join(sub, name), depth + 1))
            elif stat.S_ISREG(st.st_mode):
                members.append(Member(_join(sub, name), st.st_size, st.st_mtime_ns))
    return Listing(tuple(members), left_out)


@dataclass
class DirectoryCollection:
    """The CollectionSource the Folder Reader reads: a listing plus cached member parses."""

    rel: str
    listing: Listing
    load_member: Callable[[str], tuple[Reader, Parsed]]

    @property
    def name(self) -> str:
        return self.rel

    def members(self) -> tuple[Sequence[Member], int]:
        return self.listing.members, self.listing.left_out

    def parsed(self, rel: str) -> tuple[Reader, Parsed]:
        return self.load_member(_join(self.rel, rel))


def _names(root: SourceRoot, rel: str) -> list[str]:
    try:
        _, entries = root.scandir(rel)
    except OSError:
        return []
    return [name for name, _, _ in entries if not name.startswith(".")]


def _join(parent: str, name: str) -> str:
    return f"{parent}/{name}" if parent and name else parent or name
