"""The Linux FUSE kernel protocol (7.40+): constants and struct layouts. Pure, no I/O.

Layouts follow ``include/uapi/linux/fuse.h``; Debian's copy stops at 7.38, so the
7.40 passthrough additions (``fuse_backing_map``, ``fuse_open_out.backing_id``,
``fuse_init_out.max_stack_depth``) are written out here. All integers are
native-endian; every kernel this runs on is little-endian.
"""

from __future__ import annotations

import os
import stat
import struct
from dataclasses import dataclass

KERNEL_MAJOR = 7
OUR_MINOR = 40  # passthrough arrived in 7.40
ROOT_ID = 1

# opcodes
LOOKUP, FORGET, GETATTR, SETATTR, READLINK, SYMLINK = 1, 2, 3, 4, 5, 6
MKNOD, MKDIR, UNLINK, RMDIR, RENAME, LINK, OPEN, READ, WRITE = 8, 9, 10, 11, 12, 13, 14, 15, 16
STATFS, RELEASE, FSYNC, SETXATTR, GETXATTR, LISTXATTR, REMOVEXATTR, FLUSH = 17, 18, 20, 21, 22, 23, 24, 25
INIT, OPENDIR, READDIR, RELEASEDIR, FSYNCDIR, GETLK, SETLK, SETLKW = 26, 27, 28, 29, 30, 31, 32, 33
ACCESS, CREATE, INTERRUPT, BMAP, DESTROY, IOCTL, POLL, NOTIFY_REPLY = 34, 35, 36, 37, 38, 39, 40, 41
BATCH_FORGET, FALLOCATE, READDIRPLUS, RENAME2, LSEEK, COPY_FILE_RANGE = 42, 43, 44, 45, 46, 47
SYNCFS, TMPFILE, STATX = 50, 51, 52
_NAMED = ("LOOKUP FORGET GETATTR SETATTR READLINK SYMLINK MKNOD MKDIR UNLINK RMDIR RENAME LINK OPEN READ WRITE "
          "STATFS RELEASE FSYNC SETXATTR GETXATTR LISTXATTR REMOVEXATTR FLUSH INIT OPENDIR READDIR RELEASEDIR "
          "FSYNCDIR GETLK SETLK SETLKW ACCESS CREATE INTERRUPT BMAP DESTROY IOCTL POLL NOTIFY_REPLY BATCH_FORGET "
          "FALLOCATE READDIRPLUS RENAME2 LSEEK COPY_FILE_RANGE SYNCFS TMPFILE STATX")
OPCODE_NAMES = {globals()[name]: name for name in _NAMED.split()}  # for request counts in stats.json

# INIT flags (64 bits; the high half travels in flags2)
ASYNC_READ = 1 << 0
ATOMIC_O_TRUNC = 1 << 3
BIG_WRITES = 1 << 5
AUTO_INVAL_DATA = 1 << 12
DO_READDIRPLUS = 1 << 13
READDIRPLUS_AUTO = 1 << 14
PARALLEL_DIROPS = 1 << 18
POSIX_ACL = 1 << 20  # 7.26: the kernel enforces POSIX ACLs (GETXATTR system.posix_acl_*, cached per inode)
MAX_PAGES = 1 << 22
HANDLE_KILLPRIV_V2 = 1 << 28  # 7.33: the daemon kills suid/sgid on write, truncate, chown (flags below)
INIT_EXT = 1 << 30
PASSTHROUGH = 1 << 37

# open reply flags
FOPEN_DIRECT_IO = 1 << 0
FOPEN_KEEP_CACHE = 1 << 1
FOPEN_PASSTHROUGH = 1 << 7

# setattr valid bits
FATTR_MODE, FATTR_UID, FATTR_GID, FATTR_SIZE = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FATTR_ATIME, FATTR_MTIME, FATTR_FH = 1 << 4, 1 << 5, 1 << 6
FATTR_ATIME_NOW, FATTR_MTIME_NOW = 1 << 7, 1 << 8
FATTR_KILL_SUIDGID = 1 << 11

# killpriv_v2: the caller lacks CAP_FSETID (write, open with O_TRUNC); chown always
WRITE_KILL_SUIDGID = 1 << 2  # fuse_write_in.write_flags
OPEN_KILL_SUIDGID = 1 << 0  # fuse_open_in.open_flags, fuse_create_in.open_flags

