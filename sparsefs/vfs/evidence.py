"""Virtual paths: resolve a name to a frozen EvidencePack, remember it, account for it.

A pack is built at lookup (its exact size must be known before the first
read), frozen per (virtual path, artifact version), and charged (its episode
changes applied: sparsefs.protocol.episodes), counted in the stats and log and
saved for remounts when it is first opened for reading, so a bare ``stat``, a
``mkdir`` of the name or a '/' in a question charges and counts nothing. If the
artifact's episodes moved on between lookup and open, the pack is built again
at open. Building takes a per-artifact lock: a slow parse of one file never
delays evidence reads of another, and plain I/O never waits.
"""

from __future__ import annotations

import errno
import functools
import os
import stat
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import xxhash

from readers.actions import Session, named
from readers.base import ReaderError
from readers.ops import OPERATIONS
from sparsefs.guard.proc import read_stat
from sparsefs.protocol.access import Protocol, Served, error_pack
from sparsefs.protocol.grammar import GrammarError, VirtualRequest, requested_format, split_name, suffix_is_request
from sparsefs.protocol.pack import display_name
from sparsefs.source.access import Credentials, Permissions, viewing_as
from sparsefs.source.rootfs import SourceRoot
from sparsefs.store.state import StateDB
from sparsefs.store.stats import Stats
from sparsefs.vfs.virtual import VirtualFile, VirtualMemo

_REBUILDS = 5  # builds at open when another pack of the artifact was charged in between
MAX_VIRTUAL_NAME_BYTES = 1024  # the limit DESIGN.md promises; SKILL.md tells agents to shorten past it
_LOCK_STRIPES = 64
_KINDS = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket",
          stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device"}
SESSION_ACTIONS = named(session=Session.FILLS) | named(session=Session.RERANKS)  # readers.actions: it fills or re-ranks


