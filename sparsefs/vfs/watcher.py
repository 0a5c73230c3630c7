"""Source-tree watcher: changes made outside the mount invalidate caches, or the mount says why not.

One inotify instance, one watch per directory of the source tree, one thread:
it reads events in batches (gathered for ``BATCH_S`` after the first), turns
each into the path it names (relative to the source root) and calls
``on_change(rel)`` once per path per batch — for a name
created, removed or renamed, its directory too (the kernel may cache the
listing). The core then drops fingerprints and packs and asks the kernel to
forget what it cached of the path. The echo of a removal made through the
mount itself is skipped (``sparsefs.source.freshness.Echoes``): the kernel
and the core have already dropped everything it would.

Why not watchdog (used until issue 19): its pipeline handed every event through
three threads and queues; on a 2-vCPU machine that cost the daemon's request
thread the GIL so often that an ``rm -rf`` through the mount ran 5x slower
(94 µs per unlink in the daemon with it, 35 µs with this reader, 17 µs unwatched).

inotify needs one watch per directory, from a per-user budget
(``fs.inotify.max_user_watches``) shared with every other program of that
user (``$SPARSEFS_MAX_WATCHES`` caps this daemon's share). A watch that
cannot be added — at start or for a directory created later (ENOSPC: the
watch limit; EMFILE at creation: the instance limit) — and a queue overflow
(events lost) switch the mount to on-access checking
(``sparsefs.source.freshness``) with the reason, and the watches are given
back: a half-watched tree helps nobody, and the budget is shared.

Mounts under the source that inotify is blind to (NFS, FUSE...;
``sparsefs.source.remote``) are not watched: the paths under them are checked
on each open. The thread also polls the mount table, so a share mounted into
the tree while it is served is found within moments.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import os
import select
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from sparsefs.source import remote
from sparsefs.source.freshness import INSTANCES_SYSCTL, Echoes, Freshness, inotify_limit

if TYPE_CHECKING:
    from sparsefs.vfs.core import Core

log = logging.getLogger("sparsefs.watcher")
QUEUE_SYSCTL = "/proc/sys/fs/inotify/max_queued_events"

IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE = 0x2, 0x4, 0x8
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x40, 0x80, 0x100, 0x200
IN_Q_OVERFLOW, IN_IGNORED = 0x4000, 0x8000
IN_ONLYDIR, IN_DONT_FOLLOW, IN_ISDIR = 0x01000000, 0x02000000, 0x40000000
# Changes only: opens and read-only closes (every plain read through the mount makes them) would wake
# the thread on each read. Attribute changes too: chmod, chown, touch outside reach cached attributes.
MASK = (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
        | IN_ONLYDIR | IN_DONT_FOLLOW)
NAMESPACE = IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, name length
# Events come in bursts (rm -rf, git checkout, a build). Woken per event, this thread took the GIL
# right after each system call the request thread made: rm -rf of 2,000 files through the mount spent
# 100-135 us in each unlinkat instead of 12 us. Gathering for 5 ms first: 20-28 us, and the whole
# command 0.33-0.57 s -> 0.15-0.19 s; invalidations arrive up to 5 ms later (still milliseconds).
BATCH_S = 0.005
MAX_WATCHES_ENV = "SPARSEFS_MAX_WATCHES"
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def _add_watch(fd: int, path: bytes, mask: int) -> int:
    """inotify_add_watch(2); OSError with the errno (ENOSPC: the watch limit)."""
    wd = int(_libc.inotify_add_watch(fd, path, mask))
    if wd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return wd


class SourceWatcher:
    """Watches ``root`` recursively until stopped; ``on_trouble(reason)`` when it cannot watch all of it."""

    def __init__(self, root: str, on_change: Callable[[str], None],
                 on_trouble: Callable[[str], None] = lambda reason: None) -> None:
        self.root = root
        self.trouble: str | None = None
        self._on_change = on_change
        self._on_trouble = on_trouble
        self.echoes: Echoes | None = None  # name changes made through the mount: their echo is (mostly) skipped
        self.skip: Callable[[str], bool] = lambda rel: False  # directories not to watch (blind mounts)
        self.max_watches = max_watches()  # this daemon's share of the per-user budget, if capped
        self.on_mounts: Callable[[], None] | None = None  # the mount table changed (a mount came or went)
        self._mountinfo = -1
        self._started = False
        fd = int(_libc.inotify_init1(os.O_CLOEXEC | os.O_NONBLOCK))
        if fd < 0:
            err = ctypes.get_errno()  # EMFILE here: the instance limit
            raise OSError(err, os.strerror(err))
        self.fd = fd
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC)
        self._dirs: dict[int, bytes] = {}  # wd -> directory, relative to the root (b"" for the root)
        self._lock = threading.Lock()
        self._moved: dict[int, bytes] = {}  # cookie -> directory moved away in this batch
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="sparsefs-watcher", daemon=True)

    def start(self) -> None:
        """Watch every directory; OSError (ENOSPC, with the reason) if not all of them could be."""
        if not os.path.isdir(self.root):
            self.stop()
            raise OSError(errno.ENOENT, f"{self.root} is not a directory")
        self._watch_tree(b"")
        if self.trouble is not None:
            self.stop()
            raise OSError(errno.ENOSPC, self.trouble)
        self._started = True
        self._thread.start()

    def watches(self) -> int:
        with self._lock:
            return len(self._dirs)

    def _watch_tree(self, rel: bytes) -> None:
        """A watch on ``rel`` and on every directory below it (never through a symlink)."""
        for found in self._walk(rel):
            if self.trouble is not None:
                return
            self._watch(found)

    def _walk(self, rel: bytes) -> Iterator[bytes]:
        """``rel`` and every directory below it, parents first, never through a symlink nor into a mount
        inotify is blind to (it is checked on access: its watches would only spend the per-user budget).
        Directories are read with O_NOATIME: the watcher's own reading must not move their atime (a directory
        made and given times through the mount, then read here, got a new atime: pjdfstest utimensat/00.t)."""
        stack = [rel]
        while stack:
            current = stack.pop()
            yield current
            try:
                fd = _open_directory(self._abs(current))
            except OSError:
                continue  # gone meanwhile, or not a directory any more
            try:
                with os.scandir(fd) as entries:
                    names = [os.fsencode(e.name) for e in entries if e.is_dir(follow_symlinks=False)]
            finally:
                os.close(fd)
            below = (current + b"/" + name if current else name for name in reversed(names))
            stack.extend(d for d in below if not self.skip(os.fsdecode(d)))

    def _watch(self, rel: bytes) -> None:
        where = os.fsdecode(rel) or "."
        if self.max_watches is not None and self.watches() >= self.max_watches:
            self._report(f"inotify watch limit reached: {MAX_WATCHES_ENV}={self.max_watches} (this daemon's own "
                         f"share of fs.inotify.max_user_watches={inotify_limit()}), {self.watches()} directories "
                         f"watched, could not watch '{where}'")
            return
        try:
            wd = _add_watch(self.fd, self._abs(rel), MASK)
        except OSError as err:
            if err.errno == errno.ENOSPC:
                self._report(f"inotify watch limit reached: fs.inotify.max_user_watches={inotify_limit()}, "
                             f"{self.watches()} directories watched, could not watch '{where}'")
            return  # gone meanwhile, or not a directory any more: nothing to watch
        with self._lock:
            self._dirs[wd] = rel

    def _abs(self, rel: bytes) -> bytes:
        root = os.fsencode(self.root)
        return root + b"/" + rel if rel else root

    def _report(self, reason: str) -> None:
        if self.trouble is None:
            self.trouble = reason
            if self._started:
                self._on_trouble(reason)

    # ---- the reader thread -------------------------------------------------------------------
    def _run(self) -> None:
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        if self.on_mounts is not None:  # the kernel flags the mount table's fd on every mount and unmount
            self._mountinfo = os.open("/proc/self/mountinfo", os.O_RDONLY | os.O_CLOEXEC)
            poller.register(self._mountinfo, select.POLLPRI | select.POLLERR)
        while True:
            ready = {fd for fd, _ in poller.poll()}
            if self._wake_r in ready:
                return
            if self._mountinfo in ready:
                self._mounts_changed()
                if ready == {self._mountinfo}:
                    continue
            time.sleep(BATCH_S)  # let the burst gather: one wake-up and one read per batch, not per event
            try:
                data = os.read(self.fd, 1 << 18)
            except BlockingIOError:
                continue
            except OSError:
                return
            for rel in self._process(data):
                self._notify(rel)

    def _mounts_changed(self) -> None:
        """Re-arm the mount table's flag (read it to the end) and let the owner look at the new table."""
        try:
            os.lseek(self._mountinfo, 0, os.SEEK_SET)
            while os.read(self._mountinfo, 1 << 16):
                pass
            if self.on_mounts is not None:
                self.on_mounts()
        except Exception:  # the watcher's thread must go on: source events matter more than mounts
            log.exception("looking at the new mount table failed")

    def _process(self, data: bytes) -> list[str]:
        """The paths a batch of raw inotify events names, each once, in order."""
        changed: dict[str, None] = {}
        offset = 0
        while offset < len(data):
            wd, mask, cookie, length = _EVENT.unpack_from(data, offset)
            name = data[offset + _EVENT.size : offset + _EVENT.size + length].rstrip(b"\0")
            offset += _EVENT.size + length
            for rel in self._event(wd, mask, cookie, name):
                changed[os.fsdecode(rel)] = None
        for rel in self._moved.values():  # moved out of the tree: its watches are given back
            self._forget_tree(rel)
        self._moved.clear()
        return list(changed)

    def _event(self, wd: int, mask: int, cookie: int, name: bytes) -> list[bytes]:
        if mask & IN_Q_OVERFLOW:
            self._report(f"inotify event queue overflowed (fs.inotify.max_queued_events="
                         f"{_read_int(QUEUE_SYSCTL)}): changes were lost")
            return []
        with self._lock:
            parent = self._dirs.pop(wd, None) if mask & IN_IGNORED else self._dirs.get(wd)
        if parent is None:
            return []
        if not name:  # the directory itself: only the root's own attributes have no other report
            return [b""] if parent == b"" and mask & IN_ATTRIB else []
        rel = parent + b"/" + name if parent else name
        if mask & IN_ISDIR:
            self._directory_event(rel, mask, cookie)
        if mask & NAMESPACE and self.echoes is not None and self.echoes.take(os.fsdecode(rel)):
            # made through the mount (sparsefs.source.freshness.Echoes): the kernel dropped the directory's
            # caches itself; a removed name has nothing left to drop, a new one is compared by the backend
            return [] if mask & (IN_DELETE | IN_MOVED_FROM) else [rel]
        return [rel, parent] if mask & NAMESPACE else [rel]

    def _directory_event(self, rel: bytes, mask: int, cookie: int) -> None:
        """Keep one watch per directory as directories come, go and move."""
        if mask & IN_MOVED_FROM:
            self._moved[cookie] = rel
        elif mask & IN_MOVED_TO and cookie in self._moved:
            self._repath(self._moved.pop(cookie), rel)
        elif mask & (IN_CREATE | IN_MOVED_TO):
            self._watch_tree(rel)

    def _repath(self, old: bytes, new: bytes) -> None:
        with self._lock:
            for wd, rel in list(self._dirs.items()):
                if rel == old or rel.startswith(old + b"/"):
                    self._dirs[wd] = new + rel[len(old):]

    def _forget_tree(self, gone: bytes) -> None:
        with self._lock:
            doomed = [wd for wd, rel in self._dirs.items() if rel == gone or rel.startswith(gone + b"/")]
            for wd in doomed:
                del self._dirs[wd]
        for wd in doomed:
            _libc.inotify_rm_watch(self.fd, wd)

    def _notify(self, rel: str) -> None:
        try:
            self._on_change(rel)
        except Exception:
            log.exception("invalidation failed for %s", rel)

    def stop(self) -> None:
        """Give the watches back and end the thread (once; later calls do nothing)."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            self._dirs.clear()
        if self._thread.is_alive():
            os.write(self._wake_w, b"x")
            if self._thread is not threading.current_thread():
                self._thread.join(timeout=5)
        os.close(self.fd)  # the watches go with it
        if not self._thread.is_alive():
            os.close(self._wake_r)
            os.close(self._wake_w)
            if self._mountinfo >= 0:
                os.close(self._mountinfo)


def _open_directory(path: bytes) -> int:
    """An fd to read directory ``path`` without touching its atime (O_NOATIME needs the owner or root)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
    try:
        return os.open(path, flags | os.O_NOATIME)
    except PermissionError:
        return os.open(path, flags)


