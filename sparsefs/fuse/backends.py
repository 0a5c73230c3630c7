"""Which FUSE backend serves a mount: one table, :data:`BACKENDS`, read by the daemon, the CLI and doctor.

A row says what a backend is called, why it cannot run here (None: it can), where its
``serve(core, binding, mountpoint, allow_other, **options)`` lives (imported only when chosen), which
of the mount's tuning options it takes, and what ``auto`` says when it picks it. ``auto`` takes the
first row that can run: the kernel-protocol backend with passthrough wherever kernel passthrough can
work (CAP_SYS_ADMIN, Linux >= 6.9, /dev/fuse), mfusepy everywhere else. Every backend drives the same
operations core and attaches to the same late binding (``sparsefs.vfs.binding``). Adding a backend is a
folder under ``sparsefs/fuse/`` plus one row here.
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sparsefs.vfs.binding import LateBinding
from sparsefs.vfs.core import Core

PASSTHROUGH_KERNEL = (6, 9)
_CAP_SYS_ADMIN = 21
Serve = Callable[[Core, LateBinding, str, bool], None]


def kernel_version() -> tuple[int, int]:
    major, minor = os.uname().release.split(".")[:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


def has_cap_sys_admin() -> bool:
    try:
        with open("/proc/self/status") as status:
            line = next(line for line in status if line.startswith("CapEff:"))
    except (OSError, StopIteration):
        return os.geteuid() == 0
    return bool(int(line.split()[1], 16) >> _CAP_SYS_ADMIN & 1)


def kernel_backend_blocker() -> str | None:
    """Why the kernel backend cannot run here, or None when it can."""
    if not has_cap_sys_admin():
        return "needs CAP_SYS_ADMIN (root) for mount(2) and passthrough backing files"
    if kernel_version() < PASSTHROUGH_KERNEL:
        return f"kernel {os.uname().release} has no FUSE passthrough (needs >= 6.9)"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "/dev/fuse is missing or not read-write"
    return None


@dataclass(frozen=True)
class Backend:
    """One FUSE backend: its name, whether it can run here, where its serve function is, what it takes."""

    name: str
    blocker: Callable[[], str | None]  # why it cannot run here; None: it can
    serve: str  # "module:function", imported when chosen
    options: frozenset[str] = frozenset()  # which of the mount's tuning options (readers, spin_us) it takes
    ready: str = ""  # what choose() says when it picks this one without being asked


BACKENDS: tuple[Backend, ...] = (
    Backend("kernel", lambda: kernel_backend_blocker(), "sparsefs.fuse.kernel.session:serve",
            frozenset({"readers", "spin_us"}), "kernel passthrough available"),
    Backend("mfusepy", lambda: None, "sparsefs.fuse.libfuse.binding:serve"),
)
CHOICES = ("auto", *(backend.name for backend in BACKENDS))


def backend_named(name: str) -> Backend:
    """The row called ``name``; ValueError for an unknown one."""
    for backend in BACKENDS:
        if backend.name == name:
            return backend
    raise ValueError(f"unknown backend {name!r} (choose from {', '.join(CHOICES)})")


def choose(requested: str) -> tuple[str, str]:
    """(backend, reason) for a requested choice; raises ValueError if the requested one cannot run here."""
    if requested != "auto":
        backend = backend_named(requested)
        blocker = backend.blocker()
        if blocker:
            raise ValueError(f"--backend {requested}: {blocker}")
        return backend.name, backend.ready or f"requested with --backend {requested}"
    blockers: list[str] = []
    for backend in BACKENDS:
        blocker = backend.blocker()
        if blocker is None:
            return backend.name, f"fallback: {'; '.join(blockers)}" if blockers else backend.ready or "available"
        blockers.append(blocker)
    raise ValueError(f"no FUSE backend can run here: {'; '.join(blockers)}")


def server(name: str, readers: int = 1, spin_us: int | None = None) -> Serve:
    """The serve(core, binding, mountpoint, allow_other) function of a backend, imported on demand."""
    backend = backend_named(name)
    module, _, function = backend.serve.partition(":")
    serve = getattr(importlib.import_module(module), function)
    given: Mapping[str, Any] = {"readers": readers, "spin_us": spin_us}
    options = {key: value for key, value in given.items() if key in backend.options and value is not None}
    return functools.partial(serve, **options)