class EvidenceFiles:
    """Builds, freezes and accounts the content of virtual paths."""

    def __init__(self, root: SourceRoot, protocol: Protocol, stats: Stats, state: StateDB | None = None,
                 invalidate: Callable[[str], None] = lambda path: None,
                 caller: Callable[[], Credentials | None] = lambda: None) -> None:
        """``invalidate``: the binding's kernel invalidation; ``caller``: the credentials of the process being
        answered (sparsefs.vfs.binding), against which every pack is checked (sparsefs.source.access)."""
        self.root = root
        self.caller = caller
        self.permissions = Permissions(root)
        self.state = state
        self.protocol = protocol
        self.artifacts = protocol.artifacts
        self.stats = stats
        self.memo = VirtualMemo()
        self.invalidate_kernel = invalidate
        self._locks = [threading.RLock() for _ in range(_LOCK_STRIPES)]  # a delivery may build again
        self._delivered: dict[str, tuple[str, int]] = {}  # each name's last delivered (version, xxh3 of bytes)
        self._delivered_lock = threading.Lock()
        self._sizes_handed_out: set[str] = set()
        self._handed: dict[str, tuple[str, int]] = {}

    def lookup(self, rel: str) -> VirtualFile:
        """The virtual file at ``rel``; OSError(ENOENT) when the name is not virtual."""
        parent, _, name = rel.rpartition("/")
        _check_name(name)
        try:
            split = split_name(
                name, lambda base: _is_base(base) and self.root.exists(_join(parent, base)), OPERATIONS
            )
        except GrammarError as err:
            return self._grammar_error(rel, name, err)
        if split is None:
            raise OSError(errno.ENOENT, "no such file")
        base, request = split
        creds = self.caller()
        self.permissions.check(creds, _join(parent, base))  # what the caller could not cat: EACCES, nothing built
        with viewing_as(creds):  # a folder is built of what this caller may read, and frozen per such view
            virtual = self._pack_file(rel, _join(parent, base), request)
        return self._current_attrs(virtual) if virtual.raw_rel is None and virtual.base_rel else virtual

    def stat(self, rel: str) -> dict[str, int]:
        """Attributes for the kernel; remembers which version's size it was given."""
        virtual = self.lookup(rel)
        self._handed[rel] = (virtual.version, virtual.attrs["st_size"])
        return virtual.attrs

    def open(self, rel: str) -> VirtualFile:
        """The content to serve; if it is not what the kernel last sized, make it ask again."""
        virtual = self._deliver(self.lookup(rel))
        if self._handed.get(rel) != (virtual.version, virtual.attrs["st_size"]):
            self.invalidate_kernel("/" + rel)  # fstat on this handle then reports its own size
        return virtual

    def _deliver(self, virtual: VirtualFile) -> VirtualFile:
        """The first open of a pack's content charges it, counts it in stats and the log, and saves it."""
        if virtual.log_entry is None:
            return virtual
        with self._lock_for(virtual.base_rel):
            for _ in range(_REBUILDS):
                delivered = self._delivered_as(virtual)
                if delivered:
                    return virtual
                if delivered is None and (virtual.deliver is None or virtual.deliver()):
                    break
                if delivered is None:
                    self.memo.discard(virtual.rel)  # its episode moved on since the lookup: build it afresh
                virtual = self.lookup(virtual.rel)  # (or: a concurrent open built and charged it again)
            else:
                raise OSError(errno.EAGAIN, "the artifact's episodes keep changing; try again")
            with self._delivered_lock:
                self._delivered[virtual.rel] = (virtual.version, _digest(virtual.content))
            if virtual.log_entry is not None:
                self.stats.record_pack(virtual.log_entry | _served_to(self.caller()))
            if self.state is not None and virtual.log_entry is not None and virtual.saved:
                self.state.put_pack(virtual.rel, virtual.version, virtual.content, virtual.log_entry)
        return virtual

    def _delivered_as(self, virtual: VirtualFile) -> bool | None:
        """Whether ``virtual`` is the pack its name delivered for its version (True), another build of that
        version is (False: a concurrent open rebuilt it after its episode moved on; serve that one), or
        none was delivered for it yet (None)."""
        with self._delivered_lock:
            delivered = self._delivered.get(virtual.rel)
        if delivered is None or delivered[0] != virtual.version:
            return None
        return delivered[1] == _digest(virtual.content)

    def source_changed(self, rel: str) -> None:
        """``rel`` may have changed: the kernel must ask again for its packs' sizes.

        Packs stay remembered; the next lookup compares fingerprints, so an event
        that changed nothing (our own write echoed by the watcher) rebuilds nothing.
        """
        self.artifacts.mark_dirty(rel)
        for base in (rel, *_folders_above(rel)):  # a folder's packs depend on every file under it
            if base in self._sizes_handed_out:
                self._sizes_handed_out.discard(base)
                for vpath in self.memo.paths_for(base):
                    self.invalidate_kernel("/" + vpath)

    def session_changed(self) -> None:
        """Packs that depend on the session intent change: the kernel must ask for their sizes again."""
        for vpath in self.memo.paths():
            self.invalidate_kernel("/" + vpath)

    def _pack_file(self, rel: str, base_rel: str, request: VirtualRequest) -> VirtualFile:
        self._sizes_handed_out.add(base_rel)  # before building: a change meanwhile must invalidate
        if request.action == "raw":
            return self._raw(rel, base_rel, request)
        with self._lock_for(base_rel):
            return self._current(rel, base_rel, request)

    def _current(self, rel: str, base_rel: str, request: VirtualRequest) -> VirtualFile:
        text = self._session_text()  # read once: the pack is built and frozen under this one
        session = _session_mark(request, text)
        version = self._version(base_rel) + session
        cached = self.memo.get(rel, version) or self._persisted(rel, base_rel, version)
        if cached is not None:
            return cached
        served = self.protocol.serve(base_rel, request, text, deferred=True)
        content = served.content
        version = (served.version or version.removesuffix(session)) + session
        virtual = VirtualFile.generated(
            rel, base_rel, version, self._key_stat(base_rel), content, _log_entry(rel, served),
            deliver=functools.partial(self.protocol.deliver, served.delivery),
            saved=served.pack.decision != "error",
        )
        self.memo.put(virtual)
        return virtual

    def _persisted(self, rel: str, base_rel: str, version: str) -> VirtualFile | None:
        """A pack an earlier mount froze for this path and version: the same bytes, not admitted again."""
        found = self.state.get_pack(rel, version) if self.state is not None and version else None
        if found is None:
            return None
        virtual = VirtualFile.generated(rel, base_rel, version, self._key_stat(base_rel), found[0])
        self.memo.put(virtual)  # no log entry: it was counted when first delivered
        return virtual

    def _session_text(self) -> str:
        """The session intent, for its owner's reads (the source root's owner, root, or no mount); none for
        another uid's: it is the owner's standing objective, neither to steer nor to be shown in their packs."""
        creds = self.caller()
        if creds is None or creds.reads_everything or creds.uid == self.root.lstat("").st_uid:
            return self.protocol.session.text
        return ""

    def _raw(self, rel: str, base_rel: str, request: VirtualRequest) -> VirtualFile:
        """The original bytes, proxied live; what has none (a FIFO, a socket, a directory, a link out of the
        root) answers an error pack like every other action."""
        try:
            st = self._confined_stat(base_rel)
        except OSError as err:
            if err.errno not in (errno.EXDEV, errno.ELOOP):
                raise
            return self._error_file(rel, base_rel, request, "this path leads outside the mounted source root "
                                    "(a symlink); it is not served", "ask about a file inside the workspace")
        if not stat.S_ISREG(st.st_mode):
            what = _KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")
            return self._error_file(rel, base_rel, request, f"@raw needs a regular file; this is {what}",
                                    "list a directory with ls, or ask it @scout; other files have no bytes to read")
        raw = VirtualFile.raw(rel, base_rel, st)
        self.memo.put(raw)  # remembered so a change of the base invalidates its size too
        return raw

    def _error_file(self, rel: str, base_rel: str, request: VirtualRequest, message: str, hint: str) -> VirtualFile:
        served = error_pack(base_rel, request, message, hint)
        return VirtualFile.generated(rel, base_rel, "", self.root.lstat(base_rel), served.content,
                                     _log_entry(rel, served))

    def _current_attrs(self, virtual: VirtualFile) -> VirtualFile:
        """A pack remembered from earlier, with its base's mode and owner as they are now (a chmod since)."""
        st = self._key_stat(virtual.base_rel)
        mode = stat.S_IFREG | (st.st_mode & 0o444)
        if (virtual.attrs["st_mode"], virtual.attrs["st_uid"], virtual.attrs["st_gid"]) == (mode, st.st_uid, st.st_gid):
            return virtual
        return replace(virtual, attrs=virtual.attrs | {"st_mode": mode, "st_uid": st.st_uid, "st_gid": st.st_gid})

    def _version(self, base_rel: str) -> str:
        """The artifact's fingerprint; '' when it cannot be read as an artifact."""
        try:
            return self.artifacts.fingerprint(base_rel)
        except ReaderError:
            return ""

    def _grammar_error(self, rel: str, name: str, err: GrammarError) -> VirtualFile:
        """A request the grammar refused: an error pack in the format it asked for (read leniently), logged
        against the file it was about, so the stats count it under that file's kind."""
        parent = rel.rpartition("/")[0]
        base = err.base or name
        if not suffix_is_request(name[len(base) + 1 :], OPERATIONS):
            raise OSError(errno.ENOENT, "no such file")  # e.g. 'notes.txt@old': free for a real file
        self.permissions.check(self.caller(), _join(parent, base))
        fmt = requested_format(name[len(base) + 1 :])
        served = error_pack(display_name(name), None, err.message, err.hint, fmt=fmt)
        entry = _log_entry(rel, served) | {"artifact": display_name(_join(parent, base))}
        return VirtualFile.generated(rel, "", "", self.root.lstat(parent), served.content, entry)

    def _lock_for(self, base_rel: str) -> threading.RLock:
        stripe = xxhash.xxh32_intdigest(base_rel.encode("utf-8", "surrogateescape")) % _LOCK_STRIPES
        return self._locks[stripe]

    def _confined_stat(self, rel: str) -> os.stat_result:
        fd = self.root.open_file(rel, os.O_PATH)  # O_PATH: never blocks (FIFOs), never reads
        try:
            return os.fstat(fd)
        finally:
            os.close(fd)

    def _key_stat(self, rel: str) -> os.stat_result:
        """The artifact's own stat (through symlinks inside the root), else the link's."""
        try:
            return self._confined_stat(rel)
        except OSError as err:
            if err.errno not in (errno.EXDEV, errno.ELOOP, errno.EACCES):
                raise
            return self.root.lstat(rel)