GETATTR_FH = 1 << 0
FSYNC_FDATASYNC = 1 << 0

# notifications (sent with unique 0 and the code in the error field)
NOTIFY_INVAL_INODE = 2
NOTIFY_INVAL_ENTRY = 3
NOTIFY_INC_EPOCH = 8  # Linux 6.16+: every dentry (positive and negative) is looked up again

# /dev/fuse ioctls
DEV_IOC_CLONE = 0x8004E500
DEV_IOC_BACKING_OPEN = 0x4010E501
DEV_IOC_BACKING_CLOSE = 0x4004E502

IN_HEADER = struct.Struct("=IIQQIIIHH")  # len opcode unique nodeid uid gid pid total_extlen padding
OUT_HEADER = struct.Struct("=IiQ")  # len error unique
ATTR = struct.Struct("=QQQQQQIIIIIIIIII")
ENTRY_HEAD = struct.Struct("=QQQQII")  # nodeid generation entry_valid attr_valid (+nsec)
ATTR_OUT_HEAD = struct.Struct("=QII")  # attr_valid attr_valid_nsec dummy
INIT_IN = struct.Struct("=IIIII")  # major minor max_readahead flags flags2
INIT_OUT = struct.Struct("=IIIIHHIIHHII24x")
OPEN_OUT = struct.Struct("=QIi")  # fh open_flags backing_id
U32 = struct.Struct("=I")
U64 = struct.Struct("=Q")
TWO_U32 = struct.Struct("=II")
GETATTR_IN = struct.Struct("=IIQ")
SETATTR_IN = struct.Struct("=IIQQQQQQIIIIIIII")
OPEN_IN = struct.Struct("=II")
CREATE_IN = struct.Struct("=IIII")
MKNOD_IN = struct.Struct("=IIII")
READ_IN = struct.Struct("=QQII")  # fh offset size read_flags (rest unused here)
WRITE_IN = struct.Struct("=QQIIQII")
RELEASE_IN = struct.Struct("=QII")
FSYNC_IN = struct.Struct("=QI")
RENAME2_IN = struct.Struct("=QI4x")
FORGET_ONE = struct.Struct("=QQ")
STATFS_OUT = struct.Struct("=QQQQQIII4x24x")
DIRENT_HEAD = struct.Struct("=QQII")  # ino off namelen type
INVAL_INODE = struct.Struct("=Qqq")
INVAL_ENTRY = struct.Struct("=QII")
BACKING_MAP = struct.Struct("=iIQ")

_SEC = 10**9


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ costs ~2 µs per request
class Request:
    """One request read from /dev/fuse: its header fields and the argument bytes."""

    opcode: int
    unique: int
    nodeid: int
    uid: int
    gid: int
    pid: int
    body: memoryview

    @classmethod
    def parse(cls, buf: bytes) -> Request:
        length, opcode, unique, nodeid, uid, gid, pid, extlen, _ = IN_HEADER.unpack_from(buf)
        body = memoryview(buf)[IN_HEADER.size : length - extlen * 8]
        return cls(opcode, unique, nodeid, uid, gid, pid, body)


def split_names(body: memoryview | bytes, count: int) -> list[str]:
    """``count`` NUL-terminated names from the start of ``body`` (as filesystem strings)."""
    parts = bytes(body).split(b"\0", count)
    if len(parts) <= count:
        raise ValueError("truncated name list")
    return [os.fsdecode(part) for part in parts[:count]]


def reply(unique: int, payload: bytes = b"", error: int = 0) -> bytes:
    """A complete reply: header plus payload (an error reply carries no payload)."""
    if error:
        return OUT_HEADER.pack(OUT_HEADER.size, -error, unique)
    return OUT_HEADER.pack(OUT_HEADER.size + len(payload), 0, unique) + payload


def notification(code: int, payload: bytes) -> bytes:
    return OUT_HEADER.pack(OUT_HEADER.size + len(payload), code, 0) + payload


