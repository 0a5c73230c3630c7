"""The operations core: path in, result out, independent of any FUSE binding.

Three kinds of path meet here:

* real paths — faithful passthrough to the source root (``rootfs``);
* virtual paths ``<real>@<action>...`` — EvidencePacks from the protocol,
  frozen per (path, artifact version) so ``stat`` size equals what ``read``
  returns, served with direct_io;
* the control tree ``/.sparsefs/...`` — generated, read-only.

Errors are raised as ``OSError`` with an errno; bindings translate that into
their reply (see ``sparsefs.fuse.errors``). Nothing here blocks plain I/O behind an
evidence read: packs are built under their own lock.

Everything the Core needs from outside is given at construction: the source,
stats, protocol, state, the guard, and the backend's side (the caller, kernel
invalidation, readiness) as a :class:`~sparsefs.vfs.binding.Binding`. Nothing is
set on it afterwards; ``sparsefs.app.compose`` builds it for every surface.
"""

from __future__ import annotations

import errno
import itertools
import os
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sparsefs.artifacts.cache import ArtifactCache
from sparsefs.guard.policy import Guard
from sparsefs.protocol.access import Protocol
from sparsefs.protocol.intents import persisted_session
from sparsefs.protocol.session_file import WRITE_FLAGS, SessionFile
from sparsefs.source.freshness import INOTIFY, Freshness
from sparsefs.source.rootfs import SourceRoot, relative, stat_dict
from sparsefs.store.state import StateDB
from sparsefs.store.stats import Stats
from sparsefs.vfs import fsmonitor
from sparsefs.vfs.binding import NULL, Binding
from sparsefs.vfs.control import CONTROL_DIR, SESSION_FILE, ControlTree, private_control, synthetic
from sparsefs.vfs.evidence import EvidenceFiles
from sparsefs.vfs.namespace import Namespace
from sparsefs.vfs.namespace import is_control as _is_control
from sparsefs.vfs.virtual import virtual_ino

_HANDLE_BASE = 1 << 40
_CONTROL_PREFIX = "/" + CONTROL_DIR
_NOT_REAL = (errno.ENOENT, errno.ENAMETOOLONG)  # a name longer than the source fs allows may be virtual


@dataclass(frozen=True)
class OpenResult:
    """A file handle and whether the kernel must bypass its page cache for it."""

    fh: int
    direct_io: bool


