"""Run one mount in the foreground: open the source, build the core (``sparsefs.app.compose``), serve."""

from __future__ import annotations

import dataclasses
import logging
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from sparsefs.app import compose, isolation
from sparsefs.app.compose import default_state_dir
from sparsefs.app.mountinfo import MountInfo, acquire_for_mount, write_info
from sparsefs.app.sdnotify import Readiness
from sparsefs.artifacts import memory
from sparsefs.fuse import backends, mounts
from sparsefs.fuse.mounts import find_mount, unmount
from sparsefs.guard.policy import DEFAULT_THRESHOLD, GuardConfig
from sparsefs.source.rootfs import SourceRoot
from sparsefs.store.state import StateDirBusy, StateLock

log = logging.getLogger("sparsefs")
STACKED_MAX = 16  # dead mounts detached from one path before giving up


class MountError(Exception):
    """A mount request that cannot proceed; the message says how to fix it."""


@dataclass(frozen=True)
class MountPlan:
    """Where the source is, where it appears, and where state lives."""

    source: Path
    mountpoint: Path
    state_dir: Path
    allow_other: bool = False
    watch: bool = True
    backend: str = "auto"
    readers: int = 1  # kernel backend: threads reading /dev/fuse
    spin_us: int | None = None  # kernel backend: poll /dev/fuse this long before sleeping (None: default)
    passthrough: bool = True  # kernel backend: use kernel passthrough where it works (--no-passthrough: never)
    no_open: bool = False  # kernel backend: read-only, opens never reach the daemon (--no-open)
    session_intent: str | None = None  # None: keep the one the last mount of this source left
    guard_pids: tuple[int, ...] = ()  # sparsefs.guard.policy: these processes and their descendants are guarded
    guard_comms: tuple[str, ...] = ()  # ... and processes of these names and theirs
    guard_threshold: int = DEFAULT_THRESHOLD  # full-view characters above which a guarded plain read is carded
    guard_kinds: tuple[str, ...] = ()  # guard kind names (readers.registry); () means all
    cache: str | None = None  # --cache URL: the shared tier under the parsed store (sparsefs.store.shared)
    memory_mb: int | None = None  # --memory-mb: the daemon's memory cap (None: $SPARSEFS_MEMORY_MB or default)

    @property
    def in_place(self) -> bool:
        return self.source == self.mountpoint


def plan_mount(source: str, mountpoint: str | None, state_dir: str | None, allow_other: bool,
               backend: str = "auto", nonempty: bool = False) -> MountPlan:
    """Validate the request; raise MountError with a fix when it cannot work. ``nonempty``: a mirror may cover a
    folder that holds files (they are hidden while mounted); without it such a mirror is refused."""
    src = _settled(source)
    mnt = _settled(mountpoint) if mountpoint else src
    _check_folder("source", src, "")
    _check_mountpoint(src, mnt)
    if mnt != src and not nonempty:
        _check_empty(mnt)
    _check_no_code_served(src, mnt)
    state = Path(state_dir).resolve() if state_dir else default_state_dir(src)
    if state.is_relative_to(src) and mnt == src:
        raise MountError(f"the state directory {state} must not be inside the in-place mount")
    _check_state_dir(state)
    try:
        chosen, _ = backends.choose(backend)
    except ValueError as err:
        raise MountError(f"{err}; use --backend auto or mfusepy") from None
    return MountPlan(src, mnt, state, allow_other, backend=chosen)


def check_cache(url: str | None) -> str | None:
    """Refuse a ``--cache`` URL no engine here can serve before a daemon starts (a store that is merely down
    is fine: reads parse locally until it answers)."""
    if url is None:
        return None
    from sparsefs.store.engines import EngineUnavailable, open_engine, parse_url

    try:
        open_engine(parse_url(url)).close()
    except EngineUnavailable as err:
        raise MountError(str(err)) from None
    return url


def _check_no_code_served(src: Path, mnt: Path) -> None:
    """Refuse to serve a tree Python imports from: the agent could rewrite the daemon's own code (run as root
    at its next start), and in place the daemon would import through its own mount (sparsefs.app.isolation)."""
    inside = isolation.served_code({src, mnt})
    if inside is not None:
        raise MountError(f"{inside} (where this Python imports code from) is inside the served tree: an agent "
                         "could change what the daemon runs; install sparsefs outside it (pipx, /opt) or serve "
                         "a folder that does not hold it")


