"""Which FUSE backend serves a mount: one table, :data:`BACKENDS`, read by the daemon, the CLI and doctor.

A row says what a backend is called, why it cannot run here (None: it can), where its
``serve(core, binding, mountpoint, allow_other, **options)`` lives (imported only when chosen), which
of the mount's tuning options it takes, and what ``auto`` says when it picks it. ``auto`` takes the
first row that can run: the kernel-protocol backend wherever /dev/fuse can be had (mount(2) as root,
the setuid fusermount3 otherwise; Linux >= 5.4), mfusepy everywhere else. What the kernel backend does
with what the host lacks is decided feature by feature (``sparsefs.fuse.features``: no CAP_SYS_ADMIN
or a kernel before 6.9 means plain reads through the page cache instead of passthrough, and so on),
never by switching backends. Every backend drives the same
operations core and attaches to the same late binding (``sparsefs.vfs.binding``). Adding a backend is a
folder under ``sparsefs/fuse/`` plus one row here.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sparsefs.fuse import features
from sparsefs.vfs.binding import LateBinding
from sparsefs.vfs.core import Core

Serve = Callable[[Core, LateBinding, str, bool], None]


@dataclass(frozen=True)
class Backend:
    """One FUSE backend: its name, whether it can run here, where its serve function is, what it takes."""

    name: str
    blocker: Callable[[], str | None]  # why it cannot run here; None: it can
    serve: str  # "module:function", imported when chosen
    options: frozenset[str] = frozenset()  # which of the mount's tuning options (readers, spin_us...) it takes
    ready: Callable[[], str] = lambda: ""  # what choose() says when it picks this one without being asked


BACKENDS: tuple[Backend, ...] = (
    Backend("kernel", lambda: features.kernel_backend_blocker(), "sparsefs.fuse.kernel.session:serve",
            frozenset({"readers", "spin_us", "passthrough", "no_open"}), lambda: features.describe()),
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
        return backend.name, backend.ready() or f"requested with --backend {requested}"
    blockers: list[str] = []
    for backend in BACKENDS:
        blocker = backend.blocker()
        if blocker is None:
            return backend.name, f"fallback: {'; '.join(blockers)}" if blockers else backend.ready() or "available"
        blockers.append(blocker)
    raise ValueError(f"no FUSE backend can run here: {'; '.join(blockers)}")


def server(name: str, readers: int = 1, spin_us: int | None = None, passthrough: bool = True,
           no_open: bool = False) -> Serve:
    """The serve(core, binding, mountpoint, allow_other) function of a backend, imported on demand.

    Options a backend does not take are dropped (``--no-passthrough`` means nothing to mfusepy); the CLI
    refuses ``--no-open`` for a backend without it before a daemon starts (:func:`refused_options`)."""
    backend = backend_named(name)
    module, _, function = backend.serve.partition(":")
    serve = getattr(importlib.import_module(module), function)
    given: Mapping[str, Any] = {"readers": readers, "spin_us": spin_us, "passthrough": passthrough,
                                "no_open": no_open}
    options = {key: value for key, value in given.items() if key in backend.options and value is not None}
    return functools.partial(serve, **options)


def refused_options(name: str, no_open: bool) -> str | None:
    """Why backend ``name`` cannot honour the mount's switches (None: it can)."""
    if no_open and "no_open" not in backend_named(name).options:
        return f"--no-open needs the kernel backend (the {name} backend opens through libfuse)"
    return None
