"""Which FUSE backend serves a mount: the kernel-protocol one with passthrough, or mfusepy.

``auto`` picks the kernel backend wherever kernel passthrough can work
(CAP_SYS_ADMIN, Linux >= 6.9, /dev/fuse) and mfusepy everywhere else; both
drive the same operations core.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

from sparsefs.vfs.binding import LateBinding
from sparsefs.vfs.core import Core

CHOICES = ("auto", "kernel", "mfusepy")
PASSTHROUGH_KERNEL = (6, 9)
_CAP_SYS_ADMIN = 21


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


def choose(requested: str) -> tuple[str, str]:
    """(backend, reason) for a requested choice; raises ValueError if 'kernel' cannot run here."""
    blocker = kernel_backend_blocker()
    if requested == "mfusepy":
        return "mfusepy", "requested with --backend mfusepy"
    if requested == "kernel" and blocker:
        raise ValueError(f"--backend kernel: {blocker}")
    if blocker:
        return "mfusepy", f"fallback: {blocker}"
    return "kernel", "kernel passthrough available"


Serve = Callable[[Core, LateBinding, str, bool], None]


def server(backend: str, readers: int = 1, spin_us: int | None = None) -> Serve:
    """The serve(core, binding, mountpoint, allow_other) function of a backend, imported on demand."""
    if backend == "kernel":
        from sparsefs.fuse.kernel.session import DEFAULT_SPIN_US
        from sparsefs.fuse.kernel.session import serve as serve_kernel

        return functools.partial(serve_kernel, readers=readers,
                                 spin_us=DEFAULT_SPIN_US if spin_us is None else spin_us)
    from sparsefs.fuse.libfuse.binding import serve as serve_mfusepy

    return serve_mfusepy
