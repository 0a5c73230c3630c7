"""Who is asking: the guard's view of a FUSE caller, from /proc.

A FUSE request carries the calling *thread's* id. ``ProcessTree`` maps it to
its process and says whether that process is in a guarded tree (a ``--guard-pid``
process or a ``--guard-comm`` name, and all their descendants). A process's
verdict is cached per (pid, start time, name): the start time tells a reused
pid from the process that had it, and the name changes on ``exec`` (a shell
that execs ``claude`` becomes a guarded root). Guard pids are remembered with
their start time, so a newcomer that later gets a guard pid is not guarded.

For a display tool (``cat`` and the like) the guard also needs to know where
its output goes (``shows_to_harness``): a card is only safe when a person or
the harness reads it — the tool's stdout is a terminal, or a pipe whose read
end an ancestor in the guarded tree holds (the harness capturing a command's
output). A redirect into a file, a pipe into another tool (``cat a | wc``), a
shell's command substitution, or more than one file argument (``cat a b >
merged``) means the bytes are data, and the tool gets the bytes.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

log = logging.getLogger("sparsefs.guard")

_COMM_LEN = 15  # the kernel keeps this many bytes of a process name
_MAX_DEPTH = 64
_CACHE_LIMIT = 8192
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "fish", "busybox", "tcsh", "csh", "env", "xargs"})


@dataclass(frozen=True)
class Caller:
    """The process behind a request, as the guard sees it."""

    pid: int
    comm: str
    guarded: bool  # in a guarded tree
    root: bool  # itself named by --guard-pid / --guard-comm
    ancestors: tuple[int, ...] = ()  # its guarded ancestors, nearest first, up to the guarded root


def read_stat(pid: int, proc: str = "/proc") -> tuple[str, int, int] | None:
    """(name, parent pid, start time in clock ticks) of a process or thread; None when it is gone."""
    try:
        with open(f"{proc}/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    head, _, tail = data.rpartition(b")")  # the name may hold spaces and parentheses
    fields = tail.split()
    return head.partition(b"(")[2].decode(errors="replace"), int(fields[1]), int(fields[19])


def thread_group(tid: int, proc: str = "/proc") -> int:
    """The process a thread belongs to (FUSE requests carry the calling thread's id)."""
    try:
        with open(f"{proc}/{tid}/status", "rb") as handle:
            for line in handle:
                if line.startswith(b"Tgid:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return tid


class ProcessTree:
    """Is a caller in a guarded tree? Ancestry from /proc, cached per (pid, start time, name)."""

    def __init__(self, pids: Iterable[int], comms: Iterable[str], ttl_s: float = 1.0, proc: str = "/proc") -> None:
        self.proc = proc
        self.ttl_s = ttl_s
        self._roots = {pid: _start(read_stat(pid, proc)) for pid in pids}
        for pid in (pid for pid, start in self._roots.items() if start is None):
            log.warning("guard pid %d is not running; a process that gets this pid later will be guarded", pid)
        self._comms = frozenset(name[:_COMM_LEN] for name in comms)
        self._threads: dict[int, tuple[float, int]] = {}  # tid -> (until, pid)
        self._processes: OrderedDict[tuple[int, int, str], Caller] = OrderedDict()
        self._lock = threading.Lock()

    def caller(self, tid: int) -> Caller | None:
        pid = self._pid_of(tid)
        info = read_stat(pid, self.proc)
        if info is None:
            return None
        comm, parent, start = info
        known = self._known(pid, start, comm)
        if known is not None:
            return known
        root = self._is_root(pid, comm, start)
        ancestors = () if root else self._guarded_ancestors(parent)
        return self._remember(Caller(pid, comm, root or bool(ancestors), root, ancestors), start)

    def _pid_of(self, tid: int) -> int:
        now = time.monotonic()
        hit = self._threads.get(tid)
        if hit is not None and hit[0] > now:
            return hit[1]
        pid = thread_group(tid, self.proc)
        with self._lock:
            if len(self._threads) >= _CACHE_LIMIT:
                self._threads.clear()
            self._threads[tid] = (now + self.ttl_s, pid)
        return pid

    def _guarded_ancestors(self, pid: int) -> tuple[int, ...]:
        """The chain from ``pid`` up to a guarded root, nearest first; () when no ancestor is guarded."""
        chain: list[int] = []
        for _ in range(_MAX_DEPTH):
            info = read_stat(pid, self.proc) if pid > 0 else None
            if info is None:
                return ()
            comm, parent, start = info
            chain.append(pid)
            known = self._known(pid, start, comm)
            if known is not None:
                return (*chain, *known.ancestors) if known.guarded else ()
            if self._is_root(pid, comm, start):
                return tuple(chain)
            if pid == 1:
                return ()
            pid = parent
        return ()

    def _is_root(self, pid: int, comm: str, start: int) -> bool:
        if pid in self._roots and self._roots[pid] in (None, start):
            return True
        return comm[:_COMM_LEN] in self._comms

    def _known(self, pid: int, start: int, comm: str) -> Caller | None:
        with self._lock:
            return self._processes.get((pid, start, comm))

    def _remember(self, caller: Caller, start: int) -> Caller:
        with self._lock:
            self._processes[(caller.pid, start, caller.comm)] = caller
            while len(self._processes) > _CACHE_LIMIT:
                self._processes.popitem(last=False)
        return caller

    def shows_to_harness(self, caller: Caller) -> bool:
        """A display tool with one file argument whose output a terminal or the harness reads."""
        if _file_arguments(caller.pid, self.proc) != 1:
            return False
        target = _fd_target(caller.pid, 1, self.proc)
        if target is None:
            return False
        if target.startswith("/dev/pts/") or target.startswith("/dev/tty"):
            return True
        if not target.startswith("pipe:"):
            return False
        holders = [pid for pid in caller.ancestors if not _is_shell(pid, self.proc)]
        return any(_holds_read_end(pid, target, self.proc) for pid in holders)


def _start(info: tuple[str, int, int] | None) -> int | None:
    return None if info is None else info[2]


def _is_shell(pid: int, proc: str) -> bool:
    info = read_stat(pid, proc)
    return info is None or info[0] in SHELLS


def _fd_target(pid: int, fd: int, proc: str) -> str | None:
    try:
        return os.readlink(f"{proc}/{pid}/fd/{fd}")
    except OSError:
        return None


def _holds_read_end(pid: int, pipe: str, proc: str) -> bool:
    """Does ``pid`` hold ``pipe`` (``pipe:[inode]``) open for reading?"""
    try:
        fds = os.listdir(f"{proc}/{pid}/fd")
    except OSError:
        return False
    return any(_fd_target(pid, int(fd), proc) == pipe and _read_only(pid, fd, proc) for fd in fds)


def _read_only(pid: int, fd: str, proc: str) -> bool:
    try:
        with open(f"{proc}/{pid}/fdinfo/{fd}", "rb") as handle:
            for line in handle:
                if line.startswith(b"flags:"):
                    return int(line.split()[1], 8) & os.O_ACCMODE == os.O_RDONLY
    except (OSError, ValueError):
        pass
    return False


def _file_arguments(pid: int, proc: str) -> int:
    """How many arguments of the process's command line are not options ('-' alone is stdin: a file)."""
    try:
        with open(f"{proc}/{pid}/cmdline", "rb") as handle:
            argv = handle.read().split(b"\0")[1:]
    except OSError:
        return 0
    operands, options_done = 0, False
    for arg in (arg for arg in argv if arg):
        if options_done or arg == b"-" or not arg.startswith((b"-", b"+")):
            operands += 1
        elif arg == b"--":
            options_done = True
    return operands