def watch_source(core: Core, path: str, enabled: bool, source: str = "") -> Freshness:
    """Watch ``path`` (the source tree, or the fd path of an in-place mount) for ``core``; never raises.

    Sets the mode of the core's own :class:`Freshness`, reported in stats.json;
    on-access checking takes over whenever inotify cannot cover the whole tree, and
    for a ``source`` (its path, for the mount table) on a filesystem inotify is blind to
    (``sparsefs.source.remote``): all of it, or the mounts under it that are.
    """
    freshness = core.freshness
    core.stats.watcher = freshness.state
    kind = remote.classify(core.root.fd, source or path)
    freshness.kind = kind
    if not enabled:
        freshness.check_on_access("--no-watch: source changes are checked on each open")
        return freshness
    if kind.root_blind:
        freshness.check_on_access(kind.describe())
        return freshness
    freshness.set_blind(kind.blind_mounts)
    try:
        watcher = SourceWatcher(path, core.on_source_change, lambda reason: _give_up(freshness, reason, path))
        watcher.echoes = freshness.echoes
        watcher.skip = lambda rel: freshness.checks_on_open(rel)
        watcher.on_mounts = lambda: freshness.set_blind(remote.blind_mounts(source or path), while_serving=True)
        watcher.start()
    except OSError as err:
        _count_directories_later(freshness, path)
        freshness.check_on_access(_reason(err))
        return freshness
    freshness.watching(watcher.watches, watcher.stop)
    return freshness


