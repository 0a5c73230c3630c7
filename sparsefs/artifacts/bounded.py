"""A Reader's parse under a time, a memory and a result-size bound, in a forked child process.

A Reader is third-party parsing code (pymupdf, zip, XML, regexes) fed files
the agent did not write. Its own bounds (pages, characters, expansion ratio)
cover the cases its author thought of; this one covers the rest: a parse that
loops, or allocates until the kernel's OOM killer takes the whole daemon —
and every mount with it. So the daemon forks, the child moves to its own
process group, lowers its address space limit (``RLIMIT_AS``: what it has now
plus ``memory_bytes``), parses, and pickles the result back through a pipe.
The parent waits at most ``seconds`` and reads at most ``result_bytes``; past
either, or on any error of its own, it SIGKILLs the child's process group and
reaps the child. The caller gets a :class:`BoundExceeded` (a
:class:`~readers.base.ReaderError`), which the protocol answers with an error
pack, and every other request carries on: nothing is shared but the pipe.

At most one child per CPU (at least 2) parses at a time, and the default
memory bound is min(4 GiB, MemAvailable / that count): 8 agents opening 8 new
PDFs cannot ask the machine for 8 x 4 GiB.

Small plain-text inputs (under 256 KiB, not an archive, not of a Reader
registered ``isolated`` such as PDF) are parsed in the daemon: their work is
proportional to their size, and a fork (6-9 ms at 80 MB of daemon RSS, ~70 ms
at 1.4 GB, every other daemon thread stalled meanwhile) would cost more than
the parse after every edit of a source file.

A fork copies only the forking thread: a lock another thread held at that
moment stays held in the child for ever. Locks a parse takes are made
fork-safe where they live (``readers.pdf.extract.MUPDF_LOCK`` is taken around
the fork; the registry's and the selector's are recreated in the child).

The child must never outlive its daemon (a daemon SIGKILLed during a hanging
parse left children running for hours, holding its log file). So it asks the
kernel to SIGKILL it when the thread that forked it dies (``PR_SET_PDEATHSIG``;
that thread waits for the child until it is reaped, so its death is the
daemon's), and checks right after that its parent is still the one that
forked it (the daemon may have died between fork and prctl). It enforces its
own time bound as well, should the parent's timer never fire: ``alarm`` (wall
clock) and ``RLIMIT_CPU`` (CPU), ``CHILD_GRACE_S`` after the parent's bound.
It unblocks every signal (a thread started by libfuse blocks them all, and a
fork inherits the forking thread's mask: such a child ignored SIGTERM and its
alarm), turns core dumps off, and holds no fd of the daemon's: stdin, stdout
and stderr (the daemon's log) become /dev/null, every other fd but its pipe
is closed.

Why fork rather than a worker pool: the child starts with the Reader and
everything it imported already in memory (copy-on-write), so a bound costs a
few milliseconds per parse and nothing per request (parses are cached), and a
killed child takes no other request's work with it. The pickle crosses a pipe
between two copies of the same program, never from a file.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import pickle
import resource
import select
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from readers.base import ReaderError

T = TypeVar("T")
_CHUNK = 1 << 20
_EXPANDING = (b"PK\x03\x04", b"%PDF", b"\x1f\x8b", b"BZh", b"\xfd7zXZ", b"(\xb5/\xfd")  # zip, PDF, compressed
_HINT = "read ranges of the original with @raw (e.g. head -c / tail -c) or with ordinary tools"
CHILD_GRACE_S = 2.0
"""How long past the parent's time bound the child stops itself (the parent's stop, which says why, comes first)."""
ORPHANED = 3
"""The child's exit status when its daemon died before it could ask to die with it."""
_PR_SET_PDEATHSIG = 1
_OWN_TIME_SIGNALS = (signal.SIGALRM, signal.SIGXCPU)
SLOTS = max(2, os.cpu_count() or 2)
"""How many bounded parses run at once; the others wait for a slot (within their time bound)."""
_SLOTS = threading.BoundedSemaphore(SLOTS)


class BoundExceeded(ReaderError):
    """The Reader overran its time, memory or result bound, or died; it was stopped.

    ``lasting``: the same input would overrun again (memory, result size), so a
    cache may keep the answer; a timeout or a death may be the machine's load."""

    def __init__(self, message: str, hint: str = "", lasting: bool = False) -> None:
        super().__init__(message, hint)
        self.lasting = lasting


class SlotsBusy(ReaderError):
    """Every parse slot stayed taken for the whole time bound: nothing is wrong with this input."""