@dataclass
class _Generated:
    """An open generated file: fixed bytes, a live file (log, @raw) through an fd, or
    the writable session file (``draft`` holds what is being written)."""

    attrs: dict[str, int]
    data: bytes = b""
    log_fd: int = -1
    pin: tuple[int, str] | None = None
    draft: bytearray | None = None  # the session file's shared draft, for a writer
    append: bool = False
    size: int | None = None  # what stat reports if not the content's size: a guard card reports its file's

    def stat(self) -> dict[str, int]:
        """What fstat on this handle reports: the size of what it serves (a guard card: the file's)."""
        size = os.fstat(self.log_fd).st_size if self.log_fd >= 0 else len(self.content())
        size = size if self.size is None else self.size
        return self.attrs | {"st_size": size, "st_blocks": (size + 511) // 512}

    def content(self) -> bytes:
        return bytes(self.draft) if self.draft is not None else self.data


class Core:
    """Every filesystem operation of a SparseFS mount.

    ``protocol``: built here from ``artifacts``, ``state`` and ``session_intent`` when not given;
    ``guard``: the plain-read guard of a mount that names processes to guard; ``binding``: the
    backend's side (:data:`~sparsefs.vfs.binding.NULL` without a mount).
    """

    def __init__(
        self, root: SourceRoot, stats: Stats, protocol: Protocol | None = None, state: StateDB | None = None,
        session_intent: str | None = None, artifacts: ArtifactCache | None = None, *,
        guard: Guard | None = None, binding: Binding = NULL,
    ) -> None:
        self.root = root
        self.stats = stats
        self.state = state
        self.guard = guard
        self.binding = binding
        if protocol is None:
            session = persisted_session(state, session_intent)
            protocol = Protocol(artifacts or ArtifactCache(root), state=state, session=session)
        self.protocol = protocol
        self.artifacts = protocol.artifacts
        self.control = ControlTree(stats, self.protocol.episodes, self._ready_text, self.protocol.session,
                                   lambda query: fsmonitor.answer(query, self.freshness.journal,
                                                                  self.freshness.mode == INOTIFY))
        self.session_file = SessionFile(self.protocol.session)
        self.evidence = EvidenceFiles(root, self.protocol, stats, state, invalidate=binding.invalidate,
                                      caller=binding.caller)
        self.protocol.session.listen(lambda text: self.evidence.session_changed())
        self.names = Namespace(root)  # what may be written: never the control tree or a virtual name
        self.freshness = Freshness(lambda rel: self.on_source_change(rel), root.lstat)  # "off" until watched
        stats.gauges["artifacts_parsed"] = lambda: self.artifacts.parses
        stats.gauges["artifacts_loaded_from_disk"] = lambda: self.artifacts.disk_loads
        self._snapshots: dict[str, bytes] = {}
        self._generated: dict[int, _Generated] = {}
        self._handle_ids = itertools.count(_HANDLE_BASE)
        self._handles_lock = threading.Lock()
        self._pinned: dict[tuple[int, str], int] = {}

    # ---- lifecycle -------------------------------------------------------
    def _ready_text(self) -> bytes | None:
        since = self.binding.ready_since()
        if since is None:
            return None
        return f"ready {os.getpid()} {self.stats.backend} {since:.3f}\n".encode()

    # ---- attributes and directories ---------------------------------------
    def getattr(self, path: str | None, fh: int | None = None) -> dict[str, int]:
        if fh is not None:
            return stat_dict(os.fstat(fh)) if fh < _HANDLE_BASE else self._handle(fh).stat()
        if path is None:
            raise OSError(errno.ENOENT, "unlinked")
        if _is_control(path):
            return self._control_attr(path)
        rel = relative(path)
        try:
            return stat_dict(self.root.lstat(rel))
        except OSError as err:
            if err.errno not in _NOT_REAL:
                raise
            return self._virtual_stat(rel)

    def _virtual_stat(self, rel: str) -> dict[str, int]:
        """A process that holds a pack open sees that pack's size, even by path.

        The kernel sends fstat() as a path getattr without the handle; if the
        artifact changed since the open, the current pack would have another size
        and readers that stop at st_size (Node, cp) would cut or pad the content.
        """
        pid = self.binding.caller_pid()
        fh = self._pinned.get((pid, rel)) if pid is not None else None
        handle = self._generated.get(fh) if fh is not None else None
        return handle.stat() if handle is not None else self.evidence.stat(rel)

    def readdir(self, path: str) -> list[tuple[str, int, int]]:
        """(name, file-type bits, inode) for '.', '..' and each entry; inodes are never 0.

        The control tree is reachable by name but never listed (like ZFS's ``.zfs``): otherwise
        ``git add -A``, ``grep -r``, tar and rsync would pick it up. A source ``.sparsefs`` at the
        root is hidden too, since its name leads to the control tree."""
        if _is_control(path):
            return self._control_entries(path)
        rel = relative(path)
        here, listing = self.root.scandir(rel)
        up = self.root.lstat(rel.rpartition("/")[0]).st_ino if rel else here
        if not rel:
            listing = [entry for entry in listing if entry[0] != CONTROL_DIR]
        return [(".", stat.S_IFDIR, here), ("..", stat.S_IFDIR, up), *listing]

    def _control_entries(self, path: str) -> list[tuple[str, int, int]]:
        sub = _control_sub(path)
        self._check_control(sub)
        entries = [(".", stat.S_IFDIR, virtual_ino(path.rstrip("/"))), ("..", stat.S_IFDIR, 1)]
        for name in self.control.listdir(sub):
            mode = stat.S_IFDIR if self.control.is_dir(f"{sub}/{name}".strip("/")) else stat.S_IFREG
            entries.append((name, mode, virtual_ino(f"{path.rstrip('/')}/{name}")))
        return entries

    def readlink(self, path: str) -> str:
        return self.root.readlink(self.names.writable(path))

    def statfs(self, path: str) -> dict[str, int]:
        """The source's numbers, its name limit included: tools that trust pathconf(NAME_MAX) must not
        create names the source refuses. Virtual names have their own, longer limit
        (``MAX_VIRTUAL_NAME_BYTES``, the kernel's FUSE name limit), documented in SEMANTICS.md."""
        sv = self.root.statvfs()
        keys = ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree", "f_favail",
                "f_namemax")
        return {key: getattr(sv, key) for key in keys}

    def access(self, path: str, mode: int) -> None:
        if _is_control(path) or self.names.is_virtual(path):
            if mode & os.W_OK and not _is_session(path):
                raise OSError(errno.EROFS, "generated files are read-only")
            return
        self.root.access(relative(path), mode)

    # ---- extended attributes: the source's, confined like every path; generated files have none ----
    def getxattr(self, path: str, name: str) -> bytes:
        if self._generated_path(path):
            raise OSError(errno.ENODATA, "generated files have no extended attributes")
        return self.root.getxattr(relative(path), name)

    def listxattr(self, path: str) -> list[str]:
        return [] if self._generated_path(path) else self.root.listxattr(relative(path))

    def setxattr(self, path: str, name: str, value: bytes, flags: int) -> None:
        if self._generated_path(path):
            raise OSError(errno.EROFS, "generated files are read-only")
        self.root.setxattr(relative(path), name, value, flags)

    def removexattr(self, path: str, name: str) -> None:
        if self._generated_path(path):
            raise OSError(errno.EROFS, "generated files are read-only")
        self.root.removexattr(relative(path), name)

    def _generated_path(self, path: str) -> bool:
        return _is_control(path) or self.names.is_virtual(path)

    # ---- open / read / write ------------------------------------------------
    def open(self, path: str, flags: int) -> OpenResult:
        if _is_control(path):
            return self._open_generated(self._control_content(path, flags))
        rel = relative(path)
        self.freshness.check_open(rel, flags)  # on-access: an outside change since the last open invalidates
        if self.guard is not None and flags & WRITE_FLAGS:
            self.guard.written(rel)  # never card a file the agent writes (it may write a card back)
        try:
            return OpenResult(self.root.open_regular(rel, flags & ~os.O_CREAT), direct_io=False)
        except OSError as err:
            if err.errno not in _NOT_REAL:
                raise
            return self._open_virtual(rel, flags)

    def guard_open(self, path: str, flags: int, accept: Callable[[], bool] = lambda: True) -> OpenResult | None:
        """A guard card instead of a real file (sparsefs.guard.policy), or None: open it as usual.

        Both backends ask before their own open; the card keeps the file's attributes. ``accept``
        is asked once the card is built (the kernel backend: no passthrough open arrived meanwhile)."""
        if self.guard is None or flags & WRITE_FLAGS or _is_control(path):
            return None
        card = self.guard.card(relative(path), flags, self.binding.caller_pid(), accept)
        if card is None:
            return None
        return self._open_generated(_Generated(attrs=card.attrs, data=card.content, size=card.attrs["st_size"]))

    def create(self, path: str, flags: int, mode: int) -> OpenResult:
        rel = self.names.new(path)
        fd, made = self.root.create_regular(rel, flags, mode)
        if made:
            self.freshness.named_here(rel)
        if self.guard is not None:
            self.guard.written(rel)
        self._source_changed(rel)
        return OpenResult(fd, direct_io=False)

    def read(self, path: str | None, size: int, offset: int, fh: int) -> bytes:
        if fh >= _HANDLE_BASE:
            return self._read_generated(fh, size, offset)
        data = os.pread(fh, size, offset)
        self.stats.add("plain_bytes_read", len(data))
        return data

    def write(self, path: str | None, data: bytes, offset: int, fh: int) -> int:
        """``path`` is None for a file unlinked while open: the handle still works."""
        if fh >= _HANDLE_BASE:
            return self._write_session(fh, data, offset)
        written = os.pwrite(fh, data, offset)
        self.stats.add("plain_bytes_written", written)
        if path is not None:
            self._source_changed(relative(path))
        return written

    def truncate(self, path: str | None, length: int, fh: int | None = None) -> None:
        if (fh is not None and fh >= _HANDLE_BASE) or (path is not None and _is_session(path)):
            self._check_control(SESSION_FILE)
            self._truncate_session(fh, length)
            return
        if fh is not None and fh < _HANDLE_BASE:
            os.ftruncate(fh, length)
        elif path is None:
            raise OSError(errno.EBADF, "no path and no handle")
        else:
            self.root.truncate(self.names.existing(path), length)
        if path is not None and self.guard is not None:
            self.guard.written(relative(path))
        if path is not None:
            self._source_changed(relative(path))

    def flush(self, path: str | None, fh: int) -> None:
        return None

    def fsync(self, path: str | None, datasync: bool, fh: int) -> None:
        if fh < _HANDLE_BASE:
            (os.fdatasync if datasync else os.fsync)(fh)

    def release(self, path: str | None, fh: int) -> None:
        if fh < _HANDLE_BASE:
            os.close(fh)
            return
        with self._handles_lock:
            handle = self._generated.pop(fh, None)
            if handle is not None and handle.pin is not None and self._pinned.get(handle.pin) == fh:
                del self._pinned[handle.pin]
        if handle and handle.log_fd >= 0:
            os.close(handle.log_fd)
        if handle and handle.draft is not None:
            self.session_file.closed()

    # ---- the session intent (.sparsefs/session, the one writable control file) ----
    def _write_session(self, fh: int, data: bytes, offset: int) -> int:
        handle = self._handle(fh)
        if handle.draft is None:
            raise OSError(errno.EBADF, "generated files are read-only")
        return self.session_file.write(data, offset, handle.append)

    def _truncate_session(self, fh: int | None, length: int) -> None:
        if fh is not None and self._handle(fh).draft is None:
            raise OSError(errno.EROFS, "generated files are read-only")
        self.session_file.truncate(length)

    # ---- namespace changes ----------------------------------------------------
    def give_to_caller(self, path: str, uid: int, gid: int) -> None:
        """Hand a just-created entry to the creating user, as a local filesystem would.

        The group is left alone in a setgid directory (the new entry inherited
        the directory's group). Only a root daemon can give files away.
        """
        if os.geteuid() != 0 or (uid, gid) == (0, 0):
            return
        rel = self.names.writable(path)
        parent = self.root.lstat(rel.rpartition("/")[0])
        self.root.chown(rel, uid, -1 if parent.st_mode & stat.S_ISGID else gid)

    def mkdir(self, path: str, mode: int) -> None:
        self.root.mkdir(rel := self.names.new(path), mode)
        self.freshness.named_here(rel)  # the watcher reports it without its directory (sparsefs.source.freshness)

    def mknod(self, path: str, mode: int, dev: int) -> None:
        self.root.mknod(rel := self.names.new(path), mode, dev)
        self.freshness.named_here(rel)

    def rmdir(self, path: str) -> None:
        rel = self.names.existing(path)
        self.root.rmdir(rel)
        self.freshness.removed_here(rel)

    def unlink(self, path: str) -> None:
        rel = self.names.existing(path)
        self.root.unlink(rel)
        self.freshness.removed_here(rel)
        self._source_changed(rel)

    def rename(self, old: str, new: str, flags: int = 0) -> None:
        old_rel, new_rel = self.names.existing(old), self.names.new(new)
        self.root.rename(old_rel, new_rel, flags)
        self.freshness.named_here(old_rel, new_rel)
        if self.guard is not None:
            self.guard.written(new_rel)
        self._source_changed(old_rel)
        self._source_changed(new_rel)

    def symlink(self, path: str, target: str) -> None:
        self.root.symlink(target, rel := self.names.new(path))
        self.freshness.named_here(rel)

    def link(self, path: str, existing: str) -> None:
        self.root.link(self.names.existing(existing), rel := self.names.new(path))
        self.freshness.named_here(rel)

    def chmod(self, path: str, mode: int) -> None:
        self.root.chmod(self.names.existing(path), mode)

    def chown(self, path: str, uid: int, gid: int) -> None:
        self.root.chown(self.names.existing(path), uid, gid)

    def utimens(self, path: str, atime_ns: int, mtime_ns: int) -> None:
        rel = self.names.existing(path)
        self.root.utimens(rel, atime_ns, mtime_ns)
        self._source_changed(rel)

    # ---- change notification -----------------------------------------------
    def on_source_change(self, rel: str) -> None:
        """A file changed in the source tree outside the mount."""
        self._source_changed(rel)
        self.binding.invalidate("/" + rel)

    def source_written(self, path: str) -> None:
        """``path`` was written through the mount without passing through here (kernel passthrough)."""
        self._source_changed(relative(path))

    def _source_changed(self, rel: str) -> None:
        self.freshness.journal.record(rel)  # what git's fsmonitor hook asks for (sparsefs.vfs.fsmonitor)
        self.evidence.source_changed(rel)

    # ---- virtual files -------------------------------------------------------
    def _open_virtual(self, rel: str, flags: int) -> OpenResult:
        if flags & WRITE_FLAGS:
            raise OSError(errno.EROFS, "virtual files are read-only")
        virtual = self.evidence.open(rel)
        pid = self.binding.caller_pid()
        pin = (pid, rel) if pid is not None else None
        if virtual.raw_rel is not None:
            fd = self.root.open_file(virtual.raw_rel, os.O_RDONLY | os.O_NONBLOCK)
            return self._open_generated(_Generated(attrs=virtual.attrs, log_fd=fd))
        return self._open_generated(_Generated(attrs=virtual.attrs, data=virtual.content, pin=pin))

    # ---- generated handles ---------------------------------------------------
    def _open_generated(self, handle: _Generated) -> OpenResult:
        with self._handles_lock:
            fh = next(self._handle_ids)
            self._generated[fh] = handle
            if handle.pin is not None:
                self._pinned[handle.pin] = fh
        return OpenResult(fh, direct_io=True)

    def _handle(self, fh: int) -> _Generated:
        with self._handles_lock:
            handle = self._generated.get(fh)
        if handle is None:
            raise OSError(errno.EBADF, "stale handle")
        return handle

    def _read_generated(self, fh: int, size: int, offset: int) -> bytes:
        handle = self._handle(fh)
        if handle.log_fd >= 0:
            data = os.pread(handle.log_fd, size, offset)
            self.stats.add("raw_bytes_read", len(data))
            return data
        return handle.content()[offset : offset + size]

    def _session_handle(self, path: str, flags: int) -> _Generated:
        attrs = synthetic(self.root.lstat(""), stat.S_IFREG | 0o644, 0, virtual_ino(path))
        draft = self.session_file.opened(flags)
        if draft is None:
            return _Generated(attrs=attrs, data=self.protocol.session.content())
        return _Generated(attrs=attrs, draft=draft, append=bool(flags & os.O_APPEND))

    # ---- control tree --------------------------------------------------------
    def _control_attr(self, path: str) -> dict[str, int]:
        node = self.control.node(_control_sub(path))
        if node is None:
            raise OSError(errno.ENOENT, "no such control file")
        root = self.root.lstat("")
        ino = virtual_ino(path.rstrip("/"))
        others = 0 if private_control(_control_sub(path)) else 0o055  # the owner's alone, or everyone's to read
        if node.is_dir:  # its listing changes without notice: a new mtime drops the kernel's cached one
            now = time.time_ns()
            return synthetic(root, stat.S_IFDIR | 0o500 | others, 0, ino, nlink=2) | {"st_mtime": now, "st_ctime": now}
        if node.writable:
            return synthetic(root, stat.S_IFREG | 0o600, len(node.content or b""), ino)
        if node.live_log:
            return synthetic(root, stat.S_IFREG | 0o400, self.control.log_size(), ino)
        self._snapshots[path] = node.content or b""  # open serves exactly what this size describes
        return synthetic(root, stat.S_IFREG | 0o400 | others & 0o044, len(self._snapshots[path]), ino)

    def _check_control(self, sub: str) -> None:
        """The control tree belongs to the source root's owner (and root): its log, stats, episodes and session
        hold every caller's questions, paths and anchors. SKILL.md and ready are everyone's (the kernel checks
        the same modes with --allow-other; this holds without it too)."""
        creds = self.binding.caller()
        if creds is None or creds.reads_everything or not private_control(sub):
            return
        if creds.uid != self.root.lstat("").st_uid:
            raise OSError(errno.EACCES, "the control tree's log, stats, episodes and session are the owner's")

    def _control_content(self, path: str, flags: int) -> _Generated:
        self._check_control(_control_sub(path))
        node = self.control.node(_control_sub(path))
        if node is not None and node.writable:
            return self._session_handle(path, flags)
        if flags & WRITE_FLAGS:
            raise OSError(errno.EROFS, "the control tree is read-only")
        if node is None:
            raise OSError(errno.ENOENT, "no such control file")
        if node.is_dir:
            raise OSError(errno.EISDIR, "is a directory")
        attrs = synthetic(self.root.lstat(""), stat.S_IFREG | 0o444, 0, virtual_ino(path.rstrip("/")))
        if node.live_log:
            return _Generated(attrs=attrs, log_fd=self.control.open_log())
        return _Generated(attrs=attrs, data=self._snapshots.setdefault(path, node.content or b""))


def _is_session(path: str) -> bool:
    return path == f"{_CONTROL_PREFIX}/{SESSION_FILE}"


def _control_sub(path: str) -> str:
    return path[len(_CONTROL_PREFIX) :].strip("/")

