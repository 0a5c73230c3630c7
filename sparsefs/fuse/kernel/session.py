"""The kernel-protocol backend: /dev/fuse spoken directly, plain files by kernel passthrough.

No libfuse. A session mounts a /dev/fuse fd, negotiates INIT, and runs the
threads that serve it: reader threads read requests from the transport
(``sparsefs.fuse.kernel.transport``: read, spin, reply) and hand each one to
the dispatcher (``sparsefs.fuse.kernel.dispatch``: request in, reply out,
through ``KernelOps``); a standby reader takes over while the reader is stuck
in one request; the notifier (``sparsefs.fuse.kernel.notify``) sends the
kernel every invalidation that may wait on a lock.

Mounts with mount(2) given CAP_SYS_ADMIN, else through the setuid fusermount3
(``sparsefs.fuse.kernel.mounting``). What the kernel offers in INIT is taken
feature by feature (``sparsefs.fuse.features``): passthrough only with
CAP_SYS_ADMIN on Linux >= 6.9 and without ``--no-passthrough`` (else plain
reads go through the page cache), FUSE_HANDLE_KILLPRIV_V2 where offered (else
the kernel asks security.capability before each write), and so on; the
granted set is in stats.json (``kernel_features``).
"""

from __future__ import annotations

import errno
import logging
import os
import resource
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from sparsefs.fuse import features
from sparsefs.fuse.kernel import mounting
from sparsefs.fuse.kernel import proto as k
from sparsefs.fuse.kernel.dispatch import Dispatcher
from sparsefs.fuse.kernel.fastpath import FastPath
from sparsefs.fuse.kernel.notify import Notifier
from sparsefs.fuse.kernel.ops import KernelOps
from sparsefs.fuse.kernel.standby import Standby
from sparsefs.fuse.kernel.transport import MAX_WRITE, FuseDevice, read_first, request_reader
from sparsefs.vfs.binding import LateBinding
from sparsefs.vfs.core import Core

log = logging.getLogger("sparsefs.kernel")

WANTED = (k.ASYNC_READ | k.BIG_WRITES | k.AUTO_INVAL_DATA | k.DO_READDIRPLUS | k.READDIRPLUS_AUTO
          | k.PARALLEL_DIROPS | k.MAX_PAGES | k.INIT_EXT | k.HANDLE_KILLPRIV_V2)
# stats.json "kernel_features"
GRANTS = {"passthrough": k.PASSTHROUGH, "killpriv_v2": k.HANDLE_KILLPRIV_V2, "posix_acl": k.POSIX_ACL}
TIMED = os.environ.get("SPARSEFS_REQUEST_CPU") == "1"  # per-opcode CPU in stats.json (kernel_request_us)
DEFAULT_READERS = 1
DEFAULT_SPIN_US = 200  # see sparsefs.fuse.kernel.transport


