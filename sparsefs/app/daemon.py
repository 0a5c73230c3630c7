"""Run one mount in the foreground: open the source, build the core (``sparsefs.app.compose``), serve."""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from sparsefs.app import compose
from sparsefs.app.compose import default_state_dir
from sparsefs.app.mountinfo import MountInfo, acquire_for_mount, write_info
from sparsefs.app.sdnotify import Readiness
from sparsefs.fuse import backends
from sparsefs.fuse.mounts import find_mount, is_stale, unmount
from sparsefs.guard.policy import DEFAULT_THRESHOLD, GuardConfig
from sparsefs.source.rootfs import SourceRoot
from sparsefs.store.state import StateDirBusy, StateLock

log = logging.getLogger("sparsefs")


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

    @property
    def in_place(self) -> bool:
        return self.source == self.mountpoint


def plan_mount(source: str, mountpoint: str | None, state_dir: str | None, allow_other: bool,
               backend: str = "auto") -> MountPlan:
    """Validate the request; raise MountError with a fix when it cannot work."""
    src = Path(source).resolve()
    mnt = Path(mountpoint).resolve() if mountpoint else src
    if not src.is_dir():
        raise MountError(f"source {src} is not a directory")
    _check_mountpoint(src, mnt)
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
    if find_mount(mnt) and is_stale(mnt):
        _recover_stale(mnt)
    entry = find_mount(mnt)
    if entry and entry.fstype == "fuse.sparsefs":
        raise MountError(f"{mnt} is already a SparseFS mount; run: sparsefs umount {mnt}")
    if not mnt.is_dir():
        raise MountError(f"mountpoint {mnt} is not a directory (mkdir -p {mnt})")


def _recover_stale(mnt: Path) -> None:
    """A mount whose daemon died (crash, SIGKILL) answers ENOTCONN: detach it and mount afresh."""
    log.warning("%s is a stale SparseFS mount (daemon gone); unmounting it first", mnt)
    try:
        unmount(mnt, lazy=True)
    except (RuntimeError, OSError) as err:
        raise MountError(f"{mnt} is a stale mount and could not be unmounted ({err}); run: umount -l {mnt}") from None


def run(plan: MountPlan) -> int:
    """Serve until unmounted or signalled; returns an exit code."""
    serve = backends.server(plan.backend, plan.readers, plan.spin_us, plan.passthrough, plan.no_open)
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
                            watch=_watch_path(plan, root) if plan.watch else None, cache=plan.cache)
    log.info("serving %s at %s (%s, %s backend)", plan.source, plan.mountpoint,
             "in place" if plan.in_place else "mirror", plan.backend)
    readiness = Readiness(mounted.binding, plan.backend)  # Type=notify: READY=1 once the mount answers
    try:
        serve(mounted.core, mounted.binding, str(plan.mountpoint), plan.allow_other)
    finally:
        readiness.stopping()
        mounted.close()
        root.close()
        lock.release()
    return 0


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
