"""What this host offers the kernel-protocol backend, feature by feature (read by the backend table and doctor).

The kernel backend runs wherever /dev/fuse can be had: mount(2) with
CAP_SYS_ADMIN, otherwise the setuid ``fusermount3`` (as libfuse does), on any
kernel from :data:`LOWEST_KERNEL`. Everything past that is a feature the
kernel offers in INIT (or that needs a privilege) and is used when present,
one by one: a missing feature costs its own speed-up, never the backend.
:data:`FEATURES` says what each needs; the session records which ones the
kernel actually granted (``stats.json`` ``"kernel_features"``).
"""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

LOWEST_KERNEL = (5, 4)  # FUSE 7.31: no-OPENDIR (5.1), cached listings and max_pages (4.20), splice; first LTS with all
PASSTHROUGH_KERNEL = (6, 9)
_CAP_SYS_ADMIN = 21
FUSE_CONF = Path("/etc/fuse.conf")


@dataclass(frozen=True)
class Feature:
    """One kernel feature the backend uses when it is there."""

    name: str
    kernel: tuple[int, int]  # first Linux version that has it
    needs: str  # besides the kernel version
    without: str  # what a mount without it does instead


FEATURES: tuple[Feature, ...] = (
    Feature("passthrough", PASSTHROUGH_KERNEL, "CAP_SYS_ADMIN (root) and not --no-passthrough",
            "plain reads are served by the daemon into the kernel's page cache (FOPEN_KEEP_CACHE while watched)"),
    Feature("killpriv_v2", (5, 11), "",
            "the kernel asks GETXATTR security.capability before every write()"),
    Feature("negative_entries", (6, 16), "the source watched by inotify (FUSE_NOTIFY_INC_EPOCH)",
            "absent names are not cached: each lookup of a missing name asks the daemon"),
    Feature("no_open", (3, 15), "--no-open (read-only mounts)",
            "every open and close is a round trip (OPEN, RELEASE)"),
    Feature("posix_acl", (4, 9), "--allow-other",
            "other users are held to the source's mode bits only, not its POSIX ACLs"),
)


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


TRUSTED_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def system_tool(name: str) -> str | None:
    """``name`` from the system's own directories, never from the caller's $PATH: a daemon running as root must
    not run a ``fusermount3`` or ``umount`` planted in a workspace directory that $PATH happens to name."""
    return shutil.which(name, path=TRUSTED_PATH)


def fusermount() -> str | None:
    """The setuid fusermount3 an unprivileged daemon mounts with (None if missing or not setuid)."""
    tool = system_tool("fusermount3")
    if tool is None:
        return None
    return tool if os.stat(tool).st_mode & stat.S_ISUID else None


def user_allow_other() -> bool:
    """May an unprivileged mount pass allow_other (``user_allow_other`` in /etc/fuse.conf)?"""
    try:
        return any(line.strip() == "user_allow_other" for line in FUSE_CONF.read_text().splitlines())
    except OSError:
        return False


def mount_method() -> str | None:
    """'mount(2)' with CAP_SYS_ADMIN, 'fusermount3' without, None when neither can mount."""
    if has_cap_sys_admin():
        return "mount(2)"
    return "fusermount3" if fusermount() else None


def passthrough_blocker() -> str | None:
    """Why kernel passthrough cannot serve plain files here (None: it can)."""
    if not has_cap_sys_admin():
        return "no CAP_SYS_ADMIN (not root): passthrough backing files need it"
    if kernel_version() < PASSTHROUGH_KERNEL:
        return f"kernel {os.uname().release} has no FUSE passthrough (needs >= 6.9)"
    return None


def kernel_backend_blocker() -> str | None:
    """Why the kernel backend cannot run here, or None when it can."""
    if kernel_version() < LOWEST_KERNEL:
        return f"kernel {os.uname().release} is older than {'.'.join(map(str, LOWEST_KERNEL))}"
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing (modprobe fuse)"
    if mount_method() is None:
        return "no CAP_SYS_ADMIN and no setuid fusermount3 to mount with (apt-get install fuse3)"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):  # fusermount3 opens it as the user, too
        return "/dev/fuse is not read-write for this user (distributions make it 0666; chmod 666 /dev/fuse)"
    return None


def describe() -> str:
    """One line for ``auto``'s reason and doctor: how the kernel backend mounts and serves plain files here."""
    blocker = passthrough_blocker()
    reads = ("plain files by kernel passthrough" if blocker is None
             else f"plain reads through the page cache ({blocker})")
    return f"mounted with {mount_method()}; {reads}"


def feature_lines(granted: dict[str, bool] | None = None) -> list[str]:
    """'name: yes/no (needs ...)' per feature, for doctor; ``granted`` overrides with what a live mount got."""
    here = kernel_version()
    lines = []
    for feature in FEATURES:
        able = feature.name != "passthrough" or passthrough_blocker() is None
        has = here >= feature.kernel and able if granted is None else granted.get(feature.name, False)
        need = f"Linux >= {'.'.join(map(str, feature.kernel))}" + (f", {feature.needs}" if feature.needs else "")
        lines.append(f"{feature.name}: {'yes' if has else 'no'} (needs {need}; without: {feature.without})")
    return lines
