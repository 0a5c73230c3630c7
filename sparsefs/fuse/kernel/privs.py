"""Set-user-ID and set-group-ID bits under FUSE_HANDLE_KILLPRIV_V2 (issue 26, item 2).

Without it the kernel clears the bits itself (a SETATTR of the mode) but first
asks GETXATTR ``security.capability`` before every ``write()`` (FUSE clears
SB_NOSEC, so no inode is ever known clean). With it, an inode found clean
stays clean until its attributes change, and the daemon clears the bits when
the kernel says the caller lacks CAP_FSETID: on WRITE
(``FUSE_WRITE_KILL_SUIDGID``), on an open with O_TRUNC
(``FUSE_OPEN_KILL_SUIDGID``) and on a truncate or chown
(``FATTR_KILL_SUIDGID``). The daemon's own write would not clear them (it runs
as root); ``security.capability`` goes by itself, since the source filesystem
removes it on any write. A passthrough write never reaches the daemon, so a
file with the bits set is written through the daemon instead
(sparsefs.fuse.kernel.files).
"""

from __future__ import annotations

import os
import stat


def privileged(mode: int) -> bool:
    """Set-user-ID, or set-group-ID on a group-executable file: what a write by a user without CAP_FSETID
    clears (FUSE_HANDLE_KILLPRIV_V2 leaves it to the daemon)."""
    return bool(mode & stat.S_ISUID) or mode & (stat.S_ISGID | stat.S_IXGRP) == stat.S_ISGID | stat.S_IXGRP


def kill_suidgid(fd: int) -> None:
    """Clear suid and (on a group-executable file) sgid of the open regular file ``fd``, if set."""
    mode = os.fstat(fd).st_mode
    if stat.S_ISREG(mode) and privileged(mode):
        drop = stat.S_ISUID | (stat.S_ISGID if mode & stat.S_IXGRP else 0)
        os.fchmod(fd, stat.S_IMODE(mode) & ~drop)
