"""The kernel-protocol backend: /dev/fuse spoken directly, plain files by kernel passthrough.

No libfuse. ``mount(2)`` attaches a /dev/fuse fd; INIT negotiates passthrough;
reader threads (each on its own cloned fd, since a reply must go back on the
fd its request came from) take requests and answer them through
``KernelOps``. Requests that may build an EvidencePack (lookups of '@' names,
generated files, the control tree) run on a separate worker pool, so a slow
pack never holds a plain lookup behind it. Any exception in a request becomes
an errno reply (EIO for bugs, logged); the loop goes on. Source changes reach
the kernel as NOTIFY_INVAL_INODE / NOTIFY_INVAL_ENTRY.

Requires CAP_SYS_ADMIN (mount(2) and BACKING_OPEN); passthrough needs Linux >= 6.9.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import functools
import logging
import os
import queue
import resource
import select
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import FrameType

from sparsefs.fuse.errors import to_errno
from sparsefs.fuse.kernel import proto as k
from sparsefs.fuse.kernel.nodes import Node
from sparsefs.fuse.kernel.ops import KernelOps
from sparsefs.fuse.kernel.standby import Standby
from sparsefs.fuse.mounts import find_mount
from sparsefs.vfs.binding import LateBinding
from sparsefs.vfs.core import Core

log = logging.getLogger("sparsefs.kernel")

MAX_WRITE = 1 << 20
BUFFER_SIZE = MAX_WRITE + 8192  # the kernel wants room for one full WRITE plus headers
WANTED = (k.ASYNC_READ | k.BIG_WRITES | k.AUTO_INVAL_DATA | k.DO_READDIRPLUS | k.READDIRPLUS_AUTO
          | k.PARALLEL_DIROPS | k.MAX_PAGES | k.INIT_EXT)
DEFAULT_READERS = 1
# After each request the reader polls /dev/fuse this long before it sleeps: on this 2-vCPU VM a sleeping
# reader's wake-up cost more than the request itself (small files warm 5.5x -> 3x native at 200 us, measured).
DEFAULT_SPIN_US = 200
SLOW_WORKERS = 4
_MS_NOSUID, _MS_NODEV = 2, 4
_MNT_DETACH = 2
_GONE = (errno.ENOENT, errno.ENODEV)  # reply to an interrupted request / connection ended
_RETRY = (errno.EINTR, errno.EAGAIN, errno.ENOENT)
_SLOW_ON_GENERATED = frozenset({k.GETATTR, k.OPEN, k.OPENDIR, k.READDIR, k.READDIRPLUS, k.ACCESS, k.LOOKUP})
_SLOW_ALWAYS = frozenset({k.FSYNC, k.FSYNCDIR})  # may wait for the disk for seconds

_AT = ord("@")

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def mount_device(fd: int, mountpoint: str, allow_other: bool) -> None:
    data = f"fd={fd},rootmode=40000,user_id={os.getuid()},group_id={os.getgid()}"
    if allow_other:
        data += ",allow_other,default_permissions"
    if _libc.mount(b"sparsefs", os.fsencode(mountpoint), b"fuse.sparsefs", _MS_NOSUID | _MS_NODEV,
                   data.encode()) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {mountpoint}: {os.strerror(err)}")


def unmount_device(mountpoint: str) -> None:
    """Unmount; detach lazily if something still holds it."""
    if not find_mount(mountpoint):
        return
    for flags in (0, _MNT_DETACH):
        if _libc.umount2(os.fsencode(mountpoint), flags) == 0:
            return
        err = ctypes.get_errno()
        if err == errno.EINVAL:  # no longer mounted
            return
        log.warning("umount %s: %s", mountpoint, os.strerror(err))


class FuseDevice:
    """An open /dev/fuse connection and its ioctls."""

    def __init__(self) -> None:
        self.fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)

    def clone(self) -> int:
        fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
        fcntl.ioctl(fd, k.DEV_IOC_CLONE, bytearray(k.U32.pack(self.fd)), True)
        return fd

    def backing_open(self, fd: int) -> int:
        # Only a mutable buffer with mutate_flag makes fcntl.ioctl return the syscall's result.
        return int(fcntl.ioctl(self.fd, k.DEV_IOC_BACKING_OPEN, bytearray(k.BACKING_MAP.pack(fd, 0, 0)), True))

    def backing_close(self, backing_id: int) -> None:
        fcntl.ioctl(self.fd, k.DEV_IOC_BACKING_CLOSE, bytearray(k.U32.pack(backing_id)), True)

    def send(self, fd: int, data: bytes) -> None:
        """Write one reply; a reply the kernel no longer wants (interrupted, unmounted) is dropped."""
        try:
            os.write(fd, data)
        except OSError as err:
            if err.errno not in _GONE:
                log.error("reply of %d bytes refused: %s", len(data), err)

    def close(self) -> None:
        os.close(self.fd)


class Session:
    """One mounted connection: reader threads, the slow-request pool, the notifier."""

    def __init__(self, core: Core, binding: LateBinding, mountpoint: str, readers: int = DEFAULT_READERS,
                 passthrough: bool = True, device: FuseDevice | None = None, spin_us: int = DEFAULT_SPIN_US) -> None:
        """``binding``: the one ``core`` was built with; this session attaches to it once INIT is answered."""
        self.core = core
        self.binding = binding
        self.mountpoint = mountpoint
        self.readers = max(1, readers)
        self.spin_ns = max(0, spin_us) * 1000
        self.want_passthrough = passthrough
        self.device = device or FuseDevice()
        self.ops = KernelOps(core, self.device)
        self.handlers = _handler_table(self.ops)
        self.stopping = threading.Event()
        self.pool = ThreadPoolExecutor(SLOW_WORKERS, thread_name_prefix="sparsefs-slow")
        self._pending: dict[int, tuple[int, Future[None]]] = {}
        self._pending_lock = threading.Lock()
        self._notices: queue.SimpleQueue[tuple[Node, str] | None] = queue.SimpleQueue()
        self._fds = [self.device.fd]
        self.standby = Standby(self.stopping)
        core.stats.gauges.update(kernel_nodes=lambda: len(self.ops.nodes), open_files=self.ops.open_handles,
                                 kept_idle_files=self.ops.files.kept_idle)

    # ---- lifecycle ---------------------------------------------------------
    def serve(self, allow_other: bool) -> None:
        _raise_fd_limit()
        self.ops.files.idle_limit = max(64, resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 2)
        mount_device(self.device.fd, self.mountpoint, allow_other)
        threads: list[threading.Thread] = []
        try:
            self._negotiate()
            self.binding.attach(caller_pid=self.ops.caller_pid, invalidate=self.invalidate_path)
            threads = self._start_threads()
            self.binding.mark_ready()
            _wait(self.stopping)
        finally:
            self._shut_down(threads)

    def _shut_down(self, threads: list[threading.Thread]) -> None:
        """Unmount first, so the readers end on ENODEV after answering what is in flight."""
        self.stopping.set()
        unmount_device(self.mountpoint)
        self._notices.put(None)
        for thread in threads:
            thread.join(timeout=5)  # a lazily detached mount still in use keeps its readers busy
        self.pool.shutdown(wait=True, cancel_futures=True)
        for fd in self._fds:
            os.close(fd)  # aborts whatever still waits on a lazily detached mount

    def _negotiate(self) -> None:
        request = k.Request.parse(self._read_request(self.device.fd))
        if request.opcode != k.INIT:
            raise RuntimeError(f"expected INIT, got opcode {request.opcode}")
        offer = k.InitOffer.parse(request.body)
        wanted = WANTED | (k.PASSTHROUGH if self.want_passthrough else 0)
        self.ops.files.passthrough = bool(wanted & offer.flags & k.PASSTHROUGH)
        self.core.stats.passthrough = self.ops.files.passthrough
        log.info("kernel FUSE %d.%d; passthrough %s", offer.major, offer.minor,
                 "on" if self.ops.files.passthrough else "off")
        self.device.send(self.device.fd, k.reply(request.unique, k.pack_init_reply(offer, wanted, MAX_WRITE)))

    def _start_threads(self) -> list[threading.Thread]:
        self._fds += [self.device.clone() for _ in range(self.readers - 1)]
        threads = [threading.Thread(target=self._reader, args=(fd,), name=f"sparsefs-reader-{i}", daemon=True)
                   for i, fd in enumerate(self._fds)]
        threads.append(threading.Thread(target=self._notifier, name="sparsefs-notify", daemon=True))
        if self.readers == 1:
            standby_fd = self.device.clone()
            self._fds.append(standby_fd)
            threads.append(threading.Thread(target=self.standby.watch, name="sparsefs-watch", daemon=True))
            threads.append(threading.Thread(target=self.standby.serve, args=(self._one_request(standby_fd),),
                                            name="sparsefs-standby", daemon=True))
        for thread in threads:
            thread.start()
        return threads

    def _read_into(self, fd: int, buffer: bytearray) -> int:
        while True:
            try:
                return os.readv(fd, [buffer])
            except OSError as err:
                if err.errno not in _RETRY:
                    raise

    def _spinning_reader(self, fd: int) -> Callable[[bytearray], int]:
        """Read requests from a non-blocking ``fd``, retrying for ``spin_ns`` before sleeping in poll(2)."""
        os.set_blocking(fd, False)
        poller = select.poll()
        poller.register(fd, select.POLLIN)

        def read(buffer: bytearray) -> int:
            deadline = time.perf_counter_ns() + self.spin_ns
            while True:
                try:
                    return os.readv(fd, [buffer])
                except BlockingIOError:
                    if time.perf_counter_ns() > deadline:
                        poller.poll()
                        deadline = time.perf_counter_ns() + self.spin_ns
                except OSError as err:
                    if err.errno not in _RETRY:
                        raise

        return read

    def _read_request(self, fd: int) -> bytes:
        while True:
            try:
                return os.read(fd, BUFFER_SIZE)
            except OSError as err:
                if err.errno not in _RETRY:
                    raise

    # ---- request loop ------------------------------------------------------
    def _reader(self, fd: int) -> None:
        answer = self._one_request(fd, self.standby, spin=self.spin_ns > 0)
        while answer():
            pass
        self.stopping.set()

    def _one_request(self, fd: int, stamp: Standby | None = None, spin: bool = False) -> Callable[[], bool]:
        """A function that reads and answers one request from ``fd``; False once the connection is gone.

        With ``stamp``, the time spent answering (not waiting) is shown to the standby's watcher;
        with ``spin``, ``fd`` is polled for ``spin_ns`` before the thread sleeps.
        """
        # One buffer per thread, read into: allocating a 1 MiB bytes object per request cost ~15 µs.
        buffer = bytearray(BUFFER_SIZE)
        view = memoryview(buffer)
        read = self._spinning_reader(fd) if spin else functools.partial(self._read_into, fd)

        def answer() -> bool:
            try:
                size = read(buffer)
            except OSError as err:
                if err.errno != errno.ENODEV and not self.stopping.is_set():  # ENODEV: unmounted, the normal end
                    log.error("reading /dev/fuse failed: %s", err)
                return False
            if size == 0:
                return False
            if stamp is not None:
                stamp.started()
            try:
                self._dispatch(fd, k.Request.parse(bytes(view[:size])))  # a copy: pool requests outlive the buffer
            except Exception:  # a malformed request must not end the loop
                log.exception("could not dispatch a %d-byte request", size)
            finally:
                if stamp is not None:
                    stamp.finished()
            return True

        return answer

    def _dispatch(self, fd: int, request: k.Request) -> None:
        if request.opcode == k.INTERRUPT:
            self._interrupt(request)
        elif self._is_slow(request):
            future = self.pool.submit(self._answer, fd, request)
            with self._pending_lock:
                self._pending[request.unique] = (fd, future)
            future.add_done_callback(lambda _: self._forget_pending(request.unique))
        else:
            self._answer(fd, request)

    def _is_slow(self, request: k.Request) -> bool:
        """Could this build an EvidencePack, render the control tree, or wait long for the disk?"""
        if request.opcode in _SLOW_ALWAYS:
            return True
        if request.opcode not in _SLOW_ON_GENERATED:
            return False
        node = self.ops.nodes.peek(request.nodeid)
        if node is not None and node.generated:
            return True
        return request.opcode == k.LOOKUP and _AT in request.body  # a memoryview holds ints

    def _answer(self, fd: int, request: k.Request) -> None:
        handler = self.handlers.get(request.opcode)
        if handler is None:
            self.device.send(fd, k.reply(request.unique, error=errno.ENOSYS))
            return
        self.ops.set_caller(request)
        try:
            payload = handler(request)
        except Exception as exc:  # noqa: BLE001 - one request's failure must not end the loop
            self.device.send(fd, k.reply(request.unique, error=to_errno(exc, handler.__name__)))
            return
        if payload is not None:
            self.device.send(fd, k.reply(request.unique, payload))

    def _interrupt(self, request: k.Request) -> None:
        """A caller gave up: answer EINTR if its request has not started yet (running ones finish)."""
        (unique,) = k.U64.unpack_from(request.body)
        with self._pending_lock:
            fd, future = self._pending.get(unique, (-1, None))
        if future is not None and future.cancel():
            self.device.send(fd, k.reply(unique, error=errno.EINTR))

    def _forget_pending(self, unique: int) -> None:
        with self._pending_lock:
            self._pending.pop(unique, None)

    # ---- invalidation ------------------------------------------------------
    def invalidate_path(self, path: str) -> None:
        """Forget cached attributes of ``path`` now; pages and the name in the notifier thread.

        Attribute invalidation takes no lock a request could hold, so it is safe
        inside a request; entry and page invalidation wait for the directory and
        page locks, so they must never be sent from a thread that answers requests.
        """
        node = self.ops.nodes.find(path)
        if node is None:
            return
        self._notify(k.NOTIFY_INVAL_INODE, k.INVAL_INODE.pack(node.nodeid, -1, 0))
        self._notices.put((node, path))

    def _notifier(self) -> None:
        while (notice := self._notices.get()) is not None:
            try:
                self._settle(*notice)
            except Exception:  # the notifier outlives any one failure
                log.exception("invalidation of %s failed", notice[1])

    def _settle(self, node: Node, path: str) -> None:
        """Pages of a daemon-served file; the name ``path`` if it no longer leads to ``node``'s inode
        (one name of a hard-linked file may go while the others stay)."""
        if node.generated:
            return  # direct_io: no pages, and the name stays valid
        if node.backing_id is None:
            self._notify(k.NOTIFY_INVAL_INODE, k.INVAL_INODE.pack(node.nodeid, 0, 0))
        entry = self.ops.nodes.entry(path)
        if path == "/" or entry is None or self._still_names(path, node.ino):
            return
        parent, name = entry
        raw = os.fsencode(name)
        self._notify(k.NOTIFY_INVAL_ENTRY, k.INVAL_ENTRY.pack(parent, len(raw), 0) + raw + b"\0")
        if self.ops.nodes.detach(parent, name, only=node) is not None:
            self.ops.source_gone(node)

    def _still_names(self, path: str, ino: int) -> bool:
        try:
            return self.core.root.lstat(path.lstrip("/")).st_ino == ino
        except OSError:
            return False

    def _notify(self, code: int, payload: bytes) -> None:
        try:
            os.write(self.device.fd, k.notification(code, payload))
        except OSError as err:
            log.debug("notification %d: %s", code, err)


def _raise_fd_limit() -> None:
    """Kept files hold one fd each: allow as many as the system does (root may raise the hard limit)."""
    try:
        ceiling = int(Path("/proc/sys/fs/nr_open").read_text())
    except (OSError, ValueError):
        ceiling = 1 << 20
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    for wanted in ((ceiling, ceiling), (hard, hard)):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, wanted)
            return
        except (ValueError, OSError):
            continue


def _handler_table(ops: KernelOps) -> dict[int, Callable[[k.Request], bytes | None]]:
    return {
        k.LOOKUP: ops.lookup, k.FORGET: ops.forget, k.BATCH_FORGET: ops.batch_forget,
        k.GETATTR: ops.getattr, k.SETATTR: ops.setattr, k.READLINK: ops.readlink, k.SYMLINK: ops.symlink,
        k.MKNOD: ops.mknod, k.MKDIR: ops.mkdir, k.UNLINK: ops.unlink, k.RMDIR: ops.rmdir,
        k.RENAME: ops.rename, k.RENAME2: ops.rename2, k.LINK: ops.link, k.OPEN: ops.open, k.READ: ops.read,
        k.WRITE: ops.write, k.STATFS: ops.statfs, k.RELEASE: ops.release, k.FSYNC: ops.fsync,
        k.OPENDIR: ops.dirs.opendir, k.READDIR: ops.dirs.readdir, k.READDIRPLUS: ops.dirs.readdirplus,
        k.RELEASEDIR: ops.dirs.releasedir, k.FSYNCDIR: ops.dirs.fsyncdir, k.ACCESS: ops.access, k.CREATE: ops.create,
        k.GETXATTR: ops.xattrs.getxattr, k.LISTXATTR: ops.xattrs.listxattr, k.SETXATTR: ops.xattrs.setxattr,
        k.REMOVEXATTR: ops.xattrs.removexattr, k.DESTROY: lambda request: b"",
    }


def _wait(stopping: threading.Event) -> None:
    """Block the main thread until unmounted or signalled; signals only set the event."""

    def stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, stop)
    while not stopping.wait(1.0):
        pass


def serve(core: Core, binding: LateBinding, mountpoint: str, allow_other: bool = False,
          readers: int = DEFAULT_READERS, passthrough: bool = True, spin_us: int = DEFAULT_SPIN_US) -> None:
    """Mount and serve until unmounted or signalled; always unmounts on the way out."""
    Session(core, binding, mountpoint, readers, passthrough, spin_us=spin_us).serve(allow_other)