def _session_mark(request: VirtualRequest, session: str) -> str:
    """Packs the session intent can change are frozen per session intent too."""
    if not session or request.action not in SESSION_ACTIONS:
        return ""
    return "|session:" + xxhash.xxh3_64_hexdigest(session.encode())


def _check_name(name: str) -> None:
    size = len(os.fsencode(name))
    if size > MAX_VIRTUAL_NAME_BYTES or ("@" not in name and size > 255):
        raise OSError(errno.ENAMETOOLONG, "name too long")
    if "@" not in name:
        raise OSError(errno.ENOENT, "no such file")


def _is_base(name: str) -> bool:
    return name not in (".", "..")


def _folders_above(rel: str) -> list[str]:
    """``a/b/c.txt`` -> ['a/b', 'a', ''] (the root folder is '')."""
    parts = rel.split("/")[:-1]
    return ["/".join(parts[:n]) for n in range(len(parts), -1, -1)]


def _join(parent: str, name: str) -> str:
    return f"{parent}/{name}" if parent else name


def _digest(content: bytes) -> int:
    return xxhash.xxh3_64_intdigest(content)


def _served_to(creds: Credentials | None) -> dict[str, Any]:
    """Who a pack was served to, as guard lines say it: pid, uid and the process's name (none in process)."""
    if creds is None:
        return {}
    info = read_stat(creds.pid) if creds.pid > 0 else None
    return {"pid": creds.pid, "uid": creds.uid, "comm": info[0] if info is not None else None}


def _log_entry(rel: str, served: Served) -> dict[str, Any]:
    pack = served.pack
    return {
        "path": display_name(rel), "artifact": pack.artifact, "reader": pack.reader, "action": pack.action,
        "intent": pack.intent,
        "anchors": [e.anchor for e in pack.evidence], "exposed": served.exposed_chars,
        "artifact_chars": pack.exposure.artifact_chars,
        "E": pack.exposure.episode_exposed, "L": served.full_view_chars, "decision": pack.decision,
        "episode": pack.episode, "fingerprint": pack.fingerprint,
        "reads": [read.as_log() for read in served.reads],  # what a person would have read (store.savings)
        # what people read in the log rather than the agent in the pack: how it was chosen, how sure
        "configuration": pack.configuration, "coverage": [[c.status, c.confidence] for c in pack.coverage],
    }
