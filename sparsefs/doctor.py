"""``sparsefs doctor``: check what a mount needs, and say how to fix each problem."""

from __future__ import annotations

import ctypes.util
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = True


def check_dev_fuse() -> Check:
    path = "/dev/fuse"
    if not os.path.exists(path):
        return Check("/dev/fuse", False, "missing", "modprobe fuse (on a container: run with --device /dev/fuse)")
    if not stat.S_ISCHR(os.stat(path).st_mode):
        return Check("/dev/fuse", False, "not a character device", "recreate it: mknod /dev/fuse c 10 229")
    if not os.access(path, os.R_OK | os.W_OK):
        return Check("/dev/fuse", False, "not readable and writable by you", "chmod 666 /dev/fuse or run as root")
    return Check("/dev/fuse", True, "present, read-write")


def check_libfuse() -> Check:
    found = ctypes.util.find_library("fuse3")
    if not found:
        return Check("libfuse3", False, "not found", "apt-get install fuse3 libfuse3-3")
    return Check("libfuse3", True, found)


def check_fusermount() -> Check:
    tool = shutil.which("fusermount3")
    if not tool:
        return Check("fusermount3", False, "not on PATH", "apt-get install fuse3")
    if os.geteuid() != 0 and not os.stat(tool).st_mode & stat.S_ISUID:
        return Check("fusermount3", False, f"{tool} is not setuid", f"chmod u+s {tool}")
    return Check("fusermount3", True, tool)


def check_permissions() -> Check:
    if os.geteuid() == 0:
        return Check("permissions", True, "running as root: mount(2) and unmount work directly")
    return Check("permissions", True, "unprivileged: mounts go through setuid fusermount3", required=False)


def check_allow_other() -> Check:
    conf = Path("/etc/fuse.conf")
    enabled = conf.exists() and any(line.strip() == "user_allow_other" for line in conf.read_text().splitlines())
    detail = "user_allow_other set" if enabled else "user_allow_other not set (needed for --allow-other as non-root)"
    return Check("/etc/fuse.conf", True, detail, "" if enabled else "echo user_allow_other >> /etc/fuse.conf",
                 required=False)


def check_binding() -> Check:
    try:
        import mfusepy
    except (ImportError, OSError, AttributeError) as err:
        return Check("mfusepy", False, f"cannot load: {err}", "pip install mfusepy (and apt-get install fuse3)")
    return Check("mfusepy", True, f"libfuse {mfusepy.fuse_version_major}.{mfusepy.fuse_version_minor}")


def check_backend() -> Check:
    from sparsefs.backends import choose

    backend, reason = choose("auto")
    detail = f"kernel {os.uname().release}; --backend auto uses {backend} ({reason})"
    fix = "" if backend == "kernel" else "run as root on Linux >= 6.9 for kernel passthrough (native-speed plain I/O)"
    return Check("backend", True, detail, fix, required=False)


def check_inotify() -> Check:
    path = Path("/proc/sys/fs/inotify/max_user_watches")
    watches = int(path.read_text()) if path.exists() else 0
    ok = watches >= 8192
    fix = "sysctl fs.inotify.max_user_watches=524288" if not ok else ""
    return Check("inotify", ok, f"max_user_watches={watches} (one per watched directory)", fix, required=False)


CHECKS = (check_dev_fuse, check_libfuse, check_fusermount, check_permissions, check_allow_other,
          check_binding, check_backend, check_inotify)


def run_checks(out: TextIO) -> int:
    failed = False
    for check in (fn() for fn in CHECKS):
        mark = "ok" if check.ok else ("FAIL" if check.required else "warn")
        out.write(f"[{mark:>4}] {check.name}: {check.detail}\n")
        if (check.fix and not check.ok) or (check.fix and not check.required):
            out.write(f"       fix: {check.fix}\n")
        failed |= check.required and not check.ok
    out.write("all required checks passed\n" if not failed else "some required checks failed\n")
    return 1 if failed else 0
