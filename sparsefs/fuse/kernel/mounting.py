"""Mounting a /dev/fuse connection: mount(2) with CAP_SYS_ADMIN, the setuid fusermount3 without it.

An ordinary user cannot call mount(2). libfuse's way around it, used here the
same way: run ``fusermount3 -o OPTIONS -- MOUNTPOINT`` with ``_FUSE_COMMFD``
naming one end of a unix socket pair; fusermount3 (setuid root) opens
/dev/fuse, checks that the user may mount there, mounts, and sends the open
fd back over the socket (SCM_RIGHTS). Unmounting is ``fusermount3 -u`` too.
fusermount3 itself adds ``nosuid,nodev`` and the fd, rootmode, user_id and
group_id options; ``allow_other`` needs ``user_allow_other`` in
/etc/fuse.conf (doctor says so).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import os
import socket
import subprocess
from pathlib import Path

from sparsefs.fuse import features
from sparsefs.fuse.mounts import find_mount

log = logging.getLogger("sparsefs.kernel")

COMMFD = "_FUSE_COMMFD"
FUSERMOUNT_TIMEOUT_S = 20.0
_MS_RDONLY, _MS_NOSUID, _MS_NODEV = 1, 2, 4
_MNT_DETACH = 2
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def mount(mountpoint: str, allow_other: bool, read_only: bool = False) -> tuple[int, bool]:
    """(an open, mounted /dev/fuse fd, whether fusermount3 mounted it)."""
    if features.has_cap_sys_admin():
        fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
        try:
            mount_device(fd, mountpoint, allow_other, read_only)
        except BaseException:
            os.close(fd)
            raise
        return fd, False
    return fusermount_mount(mountpoint, allow_other, read_only), True


def mount_device(fd: int, mountpoint: str, allow_other: bool, read_only: bool = False) -> None:
    """mount(2) ``fd`` at ``mountpoint`` (needs CAP_SYS_ADMIN)."""
    data = f"fd={fd},rootmode=40000,user_id={os.getuid()},group_id={os.getgid()}"
    if allow_other:
        data += ",allow_other,default_permissions"
    flags = _MS_NOSUID | _MS_NODEV | (_MS_RDONLY if read_only else 0)
    if _libc.mount(b"sparsefs", os.fsencode(mountpoint), b"fuse.sparsefs", flags, data.encode()) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {mountpoint}: {os.strerror(err)}")


def fusermount_options(allow_other: bool, read_only: bool) -> str:
    options = ["ro" if read_only else "rw", "nosuid", "nodev", "fsname=sparsefs", "subtype=sparsefs"]
    if allow_other:
        options += ["allow_other", "default_permissions"]
    return ",".join(options)


def fusermount_mount(mountpoint: str, allow_other: bool, read_only: bool = False) -> int:
    """Mount through fusermount3 and receive the /dev/fuse fd it opened (libfuse's fuse_mount_fusermount)."""
    tool = features.fusermount()
    if tool is None:
        raise OSError(errno.EPERM, "no CAP_SYS_ADMIN and no setuid fusermount3 to mount with")
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with ours, theirs:
        done = subprocess.run(
            [tool, "-o", fusermount_options(allow_other, read_only), "--", mountpoint],
            env={**os.environ, COMMFD: str(theirs.fileno())}, pass_fds=(theirs.fileno(),), cwd="/",
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=FUSERMOUNT_TIMEOUT_S, check=False)
        theirs.close()
        if done.returncode != 0:
            raise OSError(errno.EPERM, f"fusermount3: {done.stderr.strip() or f'exit {done.returncode}'}")
        ours.settimeout(FUSERMOUNT_TIMEOUT_S)
        _, fds, _, _ = socket.recv_fds(ours, 1, 1)
    if not fds:
        raise OSError(errno.EIO, "fusermount3 mounted but sent no /dev/fuse fd")
    for extra in fds[1:]:
        os.close(extra)
    os.set_inheritable(fds[0], False)
    return fds[0]


def raise_readahead(mountpoint: str, kilobytes: int) -> bool:
    """Let the kernel read ahead ``kilobytes`` on this mount (its own backing device, gone with it).

    The kernel offers FUSE its default readahead (128 KiB) and the INIT reply can only lower it, so a
    file served through the page cache is filled 128 KiB per READ. The mount's bdi setting is writable by
    root only; an unprivileged mount keeps the default. Read from the mount table, never by a stat of
    the mountpoint (that would ask this very daemon before it serves)."""
    entry = find_mount(mountpoint)
    if entry is None:
        return False
    try:
        Path(f"/sys/class/bdi/0:{entry.minor}/read_ahead_kb").write_text(f"{kilobytes}\n")
    except OSError:
        return False
    return True


def unmount(mountpoint: str, by_fusermount: bool) -> None:
    """Unmount; detach lazily if something still holds it (fusermount3 -u for a mount it made)."""
    if not find_mount(mountpoint):
        return
    if by_fusermount:
        _fusermount_unmount(mountpoint)
        return
    for flags in (0, _MNT_DETACH):
        if _libc.umount2(os.fsencode(mountpoint), flags) == 0:
            return
        err = ctypes.get_errno()
        if err == errno.EINVAL:  # no longer mounted
            return
        log.warning("umount %s: %s", mountpoint, os.strerror(err))


def _fusermount_unmount(mountpoint: str) -> None:
    tool = features.fusermount() or features.system_tool("fusermount3") or "/bin/fusermount3"
    for lazy in ([], ["-z"]):
        try:
            done = subprocess.run([tool, "-u", "-q", *lazy, "--", mountpoint], cwd="/", stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=FUSERMOUNT_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as err:
            log.warning("fusermount3 -u %s: %s", mountpoint, err)
            continue
        if done.returncode == 0 or not find_mount(mountpoint):
            return
        log.warning("fusermount3 -u %s: %s", mountpoint, done.stderr.strip())
