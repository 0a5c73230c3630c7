#!/usr/bin/env python3
"""How a file's cached pages are held: in large folios or as order-0 pages (root only; issue 26).

Why: a warm 200 MB read without passthrough sends the daemon no request, yet ran at 0.57x native. The
page cache serves both, so what differs is how the kernel holds the pages: ext4 caches a file in large
folios, while a FUSE file's mapping gets them only where the kernel enables them for FUSE
(``mapping_set_folio_order_range`` in ``fuse_init_file_inode``, proposed upstream in 2025; not in effect
on this VM's 6.18: every page order-0). Nothing a daemon negotiates changes that. The script maps the
file, touches its first pages, and looks each one up in /proc/self/pagemap and /proc/kpageflags (bits 15
and 16: compound head and tail).

    cat FILE > /dev/null; python3 scripts/page_folios.py FILE [FILE ...]
"""

from __future__ import annotations

import ctypes
import mmap
import os
import struct
import sys

PAGE = mmap.PAGESIZE
HEAD, TAIL = 1 << 15, 1 << 16  # KPF_COMPOUND_HEAD, KPF_COMPOUND_TAIL (admin-guide/mm/pagemap.rst)
PRESENT, PFN_MASK = 1 << 63, (1 << 55) - 1
PROT_READ, MAP_SHARED = 1, 1

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]


def folios(path: str, pages: int = 20_000) -> tuple[int, int, int]:
    """(pages looked at, pages inside large folios, large folios) over the file's first ``pages`` pages."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        address = _libc.mmap(None, size, PROT_READ, MAP_SHARED, fd, 0)
        if address in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), f"mmap {path}")
        try:
            n = min(pages, size // PAGE)
            data = (ctypes.c_char * size).from_address(address)
            for i in range(n):
                data[i * PAGE]  # fault each page in (already cached: no read reaches a daemon)
            return _count(address, n)
        finally:
            _libc.munmap(address, size)
    finally:
        os.close(fd)


def _count(address: int, n: int) -> tuple[int, int, int]:
    inside = heads = 0
    with open("/proc/self/pagemap", "rb") as pagemap, open("/proc/kpageflags", "rb") as kflags:
        for i in range(n):
            pagemap.seek((address // PAGE + i) * 8)
            entry = struct.unpack("Q", pagemap.read(8))[0]
            if entry & PRESENT:
                kflags.seek((entry & PFN_MASK) * 8)
                bits = struct.unpack("Q", kflags.read(8))[0]
                inside += bool(bits & (HEAD | TAIL))
                heads += bool(bits & HEAD)
    return n, inside, heads


def main(paths: list[str]) -> int:
    for path in paths:
        n, inside, heads = folios(path)
        print(f"{path}: {n:,} pages, {inside:,} in {heads:,} large folios, {n - inside:,} order-0")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
