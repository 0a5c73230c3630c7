"""Who may read what: the kernel's permission rules, applied by the daemon to what it builds itself.

With ``--allow-other`` the kernel checks every real file against the caller (``default_permissions``),
but a pack is built by the daemon, which may run as root: it reads what the caller could not. So every
byte a pack quotes is checked against the caller's credentials here first, with the rules of the kernel's
``generic_permission``: the owner's bits for the owner, the group's for the file's group or a supplementary
group, the others' otherwise; search permission on every directory on the way, the root directory
included; root (uid 0) reads and searches everything (``CAP_DAC_READ_SEARCH``). A source entry with a POSIX
access ACL (``system.posix_acl_access``) is judged by it as POSIX.1e says (named users and groups, the
mask), so an ACL that denies a user is honoured even where the mode bits would let the user in.

:data:`VIEWER` holds the caller a folder's walk is made for (``sparsefs.source.collection``): members and
directories the caller may not read are left out, names included, as if absent.
"""

from __future__ import annotations

import contextvars
import errno
import os
import stat
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from sparsefs.source.rootfs import SourceRoot

READ, WRITE, SEARCH = 4, 2, 1
ACL_XATTR = "system.posix_acl_access"
_ACL_HEADER = struct.Struct("<I")
_ACL_ENTRY = struct.Struct("<HHI")
_USER_OBJ, _USER, _GROUP_OBJ, _GROUP, _MASK, _OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
_NO_ACL = (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM, errno.EACCES)


@dataclass(frozen=True)
class Credentials:
    """A caller: its filesystem uid and gid (from the FUSE request) and its supplementary groups (read from
    ``/proc/<pid>/status`` as libfuse's ``fuse_getgroups`` does; none when the process is gone or hidden)."""

    uid: int
    gid: int
    pid: int = 0
    groups: frozenset[int] = field(default=frozenset())

    @classmethod
    def of_request(cls, uid: int, gid: int, pid: int, proc: str = "/proc") -> Credentials:
        groups = supplementary_groups(pid, proc) if pid > 0 and uid != 0 else frozenset()  # root needs none
        return cls(uid, gid, pid, groups)

    @property
    def reads_everything(self) -> bool:
        """Root's DAC override for reading and searching."""
        return self.uid == 0

    def in_group(self, gid: int) -> bool:
        return gid == self.gid or gid in self.groups


def supplementary_groups(pid: int, proc: str = "/proc") -> frozenset[int]:
    try:
        with open(f"{proc}/{pid}/status", "rb") as handle:
            for line in handle:
                if line.startswith(b"Groups:"):
                    return frozenset(int(word) for word in line.split()[1:])
    except (OSError, ValueError):
        pass
    return frozenset()


VIEWER: contextvars.ContextVar[Credentials | None] = contextvars.ContextVar("sparsefs_viewer", default=None)
"""The caller a pack is being built for (None: everything is visible, as to root or without a mount)."""


@contextmanager
def viewing_as(creds: Credentials | None) -> Iterator[None]:
    """Build what follows for ``creds``: folder walks leave out what it may not read."""
    token = VIEWER.set(None if creds is None or creds.reads_everything else creds)
    try:
        yield
    finally:
        VIEWER.reset(token)


def parse_acl(data: bytes) -> list[tuple[int, int, int]]:
    """(tag, permission bits, id) of each entry of a ``system.posix_acl_access`` value (version 2)."""
    if len(data) < _ACL_HEADER.size or _ACL_HEADER.unpack_from(data)[0] != 2:
        return []
    body = data[_ACL_HEADER.size :]
    return [_ACL_ENTRY.unpack_from(body, at) for at in range(0, len(body) - len(body) % 8, _ACL_ENTRY.size)]