def pack_attr(attrs: dict[str, int], ino: int | None = None) -> bytes:
    """``fuse_attr`` from a stat dict with nanosecond times (``rootfs.stat_dict`` shape)."""
    size = attrs.get("st_size", 0)
    times = [divmod(int(attrs.get(key, 0)), _SEC) for key in ("st_atime", "st_mtime", "st_ctime")]
    return ATTR.pack(
        ino if ino is not None else attrs["st_ino"], size, attrs.get("st_blocks", (size + 511) // 512),
        times[0][0], times[1][0], times[2][0], times[0][1], times[1][1], times[2][1],
        attrs["st_mode"], attrs.get("st_nlink", 1), attrs.get("st_uid", 0), attrs.get("st_gid", 0),
        attrs.get("st_rdev", 0) & 0xFFFFFFFF, attrs.get("st_blksize", 4096), 0,
    )


def pack_stat(st: os.stat_result) -> bytes:
    """``fuse_attr`` straight from a stat result (the hot path: no dict in between)."""
    atime, atime_ns = divmod(st.st_atime_ns, _SEC)
    mtime, mtime_ns = divmod(st.st_mtime_ns, _SEC)
    ctime, ctime_ns = divmod(st.st_ctime_ns, _SEC)
    return ATTR.pack(st.st_ino, st.st_size, st.st_blocks, atime, mtime, ctime, atime_ns, mtime_ns, ctime_ns,
                     st.st_mode, st.st_nlink, st.st_uid, st.st_gid, st.st_rdev & 0xFFFFFFFF, st.st_blksize, 0)


def pack_entry_stat(nodeid: int, st: os.stat_result, timeout_s: float) -> bytes:
    whole, nsec = _split_timeout(timeout_s)
    return ENTRY_HEAD.pack(nodeid, 0, whole, whole, nsec, nsec) + pack_stat(st)


def pack_attr_out_stat(st: os.stat_result, timeout_s: float) -> bytes:
    whole, nsec = _split_timeout(timeout_s)
    return ATTR_OUT_HEAD.pack(whole, nsec, 0) + pack_stat(st)


def pack_negative_entry(timeout_s: float) -> bytes:
    """A LOOKUP reply for an absent name the kernel may remember (node id 0) for ``timeout_s``."""
    whole, nsec = _split_timeout(timeout_s)
    return ENTRY_HEAD.pack(0, 0, whole, 0, nsec, 0) + bytes(ATTR.size)


def pack_entry(nodeid: int, attrs: dict[str, int], timeout_s: float) -> bytes:
    whole, nsec = _split_timeout(timeout_s)
    return ENTRY_HEAD.pack(nodeid, 0, whole, whole, nsec, nsec) + pack_attr(attrs)


def pack_attr_out(attrs: dict[str, int], timeout_s: float) -> bytes:
    whole, nsec = _split_timeout(timeout_s)
    return ATTR_OUT_HEAD.pack(whole, nsec, 0) + pack_attr(attrs)


def _split_timeout(timeout_s: float) -> tuple[int, int]:
    whole = int(timeout_s)
    return whole, int((timeout_s - whole) * _SEC)


def pack_dirent(ino: int, offset: int, name: bytes, mode: int) -> bytes:
    record = DIRENT_HEAD.pack(ino, offset, len(name), stat.S_IFMT(mode) >> 12) + name
    return record + b"\0" * (-len(record) % 8)


def pack_statfs(values: dict[str, int]) -> bytes:
    return STATFS_OUT.pack(
        values["f_blocks"], values["f_bfree"], values["f_bavail"], values["f_files"], values["f_ffree"],
        values["f_bsize"], values["f_namemax"], values["f_frsize"],
    )


@dataclass(frozen=True)
class InitOffer:
    """What the kernel offered in INIT."""

    major: int
    minor: int
    max_readahead: int
    flags: int  # 64-bit, flags2 folded in

    @classmethod
    def parse(cls, body: memoryview) -> InitOffer:
        major, minor, readahead, flags, flags2 = INIT_IN.unpack_from(body)
        if flags & INIT_EXT:
            flags |= flags2 << 32
        return cls(major, minor, readahead, flags)


def pack_init_reply(offer: InitOffer, wanted: int, max_write: int) -> bytes:
    """``fuse_init_out`` granting ``wanted`` (already masked by the offer)."""
    granted = wanted & offer.flags
    stack_depth = 1 if granted & PASSTHROUGH else 0  # 0 makes every BACKING_OPEN fail with EPERM
    return INIT_OUT.pack(
        KERNEL_MAJOR, min(offer.minor, OUR_MINOR), offer.max_readahead, granted & 0xFFFFFFFF,
        64, 48, max_write, 1, max_write // 4096, 0, granted >> 32, stack_depth,
    )
