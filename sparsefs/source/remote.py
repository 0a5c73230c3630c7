"""Where inotify is blind: the source root's filesystem type and the mounts under it.

inotify reports what this host's kernel does to a file. On a network or FUSE filesystem (NFS, CephFS,
SMB, 9p, sshfs, a FUSE bucket...) another host, or the FUSE server's own backing store, changes files
without this kernel knowing: no event ever comes, and a mount that trusted its watcher would keep what
the kernel cached for a day (issue 25). So the mount classifies its source at start:

* the root's type from ``fstatfs`` on the root's own fd (``f_type``, the filesystem's magic number: in
  place the path is our own mount, the fd is the directory under it);
* every mount at or under the root path from ``/proc/self/mountinfo`` (its type name), because a local
  workspace can hold an NFS share or a FUSE mount in one of its folders.

A root on such a filesystem is checked on access (``sparsefs.source.freshness``); a local root with
blind mounts under it is watched, and the paths under those mounts are checked on access too.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from dataclasses import dataclass
from pathlib import Path

# statfs(2) f_type of filesystems whose files change without this kernel seeing it (linux/magic.h and the
# filesystems' own headers)
BLIND_MAGIC: dict[int, str] = {
    0x6969: "nfs", 0x517B: "smb", 0xFF534D42: "cifs", 0xFE534D42: "smb3", 0x00C36400: "ceph",
    0x65735546: "fuse", 0x01021997: "9p", 0x5346414F: "afs", 0x6B414653: "afs", 0x73757245: "coda",
    0x01161970: "gfs2", 0x7461636F: "ocfs2", 0x0BD00BD0: "lustre", 0x47504653: "gpfs", 0x19830326: "orangefs",
    0x564C: "ncp", 0x786F4256: "vboxsf", 0x0BAD1DEA: "beegfs", 0x13661366: "glusterfs",
}
# mountinfo type names of the same (fuse.* covers sshfs, rclone, s3fs, gcsfuse, glusterfs over FUSE...)
BLIND_TYPES = frozenset({
    "nfs", "nfs4", "smb", "smbfs", "smb3", "cifs", "ceph", "9p", "afs", "coda", "gfs2", "ocfs2", "lustre",
    "gpfs", "orangefs", "ncpfs", "vboxsf", "virtiofs", "beegfs", "glusterfs", "fuse", "davfs", "pvfs2",
})
LOCAL_FUSE = frozenset({"fuseblk"})  # a block device behind FUSE (ntfs-3g): every change passes this kernel
OURS = "fuse.sparsefs"
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


@dataclass(frozen=True)
class BlindMount:
    """A mount under the source root whose changes inotify does not see."""

    rel: str  # its mount point, relative to the root
    fstype: str

    def covers(self, rel: str) -> bool:
        return rel == self.rel or rel.startswith(self.rel + "/")


@dataclass(frozen=True)
class SourceKind:
    """What the source root is on, and which mounts under it inotify cannot watch."""

    root_type: str  # a name from BLIND_MAGIC, or "local"
    magic: int | None
    blind_mounts: tuple[BlindMount, ...] = ()

    @property
    def root_blind(self) -> bool:
        return self.root_type != "local"

    def describe(self) -> str:
        """Why the mode was chosen, for stats.json and doctor."""
        if self.root_blind:
            return (f"the source is on {self.root_type} (statfs f_type {self.magic:#x}): inotify sees only this "
                    "host's changes, so every open checks the file instead")
        if not self.blind_mounts:
            return ""
        where = ", ".join(f"'{m.rel}' ({m.fstype})" for m in self.blind_mounts)
        return f"watched, except mounts inotify cannot see into, checked on each open: {where}"


def fs_magic(fd: int) -> int | None:
    """``fstatfs(fd).f_type`` (None if the call fails)."""
    buf = ctypes.create_string_buffer(256)  # struct statfs is 120 bytes on 64-bit Linux
    if _libc.fstatfs(fd, buf) != 0:
        return None
    return ctypes.c_ulong.from_buffer(buf).value & 0xFFFFFFFF


def is_blind_type(fstype: str) -> bool:
    """Whether a mountinfo type name is a filesystem whose files change behind inotify's back."""
    if fstype in LOCAL_FUSE or fstype == OURS:
        return False
    return fstype in BLIND_TYPES or fstype.startswith("fuse.") or fstype.split(".")[0] in BLIND_TYPES


def classify(root_fd: int, root_path: str, mountinfo: Path = Path("/proc/self/mountinfo")) -> SourceKind:
    """The source's kind: the root's filesystem by its fd, the mounts under ``root_path`` by the mount table."""
    magic = fs_magic(root_fd)
    root_type = BLIND_MAGIC.get(magic, "local") if magic is not None else "local"
    return SourceKind(root_type, magic, blind_mounts(root_path, mountinfo))


def blind_mounts(root_path: str, mountinfo: Path = Path("/proc/self/mountinfo")) -> tuple[BlindMount, ...]:
    """Mounts strictly under ``root_path`` whose type inotify is blind to (outermost first, each once)."""
    root = os.path.abspath(root_path).rstrip("/") + "/"
    found: dict[str, str] = {}
    try:
        lines = mountinfo.read_text().splitlines()
    except OSError:
        return ()
    for line in lines:
        left, _, right = line.partition(" - ")
        fields = left.split()
        if len(fields) < 5 or not right:
            continue
        point = _unescape(fields[4])
        if point.startswith(root):
            found[point[len(root):]] = right.split()[0]  # a later mount on the same point hides the earlier
    blind = [BlindMount(rel, fstype) for rel, fstype in sorted(found.items()) if is_blind_type(fstype)]
    return tuple(m for m in blind if not any(o is not m and m.rel.startswith(o.rel + "/") for o in blind))


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (``\\040``)."""
    if "\\" not in field:
        return field
    return field.encode("latin-1", "backslashreplace").decode("unicode_escape").encode("latin-1").decode(
        "utf-8", "surrogateescape")