def allowed(st: os.stat_result, creds: Credentials, want: int, acl: bytes | None = None) -> bool:
    """generic_permission: may ``creds`` have every bit of ``want`` (READ, SEARCH) on this entry?"""
    if creds.reads_everything and not want & WRITE:
        return not (want & SEARCH and not stat.S_ISDIR(st.st_mode) and not st.st_mode & 0o111)
    entries = parse_acl(acl) if acl else []
    if entries:
        return _acl_allows(entries, st, creds, want)
    if creds.uid == st.st_uid:
        bits = st.st_mode >> 6
    elif creds.in_group(st.st_gid):
        bits = st.st_mode >> 3
    else:
        bits = st.st_mode
    return bits & want == want


def _acl_allows(entries: list[tuple[int, int, int]], st: os.stat_result, creds: Credentials, want: int) -> bool:
    """POSIX.1e access check (the kernel's posix_acl_permission)."""
    perms = {tag: perm for tag, perm, _ in entries if tag in (_USER_OBJ, _GROUP_OBJ, _MASK, _OTHER)}
    if creds.uid == st.st_uid:
        return perms.get(_USER_OBJ, 0) & want == want
    mask = perms.get(_MASK, 7)
    for tag, perm, ident in entries:
        if tag == _USER and ident == creds.uid:
            return perm & mask & want == want
    groups = [perm for tag, perm, ident in entries
              if (tag == _GROUP_OBJ and creds.in_group(st.st_gid)) or (tag == _GROUP and creds.in_group(ident))]
    if groups:
        return any(perm & mask & want == want for perm in groups)
    return perms.get(_OTHER, 0) & want == want


class Permissions:
    """The checks of one source root: each entry's own stat and ACL, read through the confined root."""

    def __init__(self, root: SourceRoot) -> None:
        self.root = root

    def may(self, creds: Credentials, rel: str, st: os.stat_result, want: int) -> bool:
        if creds.reads_everything and not want & WRITE:
            return allowed(st, creds, want)
        return allowed(st, creds, want, self._acl(rel))

    def check(self, creds: Credentials | None, rel: str) -> None:
        """EACCES unless ``creds`` may read ``rel`` as ``cat`` (a file) or ``ls`` (a folder) would: search on
        every directory from the root down, read (and, for a directory, search) on the entry itself. A
        symlink inside the root is judged at its target, along the target's own path."""
        if creds is None or creds.reads_everything:
            return
        path = self._resolved(rel)
        parts = path.split("/") if path else []
        for depth in range(len(parts)):
            self._need(creds, "/".join(parts[:depth]), SEARCH)
        st = self.root.lstat(path)
        self._need(creds, path, READ | SEARCH if stat.S_ISDIR(st.st_mode) else READ, st)

    def visible(self, rel: str, st: os.stat_result) -> bool:
        """May the caller a walk is made for (:data:`VIEWER`) see this member (a file it reads, a directory
        it lists and searches)?"""
        creds = VIEWER.get()
        if creds is None:
            return True
        return self.may(creds, rel, st, READ | SEARCH if stat.S_ISDIR(st.st_mode) else READ)

    def _need(self, creds: Credentials, rel: str, want: int, st: os.stat_result | None = None) -> None:
        if not self.may(creds, rel, st if st is not None else self.root.lstat(rel), want):
            raise OSError(errno.EACCES, "permission denied")

    def _acl(self, rel: str) -> bytes | None:
        try:
            return self.root.getxattr(rel, ACL_XATTR)
        except OSError as err:
            if err.errno in _NO_ACL:
                return None
            raise

    def _resolved(self, rel: str) -> str:
        """``rel`` with every symlink inside the root resolved (the path the kernel would check); the path
        itself when it does not resolve inside the root (the read then fails on its own)."""
        try:
            fd = self.root.open_file(rel, os.O_PATH)
        except OSError:
            return rel
        try:
            target, top = os.readlink(f"/proc/self/fd/{fd}"), os.readlink(f"/proc/self/fd/{self.root.fd}")
        finally:
            os.close(fd)
        inner = os.path.relpath(target, top)
        return rel if inner.startswith("..") or target.endswith(" (deleted)") else ("" if inner == "." else inner)