def max_watches() -> int | None:
    """``$SPARSEFS_MAX_WATCHES``: at most this many watches for this daemon (None: only the kernel's limit).
    The per-user limit is shared with every program of that user (editors, build tools, other mounts); past
    this cap the mount behaves as at the kernel's limit: checked on access, its watches given back."""
    given = os.environ.get(MAX_WATCHES_ENV, "").strip()
    return int(given) if given.isdigit() else None


def _give_up(freshness: Freshness, reason: str, path: str) -> None:
    """Runtime trouble (inside the watcher's thread): check on access from now on, and stop watching."""
    if freshness.check_on_access(reason, caches_may_be_stale=True):
        threading.Thread(target=freshness.stop_watchers, name="sparsefs-unwatch", daemon=True).start()
        _count_directories_later(freshness, path)


def _reason(err: OSError) -> str:
    if err.errno == errno.EMFILE:
        return f"inotify instance limit reached: fs.inotify.max_user_instances={inotify_limit(INSTANCES_SYSCTL)}"
    if err.errno == errno.ENOSPC:
        if "fs.inotify" in (err.strerror or ""):
            return str(err.strerror)
        return f"inotify watch limit reached: fs.inotify.max_user_watches={inotify_limit()}"
    return f"source watcher unavailable: {err.strerror or err}"


def _count_directories_later(freshness: Freshness, path: str) -> None:
    """How many watches the tree would need (for doctor's fix), counted off the request path."""

    def count() -> None:
        freshness.directories = count_directories(path)

    threading.Thread(target=count, name="sparsefs-count-dirs", daemon=True).start()


def count_directories(path: str) -> int:
    """Directories under ``path`` including itself: the inotify watches a recursive watch needs."""
    return sum(1 for _ in os.walk(path))


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None