def _check_state_dir(state: Path) -> None:
    """Refuse early (before a background daemon starts) when a live mount holds the state dir."""
    probe = StateLock(state)
    try:
        acquire_for_mount(probe)  # a reader (sparsefs read, MCP, the API) holds it for moments: wait for it
    except StateDirBusy as err:
        raise MountError(str(err)) from None
    except OSError:
        return  # not creatable here: the daemon reports it
    probe.release()


def _check_mountpoint(src: Path, mnt: Path) -> None:
    if mnt != src and mnt.is_relative_to(src):
        raise MountError(f"mountpoint {mnt} is inside the source {src}; choose a directory outside it")
    if mnt != src and src.is_relative_to(mnt):
        raise MountError(f"source {src} is inside the mountpoint {mnt}; the mount would hide it")
    entry = find_mount(mnt)
    if entry and entry.fstype == mounts.FSTYPE:
        pid = mounts.within(lambda: mounts.daemon_pid(mnt), mounts.PROBE_S)
        owner = f" served by daemon pid {pid}" if pid else ""
        raise MountError(f"{mnt} is already a live SparseFS mount{owner}; it is left as it is. To mount it "
                         f"again, first run: sparsefs umount {mnt}")
    _check_folder("mountpoint", mnt, f"; create it first: mkdir -p {shlex.quote(str(mnt))}")


def _check_folder(role: str, path: Path, create: str) -> None:
    """A missing folder and a file where a folder should be are told apart, each with what to do."""
    if not path.exists():
        raise MountError(f"{role} {path} does not exist{create}")
    if not path.is_dir():
        raise MountError(f"{role} {path} is not a directory (it is a file); give a folder")


def _check_empty(mnt: Path) -> None:
    """A mirror over a folder with files would hide them while mounted: refused unless asked for."""
    try:
        with os.scandir(mnt) as entries:
            names = [entry.name for _, entry in zip(range(3), entries, strict=False)]
    except OSError as err:
        raise MountError(f"mountpoint {mnt} cannot be listed ({err.strerror or err}); choose a folder you can "
                         "read") from None
    if names:
        shown = ", ".join(names[:2]) + (", ..." if len(names) > 2 else "")
        raise MountError(f"mountpoint {mnt} is not empty ({shown}): the mirror would hide its files while "
                         "mounted. Use an empty folder, or add --nonempty to cover them anyway")


def _settled(given: str) -> Path:
    """``given`` resolved, with any dead SparseFS mount on it detached first (it answers ENOTCONN to every
    stat, in place even to the source's) — each step bounded, so a mount that does not answer is refused
    instead of hanging ``sparsefs mount`` (resolving a path stats its last component)."""
    absolute = Path(os.path.abspath(given))
    _detach_dead(absolute)
    resolved = mounts.within(absolute.resolve, mounts.PROBE_S)
    if resolved is None:
        raise MountError(f"{given} did not answer within {mounts.PROBE_S:g} s (a mount on its path is busy or "
                         "hung)")
    if resolved != absolute:
        _detach_dead(resolved)
    return resolved


def _detach_dead(path: Path) -> None:
    for _ in range(STACKED_MAX):  # crash loops can stack dead mounts on one path: the top one first
        if not _detach_if_dead(path):
            return


def _detach_if_dead(path: Path) -> bool:
    """A SparseFS mount whose daemon died (crash, SIGKILL, OOM) answers ENOTCONN to everything, in place
    even to the stat of the source: detach it so the mount can start afresh (what a systemd restart needs).
    A live mount is left alone (refused later); one that does not answer in time, or a dead mount of another
    filesystem, is refused here with what to run, never detached on a guess."""
    entry = find_mount(path)
    state = mounts.probe(path) if entry else mounts.LIVE
    if state == mounts.LIVE or entry is None:
        return False
    if entry.fstype != mounts.FSTYPE:
        raise MountError(f"{path} is a {entry.fstype} mount that does not answer ({state}); it is not ours to "
                         f"detach: umount -l {path}")
    if state == mounts.SILENT:
        raise MountError(f"{path} is a SparseFS mount whose daemon did not answer within {mounts.PROBE_S:g} s "
                         f"(busy or hung); it is not detached. Wait, or run: sparsefs umount {path} "
                         f"(sparsefs umount -z {path} to detach it)")
    _recover_stale(path)
    return True