@dataclass(frozen=True)
class Bounds:
    """How long, how much more memory and how large a result one parse may take."""

    seconds: float = 30.0
    memory_bytes: int = 4 << 30
    in_process_bytes: int = 256 * 1024
    result_bytes: int = 256 << 20

    def isolates(self, always: bool, data: bytes) -> bool:
        """Whether this parse needs a child: anything big, and anything that can expand whatever its size —
        a Reader registered ``isolated`` (PDF: ``readers.registry``), a zip or compressed input. A small
        plain-text parse does work proportional to its bytes (and the Readers bound it themselves), and a
        fork costs more than the parse."""
        return len(data) > self.in_process_bytes or always or data.startswith(_EXPANDING)

    @classmethod
    def from_env(cls) -> Bounds:
        """SPARSEFS_PARSE_SECONDS and SPARSEFS_PARSE_MEMORY_MB override the defaults."""
        seconds = float(os.environ.get("SPARSEFS_PARSE_SECONDS", cls.seconds))
        megabytes = int(os.environ.get("SPARSEFS_PARSE_MEMORY_MB", default_memory_bytes() >> 20))
        return cls(seconds, megabytes << 20)


def _load_prctl() -> Callable[..., int] | None:
    """libc's prctl, looked up in the daemon: a forked child must not dlopen (the loader lock may be held)."""
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not glibc/Linux: the child's own time bound still holds
        return None
    return prctl


_PRCTL = _load_prctl()


def default_memory_bytes() -> int:
    """min(4 GiB, MemAvailable / SLOTS), at least 256 MiB: every slot busy still fits the machine."""
    try:
        with open("/proc/meminfo") as meminfo:
            available = next(int(line.split()[1]) << 10 for line in meminfo if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        return Bounds.memory_bytes
    return max(256 << 20, min(Bounds.memory_bytes, available // SLOTS))


def run_bounded(fn: Callable[[], T], bounds: Bounds, what: str) -> T:
    """``fn()`` in a child under ``bounds``; its ReaderError is re-raised, an overrun becomes BoundExceeded."""
    if not _SLOTS.acquire(timeout=bounds.seconds):
        raise SlotsBusy(f"the {what} waited {bounds.seconds:g} s for one of {SLOTS} parse slots", "ask again")
    try:
        return _run_child(fn, bounds, what)  # type: ignore[no-any-return]
    finally:
        _SLOTS.release()


def _run_child(fn: Callable[[], Any], bounds: Bounds, what: str) -> Any:
    read_end, write_end = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_end)
        _child(fn, bounds, write_end, parent)
    os.close(write_end)
    _own_group(pid)
    try:
        payload, overrun = _collect(read_end, bounds)
    finally:  # whatever happened here (even MemoryError, KeyboardInterrupt): no child left behind
        os.close(read_end)
        _kill_group(pid)
        _, status = os.waitpid(pid, 0)
    if overrun == "time":
        raise BoundExceeded(f"the {what} did not finish within its {bounds.seconds:g} s bound and was stopped", _HINT)
    if overrun == "size":
        limit = bounds.result_bytes >> 20
        raise BoundExceeded(f"the {what}'s result was larger than {limit:,} MiB (a bound set by the daemon's "
                            "memory cap, --memory-mb) and was dropped", _HINT, lasting=True)
    return _result(payload, status, bounds, what)


def _own_group(pid: int) -> None:
    """Both sides set the child's process group, so it is set whichever runs first."""
    with contextlib.suppress(OSError):  # the child set it already (EACCES) or is gone: its own call covers it
        os.setpgid(pid, pid)


def _kill_group(pid: int) -> None:
    """SIGKILL the child and anything it started. Safe after the child closed the pipe: once a
    process is exiting, a signal no longer changes its exit status."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)  # not (yet) a group leader: the child itself; a zombie until reaped


def _child(fn: Callable[[], Any], bounds: Bounds, out: int, parent: int) -> None:
    status = 0
    try:
        _die_with(parent)
        os.chdir("/")  # a lazy import in the parse never looks in the workspace (sparsefs.app.isolation)
        os.setpgid(0, 0)
        _default_signals()
        _quiet_stdio()
        _close_other_fds(out)
        _limit_memory(bounds.memory_bytes)
        _limit_time(bounds.seconds + CHILD_GRACE_S)
        payload = _outcome(fn)
        view = memoryview(payload)
        while view:
            view = view[os.write(out, view[:_CHUNK]) :]
    except BaseException:  # noqa: BLE001 - the child must reach _exit whatever happens
        status = 1
    finally:
        os._exit(status)


def _die_with(parent: int) -> None:
    """SIGKILL this child when the thread that forked it dies; exit at once if the daemon died already."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # reparented before the prctl took: nobody will read the result
        os._exit(ORPHANED)


def _default_signals() -> None:
    """Every signal unblocked (the forking thread's mask is inherited) and at its default action: the daemon's
    handlers are not ours, and SIGTERM, SIGALRM and SIGXCPU must stop this process."""
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, *_OWN_TIME_SIGNALS):
        signal.signal(signum, signal.SIG_DFL)


def _quiet_stdio() -> None:
    """stdin, stdout and stderr on /dev/null: they are the daemon's (its log file, for a background mount)."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    if null > 2:
        os.close(null)


def _limit_time(seconds: float) -> None:
    """The child's own time bound, should the parent's never stop it: wall clock by alarm, CPU by RLIMIT_CPU
    (SIGXCPU at the soft limit, SIGKILL a second later); no core file either way."""
    whole = max(1, math.ceil(seconds))
    signal.alarm(whole)
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    limit = whole if hard == resource.RLIM_INFINITY else min(whole, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (limit, limit + 1 if hard == resource.RLIM_INFINITY else hard))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _outcome(fn: Callable[[], Any]) -> bytes:
    try:
        outcome: tuple[Any, ...] = ("ok", fn())
    except ReaderError as err:
        outcome = ("reader", type(err), err.message, err.hint)
    except MemoryError:
        outcome = ("memory",)
    except RecursionError:
        outcome = ("error", "RecursionError: nesting too deep")
    except Exception as err:  # noqa: BLE001 - reported to the parent, which logs it as a Reader bug
        outcome = ("error", _describe_error(err))
    return _pickled(outcome)


def _pickled(outcome: tuple[Any, ...]) -> bytes:
    try:
        return pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL)
    except MemoryError:
        return pickle.dumps(("memory",))
    except RecursionError:
        return pickle.dumps(("error", "the result could not be sent back: RecursionError: nested too deep"))
    except Exception as err:  # noqa: BLE001 - an unpicklable result (or error) is a Reader bug
        return pickle.dumps(("error", f"the result could not be sent back: {_describe_error(err)}"))


def _describe_error(err: BaseException) -> str:
    return f"{type(err).__name__}: {str(err)[:200]}"


def _close_other_fds(keep: int) -> None:
    """Hold nothing of the daemon's: a child still parsing must not keep /dev/fuse (and so a dead
    daemon's mount) alive, nor the state database or the pack log."""
    os.closerange(3, keep)
    os.closerange(keep + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0])


