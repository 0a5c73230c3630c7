"""Serve a virtual read without FUSE, through the very core a mount uses.

A read names ``<rel>@<suffix>`` below a source root. Nothing here parses the
suffix or builds a pack: the name goes to :class:`~sparsefs.vfs.core.Core` (grammar,
Protocol, Readers, Gate, episodes), either in this process or in a mount's daemon.

Episode state lives in one process at a time. A mount holds an exclusive flock
on its state directory and keeps episodes in memory, so two writers would
number episodes from the same counter and overwrite each other's records.
Hence the route, decided per request:

1. the root lies in a live SparseFS mount: open the name *through that mount*
   (it is another process, so nothing deadlocks), confined beneath it with
   openat2, with a deadline;
2. else the state directory's lock is free: take it, build the same Core a
   mount builds (state database, parsed store, stats log) and serve in process;
   the lock is held while the :class:`LocalCore` is open (one request for the
   CLI and the MCP server, a ``with`` block in the Python API); a
   :class:`WarmCache` keeps parsed artifacts across LocalCores (MCP);
3. else the lock's holder is a mount elsewhere (a mirror of this root, named
   by the ``mount.json`` it published, :mod:`sparsefs.app.mountinfo`): read
   through it, as in 1;
4. else another in-process reader holds it for a moment: wait for it.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson

from sparsefs.app.compose import build_artifacts, build_core, close_core
from sparsefs.app.mountinfo import mount_holding, visible_mount
from sparsefs.fuse.mounts import FSTYPE, is_stale, mount_entries
from sparsefs.source.rootfs import SourceRoot, relative
from sparsefs.store.state import StateDirBusy, StateLock

log = logging.getLogger("sparsefs.reading")

Route = Literal["mount", "in-process"]
Span = tuple[int, int | None] | None  # bytes [start, end); end None: to the end
_CHUNK = 1 << 20
_LOCK_POLL_S = 0.05


class ReadFailed(Exception):
    """A read that could not be served; the message says why and what to do."""


@dataclass(frozen=True)
class ReadResult:
    """The bytes a virtual path reads as, and which route served them."""

    target: str
    content: bytes
    route: Route
    mountpoint: str | None = None

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        """The pack as data (a ``&format=json`` read); ValueError when the content is not JSON."""
        try:
            return orjson.loads(self.content)
        except orjson.JSONDecodeError as err:
            raise ValueError(f"{self.target} did not read as JSON (ask with format=json)") from err


def split_target(root: Path, target: str) -> str:
    """``target`` as a root-relative name whose '/' after the '@' are encoded as %2F.

    A raw '/' would split the path (the kernel does so in a mount), so the first
    component that holds an '@' and is not a directory starts the virtual name, and
    everything after it belongs to the suffix (in a mount a virtual name exists, as a file).
    """
    rel = relative(_inside(root, target))
    parts = rel.split("/") if rel else []
    for i, part in enumerate(parts[:-1]):
        if "@" in part and not (root / "/".join(parts[: i + 1])).is_dir():
            return "/".join([*parts[:i], "%2F".join(parts[i:])])
    return rel


def _inside(root: Path, target: str) -> str:
    if not os.path.isabs(target):
        return target
    try:
        return str(Path(target).relative_to(root))
    except ValueError:
        raise ReadFailed(f"{target} is outside the root {root}") from None


class WarmCache:
    """A source root and its parsed artifacts, kept across LocalCores (the MCP server's calls)."""

    def __init__(self, root: Path, state_dir: Path, cache: str | None = None) -> None:
        self.root = SourceRoot.open(str(root))
        try:
            self.artifacts = build_artifacts(self.root, state_dir, cache=cache)
        except BaseException:
            self.root.close()
            raise

    def close(self) -> None:
        if self.artifacts.store is not None:
            self.artifacts.store.close()
        self.root.close()


class LocalCore:
    """The daemon's Core (:func:`sparsefs.app.compose.build_core`) in this process, holding the state directory's
    lock until closed; with ``warm``, its parsed artifacts outlive it."""

    def __init__(self, root: Path, state_dir: Path, lock: StateLock, warm: WarmCache | None = None,
                 cache: str | None = None) -> None:
        self.lock = lock
        self.warm = warm
        self.root = warm.root if warm is not None else SourceRoot.open(str(root))
        artifacts = warm.artifacts if warm is not None else None
        try:
            self.core = build_core(self.root, state_dir, "in-process", artifacts=artifacts, cache=cache)
        except BaseException:
            if warm is None:
                self.root.close()
            raise

    def read(self, rel: str, span: Span = None) -> bytes:
        """What ``cat <mount>/<rel>`` would print (a plain read of a real file is its bytes), or a byte span."""
        path = "/" + rel
        opened = self.core.open(path, os.O_RDONLY)
        try:
            return _read_span(lambda size, at: self.core.read(path, size, at, opened.fh), span)
        finally:
            self.core.release(path, opened.fh)

    def close(self) -> None:
        """As a mount ends: stop background work, save what grew, release the lock."""
        close_core(self.core, keep_artifacts=self.warm is not None)
        if self.warm is None:
            self.root.close()
        self.lock.release()


def _read_span(pread: Callable[[int, int], bytes], span: Span) -> bytes:
    """Bytes [start, end) through ``pread(size, offset)``; the whole content when ``span`` is None."""
    start, end = span or (0, None)
    chunks, offset = [], start
    while end is None or offset < end:
        chunk = pread(_CHUNK if end is None else min(_CHUNK, end - offset), offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def read_through_mount(mountpoint: Path, rel: str, timeout: float, span: Span = None) -> bytes:
    """Read ``rel`` beneath a live mount in a helper thread; TimeoutError past ``timeout``."""
    outcome: list[bytes | OSError] = []

    def work() -> None:
        try:
            outcome.append(_read_beneath(mountpoint, rel, span))
        except OSError as err:
            outcome.append(err)

    thread = threading.Thread(target=work, name="sparsefs-read", daemon=True)
    thread.start()
    thread.join(timeout)
    if not outcome:
        raise TimeoutError(f"the mount at {mountpoint} did not answer within {timeout:g} s")
    if isinstance(outcome[0], OSError):
        raise outcome[0]
    return outcome[0]


def _read_beneath(mountpoint: Path, rel: str, span: Span) -> bytes:
    root = SourceRoot.open(str(mountpoint))
    try:
        fd = root.open_file(rel, os.O_RDONLY)  # RESOLVE_BENEATH: no symlink leads out of the mount
    finally:
        root.close()
    try:
        return _read_span(lambda size, at: os.pread(fd, size, at), span)
    finally:
        os.close(fd)


def _check_raw_base(plan: Plan, rel: str) -> None:
    """Bytes asked for must be a regular file's: what has none (a directory, a FIFO, a socket) reads as an
    error pack in a mount, which a caller of ``raw()`` would take for the file's bytes; say so instead (and a
    link out of the root fails with EXDEV, as before)."""
    if plan.local is not None:
        fd = plan.local.root.open_file(rel, os.O_PATH)
    else:
        assert plan.mountpoint is not None
        beneath = SourceRoot.open(str(plan.mountpoint))
        try:
            fd = beneath.open_file(f"{plan.prefix}/{rel}".strip("/") if plan.prefix else rel, os.O_PATH)
        finally:
            beneath.close()
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
    finally:
        os.close(fd)
    if not regular:
        raise ReadFailed(f"{rel}: @raw needs a regular file; this has no bytes to read")


def mount_above(path: Path) -> tuple[Path, str] | None:
    """The live SparseFS mount that serves ``path`` (the innermost mount covering it) and the rest of the path."""
    covering = [e for e in mount_entries() if path == Path(e.mountpoint) or path.is_relative_to(e.mountpoint)]
    if not covering:
        return None
    # The longest mountpoint wins; of equal ones the LAST: a later mount at the same place shadows the earlier
    # (a workspace that is itself a mount point, with SparseFS mounted over it in place).
    innermost = max(reversed(covering), key=lambda e: len(e.mountpoint))
    if innermost.fstype != FSTYPE:
        return None
    if is_stale(innermost.mountpoint):
        raise ReadFailed(
            f"{innermost.mountpoint} is a stale SparseFS mount (its daemon is gone); "
            f"run: sparsefs umount -z {innermost.mountpoint}"
        )
    mountpoint = Path(innermost.mountpoint)
    return mountpoint, str(path.relative_to(mountpoint)).removeprefix(".")


def held_by_mount(root: Path, state_dir: Path) -> Plan | None:
    """A route through the mount whose daemon holds ``state_dir`` (a mirror of ``root``), if it is visible here.
    Its published mount.json names it: no other mount is looked at (one hung mount must not block a read)."""
    info = mount_holding(state_dir)
    mountpoint = visible_mount(info) if info is not None else None
    if info is None or mountpoint is None:
        return None
    prefix = str(root.relative_to(info.source)) if root.is_relative_to(info.source) else ""
    return Plan(mountpoint=mountpoint, prefix=prefix.removeprefix("."))


@dataclass(frozen=True)
class Plan:
    """Where one request goes: a mount (``mountpoint`` + prefix) or a LocalCore in this process."""

    local: LocalCore | None = None
    mountpoint: Path | None = None
    prefix: str = ""


def plan_read(
    root: Path,
    state_dir: Path,
    timeout: float,
    sleep: Callable[[float], None] = time.sleep,
    warm: WarmCache | None = None,
    cache: str | None = None,
) -> Plan:
    """Decide the route (see the module docstring); raises ReadFailed when none opens in time."""
    above = mount_above(root)
    if above is not None:
        return Plan(mountpoint=above[0], prefix=above[1])
    deadline = time.monotonic() + timeout
    while True:
        lock = StateLock(state_dir)
        try:
            lock.acquire()
        except StateDirBusy as err:
            through = held_by_mount(root, state_dir)
            if through is not None:
                return through
            if time.monotonic() >= deadline:
                raise ReadFailed(
                    f"{err}; no mount of it is visible here, and it was not released within {timeout:g} s"
                ) from None
            sleep(_LOCK_POLL_S)
            continue
        return Plan(local=_open_local(root, state_dir, lock, warm, cache))


def _open_local(root: Path, state_dir: Path, lock: StateLock, warm: WarmCache | None, cache: str | None) -> LocalCore:
    try:
        return LocalCore(root, state_dir, lock, warm, cache)
    except BaseException:
        lock.release()
        raise


def serve(plan: Plan, rel: str, target: str, timeout: float, span: Span = None) -> ReadResult:
    """Run one read on a planned route (``span``: only bytes [start, end) of it)."""
    if rel.endswith("@raw"):
        _check_raw_base(plan, rel.removesuffix("@raw"))
    if plan.local is not None:
        return ReadResult(target, plan.local.read(rel, span), "in-process")
    assert plan.mountpoint is not None
    full = f"{plan.prefix}/{rel}".strip("/") if plan.prefix else rel
    content = read_through_mount(plan.mountpoint, full, timeout, span)
    return ReadResult(target, content, "mount", str(plan.mountpoint))