def _recover_stale(mnt: Path) -> None:
    """Detach a dead mount (lazy: nothing can be in flight on it) and log that we did."""
    log.warning("%s is a stale SparseFS mount (daemon gone); unmounting it first", mnt)
    try:
        unmount(mnt, lazy=True)
    except (RuntimeError, OSError) as err:
        raise MountError(f"{mnt} is a stale mount and could not be unmounted ({err}); run: umount -l {mnt}") from None


def run(plan: MountPlan) -> int:
    """Serve until unmounted or signalled; returns an exit code."""
    os.chdir("/")  # nothing relative ever resolves in the workspace; forked parse children start here too
    _check_no_code_served(plan.source, plan.mountpoint)
    serve = backends.server(plan.backend, plan.readers, plan.spin_us, plan.passthrough, plan.no_open)
    memory.tune_allocator()  # before the serving threads exist: each could otherwise get an arena of its own
    cap = memory.set_process_cap(plan.memory_mb)
    log.info("memory cap %d MiB (%s)", cap.cap_mb, memory.source())
    os.umask(0)  # the kernel already applied the caller's umask to every mode it sends
    lock = StateLock(plan.state_dir)
    try:
        acquire_for_mount(lock)
    except StateDirBusy as err:
        raise MountError(str(err)) from None
    root = SourceRoot.open(str(plan.source))  # before mounting: in place, the mount hides it
    write_info(plan.state_dir, MountInfo(os.getpid(), str(plan.source), str(plan.mountpoint), root.fd,
                                         str(plan.state_dir)))
    mounted = compose.mount(root, plan.state_dir, plan.backend, str(plan.mountpoint),
                            session_intent=plan.session_intent, guard=_guard_config(plan),
                            watch=_watch_path(plan, root) if plan.watch else None, cache=plan.cache,
                            source=str(plan.source))
    log.info("serving %s at %s (%s, %s backend)", plan.source, plan.mountpoint,
             "in place" if plan.in_place else "mirror", plan.backend)
    readiness = Readiness(mounted.binding, plan.backend, announce=announcement(plan))  # and READY=1 (Type=notify)
    try:
        serve(mounted.core, mounted.binding, str(plan.mountpoint), plan.allow_other)
    finally:
        readiness.stopping()
        mounted.close()
        root.close()
        lock.release()
    return 0


def announcement(plan: MountPlan) -> str:
    """What a foreground mount prints once it answers: what is mounted where, and how to stop it."""
    mode = "in place" if plan.in_place else f"mirroring {plan.source}"
    target = shlex.quote(str(plan.mountpoint))
    return (f"mounted {plan.mountpoint} ({mode}, {plan.backend} backend), daemon pid {os.getpid()}; serving in "
            f"the foreground. Stop it with Ctrl-C here, or from another shell: sparsefs umount {target}")


def _guard_config(plan: MountPlan) -> GuardConfig | None:
    """What the plain-read guard cards, when the mount names processes to guard."""
    if not plan.guard_pids and not plan.guard_comms:
        return None
    config = GuardConfig(frozenset(plan.guard_pids), frozenset(plan.guard_comms), plan.guard_threshold)
    if plan.guard_kinds:
        config = dataclasses.replace(config, kinds=frozenset(plan.guard_kinds))
    return config


def _watch_path(plan: MountPlan, root: SourceRoot) -> str:
    """The source tree to watch; in place, the source path is our own mount: the hidden tree through the fd.

    The trailing ``/.`` matters: watches are added with IN_DONT_FOLLOW, which on the bare
    ``/proc/PID/fd/N`` watched the magic link itself (no event ever came); through ``N/.`` the link is
    followed as a directory component and the watch lands on the hidden directory."""
    return f"/proc/{os.getpid()}/fd/{root.fd}/." if plan.in_place else str(plan.source)


def configure_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="sparsefs %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("bm25s").setLevel(logging.WARNING)