def _limit_memory(extra: int) -> None:
    """Cap the address space at what the child maps now (inherited) plus ``extra``."""
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[0])
    limit = pages * resource.getpagesize() + extra
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _collect(fd: int, bounds: Bounds) -> tuple[bytearray, str | None]:
    """What the child writes until it closes the pipe, and None; or what came so far and "time"
    (past the deadline) or "size" (past ``result_bytes``). One buffer, never joined or copied."""
    payload = bytearray()
    deadline = time.monotonic() + bounds.seconds
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP)
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not poller.poll(max(1, int(left * 1000))):
            if time.monotonic() >= deadline:
                return payload, "time"
            continue
        chunk = os.read(fd, _CHUNK)
        if not chunk:
            return payload, None
        payload += chunk
        if len(payload) > bounds.result_bytes:
            return payload, "size"


def _result(payload: bytearray, status: int, bounds: Bounds, what: str) -> Any:
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) in _OWN_TIME_SIGNALS:
        raise BoundExceeded(f"the {what} did not finish within its {bounds.seconds:g} s bound and stopped", _HINT)
    if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0 or not payload:
        raise BoundExceeded(f"the {what} died ({_describe(status, bounds)}) and was stopped", _HINT)
    try:
        outcome = pickle.loads(payload)  # our own forked child wrote it: never data from a file
    except Exception as err:  # e.g. a Reader's exception class that does not unpickle
        raise BoundExceeded(f"the {what} sent back a result that could not be read ({_describe_error(err)})") from err
    kind = outcome[0]
    if kind == "ok":
        return outcome[1]
    if kind == "reader":
        raise outcome[1](outcome[2], outcome[3])
    if kind == "memory":
        raise BoundExceeded(
            f"the {what} ran past its {bounds.memory_bytes >> 20:,} MiB memory bound and was stopped",
            _HINT,
            lasting=True,
        )
    raise RuntimeError(outcome[1])


def _describe(status: int, bounds: Bounds) -> str:
    if os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name
        oom = name == "SIGKILL"  # not ours (ours are reported as overruns): likely the kernel's OOM killer
        return f"signal {name}" + (f", perhaps past its {bounds.memory_bytes >> 20:,} MiB memory bound" if oom else "")
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        return "exit status 0 without a result"
    return f"exit status {os.waitstatus_to_exitcode(status)}"