class Session:
    """One mounted connection: reader threads, the dispatcher, the standby, the notifier."""

    def __init__(self, core: Core, binding: LateBinding, mountpoint: str, readers: int = DEFAULT_READERS,
                 passthrough: bool = True, device: FuseDevice | None = None, spin_us: int = DEFAULT_SPIN_US,
                 no_open: bool = False) -> None:
        """``binding``: the one ``core`` was built with; this session attaches to it once INIT is answered."""
        self.core = core
        self.binding = binding
        self.mountpoint = mountpoint
        self.readers = max(1, readers)
        self.spin_ns = max(0, spin_us) * 1000
        self.want_passthrough = passthrough and not no_open  # an open the daemon never sees has no backing file
        self.no_open = no_open
        self.allow_other = False  # set when mounted: other users are then held to the source's POSIX ACLs too
        self.by_fusermount = False  # mounted by fusermount3 (no CAP_SYS_ADMIN): it unmounts too
        self.device = device or FuseDevice()
        self.ops = KernelOps(core, self.device)
        self.ops.no_open = no_open
        self.dispatcher = Dispatcher(self.ops, self.device)
        self.fast = FastPath(self.ops, self.dispatcher)
        self.notifier = Notifier(self.ops, self.device)
        self.ops.forget_name = self.notifier.forget_name_later
        self.ops.files.settle_later = self.notifier.settle_later
        core.stats.sections["kernel_requests"] = self.dispatcher.requests
        core.stats.sections["kernel_request_us"] = self.dispatcher.request_us
        self.stopping = threading.Event()
        self._fds = [self.device.fd]
        self.standby = Standby(self.stopping)
        core.stats.gauges.update(kernel_nodes=lambda: len(self.ops.nodes), open_files=self.ops.open_handles,
                                 kept_idle_files=self.ops.files.kept_idle)

    @property
    def handlers(self) -> dict[int, Callable[[k.Request], bytes | memoryview | None]]:
        return self.dispatcher.handlers

    def invalidate_path(self, path: str) -> None:
        """The binding's invalidation (sparsefs.vfs.binding): see sparsefs.fuse.kernel.notify."""
        self.notifier.invalidate_path(path)

    # ---- lifecycle ---------------------------------------------------------
    def serve(self, allow_other: bool) -> None:
        _raise_fd_limit()
        self.ops.files.idle_limit = max(64, resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 2)
        self.device.fd, self.by_fusermount = mounting.mount(self.mountpoint, allow_other, read_only=self.no_open)
        self.allow_other = allow_other
        self._fds = [self.device.fd]
        if not self.by_fusermount:
            mounting.raise_readahead(self.mountpoint, MAX_WRITE // 1024)
        threads: list[threading.Thread] = []
        try:
            self._negotiate()
            self.notifier.probe_epoch()
            self.core.freshness.listen(self.notifier.untrusted)
            self.binding.attach(caller_pid=self.ops.caller_pid, invalidate=self.invalidate_path,
                                caller=self.ops.caller_credentials)
            threads = self._start_threads()
            self.binding.mark_ready()
            _wait(self.stopping)
        finally:
            self._shut_down(threads)

    def _shut_down(self, threads: list[threading.Thread]) -> None:
        """Unmount first, so the readers end on ENODEV after answering what is in flight."""
        self.stopping.set()
        mounting.unmount(self.mountpoint, self.by_fusermount)
        self.notifier.stop()
        for thread in threads:
            thread.join(timeout=5)  # a lazily detached mount still in use keeps its readers busy
        self.dispatcher.shutdown()
        for fd in self._fds:
            os.close(fd)  # aborts whatever still waits on a lazily detached mount

    def _negotiate(self) -> None:
        request = k.Request.parse(read_first(self.device.fd))
        if request.opcode != k.INIT:
            raise RuntimeError(f"expected INIT, got opcode {request.opcode}")
        offer = k.InitOffer.parse(request.body)
        self.device.send(self.device.fd, k.reply(request.unique, k.pack_init_reply(offer, self.grant(offer),
                                                                                 MAX_WRITE)))

    def grant(self, offer: k.InitOffer) -> int:
        """The INIT flags to take from ``offer``, each feature on its own; recorded for stats and the ops."""
        able = self.want_passthrough and features.passthrough_blocker() is None
        granted = (WANTED | (k.PASSTHROUGH if able else 0) | (k.POSIX_ACL if self.allow_other else 0)) & offer.flags
        self.ops.files.passthrough = bool(granted & k.PASSTHROUGH)
        self.ops.files.killpriv = bool(granted & k.HANDLE_KILLPRIV_V2)
        self.core.stats.passthrough = self.ops.files.passthrough
        self.core.stats.sections["kernel_features"] = lambda: {
            "protocol": f"{offer.major}.{min(offer.minor, k.OUR_MINOR)}",
            **{name: bool(granted & bit) for name, bit in GRANTS.items()},
            "negative_entries": self.ops.cache.epoch, "mounted_by": "fusermount3" if self.by_fusermount else "mount(2)"}
        log.info("kernel FUSE %d.%d; granted %s", offer.major, offer.minor,
                 ", ".join(name for name, bit in GRANTS.items() if granted & bit) or "no optional feature")
        return granted

    def _start_threads(self) -> list[threading.Thread]:
        reader_fds = [self.device.fd, *(self._clone() for _ in range(self.readers - 1))]
        threads = [threading.Thread(target=self._reader, args=(fd,), name=f"sparsefs-reader-{i}", daemon=True)
                   for i, fd in enumerate(reader_fds)]
        threads.append(self.notifier.thread())
        if self.readers == 1:
            standby_fd = self._clone()
            shared = standby_fd == self.device.fd  # non-blocking (the reader spins): the standby must poll
            threads.append(threading.Thread(target=self.standby.watch, name="sparsefs-watch", daemon=True))
            threads.append(threading.Thread(target=self.standby.serve, args=(self._one_request(
                standby_fd, spin=shared and self.spin_ns > 0),), name="sparsefs-standby", daemon=True))
        for thread in threads:
            thread.start()
        return threads

    def _clone(self) -> int:
        """A cloned fd for another thread (closed at shutdown), or the session's own fd if none can be had."""
        fd = self.device.clone()
        if fd is None:
            log.info("/dev/fuse cannot be opened by this user: reader threads share the fd fusermount3 gave")
            return self.device.fd
        self._fds.append(fd)
        return fd

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
        next_request = request_reader(fd, self.spin_ns if spin else 0)
        dispatch, fast, timed = self.dispatcher.dispatch, self.fast.answer, TIMED

        def answer() -> bool:
            try:
                raw = next_request()
            except OSError as err:
                if err.errno != errno.ENODEV and not self.stopping.is_set():  # ENODEV: unmounted, the normal end
                    log.error("reading /dev/fuse failed: %s", err)
                return False
            if raw is None:
                return False
            if stamp is not None:
                stamp.started()
            try:
                if timed:
                    self._timed(fd, raw)
                elif not fast(fd, raw):
                    dispatch(fd, k.Request.parse(raw))
            except Exception:  # a malformed request must not end the loop
                log.exception("could not dispatch a %d-byte request", len(raw))
            finally:
                if stamp is not None:
                    stamp.finished()
            return True

        return answer

    def _timed(self, fd: int, raw: bytes) -> None:
        """Answer ``raw`` and add the thread's CPU time to its opcode's (``SPARSEFS_REQUEST_CPU=1``)."""
        started = time.thread_time_ns()
        if not self.fast.answer(fd, raw):
            self.dispatcher.dispatch(fd, k.Request.parse(raw))
        self.dispatcher.busy_ns[k.U32.unpack_from(raw, 4)[0]] += time.thread_time_ns() - started

    def _dispatch(self, fd: int, request: k.Request) -> None:
        self.dispatcher.dispatch(fd, request)


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


def _wait(stopping: threading.Event) -> None:
    """Block the main thread until unmounted or signalled; signals only set the event."""

    def stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, stop)
    while not stopping.wait(1.0):
        pass


def serve(core: Core, binding: LateBinding, mountpoint: str, allow_other: bool = False,
          readers: int = DEFAULT_READERS, passthrough: bool = True, spin_us: int = DEFAULT_SPIN_US,
          no_open: bool = False) -> None:
    """Mount and serve until unmounted or signalled; always unmounts on the way out."""
    Session(core, binding, mountpoint, readers, passthrough, spin_us=spin_us, no_open=no_open).serve(allow_other)
