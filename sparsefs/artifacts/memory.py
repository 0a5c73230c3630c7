"""The daemon's memory cap: what parsed artifacts and frozen packs may keep resident, and giving freed memory back.

A daemon that had read large inputs grew to about 2 GB and stayed there (issue 25): parsed artifacts were
bounded by their full views' characters only (256 M, while indexes, tables and vectors weigh several times
their text), and glibc kept what Python freed. One number now bounds it: the **memory cap**
(``--memory-mb``, else ``$SPARSEFS_MEMORY_MB``, else min(1 GiB, max(768 MiB, 1/8 of RAM)); at least 768).
Parse children are bounded apart (``SPARSEFS_PARSE_MEMORY_MB``).

Of the cap, :data:`RESERVE_MB` is the process itself: Python, numpy, pymupdf, onnxruntime with the dense
model's two sessions and the warm-up's buffers (295-300 MiB after one read of each kind; 445 MiB after the
hostile corpus and the shared data went through the dense warm-up, with every parse and pack dropped).
Of the rest, half holds parsed artifacts (their estimated :func:`footprint`, least recently used first out:
the parsed store on disk serves them again, or a cheap parse is redone), an eighth frozen packs, and the
rest is what one request holds while it runs. The daemon (:func:`set_process_cap`) also governs by its RSS:
before a request, parses are evicted until RSS, less what they weigh, leaves room under the cap for that
request's peak (:func:`working_set`) and :data:`MARGIN_MB`. A parse result larger than half of the smaller of
the parse share and the headroom is refused, as any other bound (an error pack that names it). One
request's own peak is not bounded by the cap: it must fit beside the reserve.

glibc keeps freed memory in its arenas and under its dynamic mmap threshold: evicting 500 MB of parses
left RSS where it was. :func:`tune_allocator` (at daemon start, before its threads) fixes the mmap
threshold at 1 MiB — large strings and arrays are mapped, and unmapped when freed — and allows two
arenas; :func:`give_back` calls ``malloc_trim`` after evictions, at most once a second.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from readers.base import Parsed

ENV = "SPARSEFS_MEMORY_MB"
RESERVE_MB = 448
MIN_CAP_MB = 768
DEFAULT_MAX_MB = 1024
PARSED_SHARE, PACKS_SHARE = 0.50, 0.125  # of the cap beyond the reserve; the rest is one request's headroom
SAMPLE = 48  # items of a large container whose sizes are measured; the rest are taken to be alike
MAX_DEPTH = 12
TRIM_EVERY_S = 1.0
MARGIN_MB = 48  # kept free under the cap beside the parses: a pack being built, a log line, a trim's lag
_M_MMAP_THRESHOLD, _M_ARENA_MAX = -3, -8


def default_cap_mb() -> int:
    """min(1 GiB, max(768 MiB, an eighth of the machine's memory)): sane on a laptop, never most of one."""
    try:
        total_mb = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") >> 20
    except (OSError, ValueError):
        return DEFAULT_MAX_MB
    return min(DEFAULT_MAX_MB, max(MIN_CAP_MB, total_mb // 8))


@dataclass(frozen=True)
class MemoryCap:
    """The cap and the shares derived from it (bytes)."""

    cap_mb: int

    @classmethod
    def from_env(cls) -> MemoryCap:
        """``$SPARSEFS_MEMORY_MB`` when set (at least :data:`MIN_CAP_MB`), else the default."""
        given = os.environ.get(ENV, "").strip()
        return cls(max(MIN_CAP_MB, int(given)) if given.isdigit() else default_cap_mb())

    @property
    def cap_bytes(self) -> int:
        return self.cap_mb << 20

    @property
    def _spare(self) -> int:
        return max(64, self.cap_mb - RESERVE_MB) << 20

    @property
    def parsed_bytes(self) -> int:
        """Estimated footprint the parsed-artifact LRU may hold."""
        return int(self._spare * PARSED_SHARE)

    @property
    def packs_bytes(self) -> int:
        """Bytes of frozen packs kept in memory (older ones are re-read from the state database)."""
        return int(self._spare * PACKS_SHARE)

    @property
    def headroom_bytes(self) -> int:
        """What one request may hold beyond the parses and packs kept (a result read back, a pack built)."""
        return self._spare - self.parsed_bytes - self.packs_bytes

    @property
    def result_bytes(self) -> int:
        """The largest parse result a child may send back: one that big becomes about twice that in objects,
        which must fit in the artifacts' share and in one request's headroom."""
        return min(self.parsed_bytes, self.headroom_bytes) // 2


@dataclass
class _Process:
    """This process's cap, where it came from, and whether resident memory is governed (the daemon)."""

    cap: MemoryCap | None = None
    source: str = "default"
    governed: bool = False


_process = _Process()
_cap_lock = threading.Lock()


def process_cap() -> MemoryCap:
    """This process's cap: the one :func:`set_process_cap` chose (the daemon's ``--memory-mb``), else the
    environment's or the default."""
    with _cap_lock:
        if _process.cap is None:
            _process.cap = MemoryCap.from_env()
            _process.source = ENV if os.environ.get(ENV, "").strip().isdigit() else "default"
        return _process.cap


def set_process_cap(cap_mb: int | None) -> MemoryCap:
    """Fix this process's cap (None: environment or default) before anything sized from it is built, and
    govern its resident memory by it (:func:`room_for_parses`): the daemon does, one process per mount."""
    with _cap_lock:
        _process.cap = None
    cap = process_cap()
    with _cap_lock:
        if cap_mb is not None:
            _process.cap, _process.source = MemoryCap(max(MIN_CAP_MB, cap_mb)), "--memory-mb"
        _process.governed = True
        return _process.cap or cap


def source() -> str:
    """Where this process's cap came from: "--memory-mb", the environment variable, or "default"."""
    process_cap()
    with _cap_lock:
        return _process.source


def room_for_parses(held: int, working: int = 0) -> int | None:
    """What parsed artifacts may hold now, by what the kernel counts (None: memory is not governed, only the
    fixed share applies): the cap, less :data:`MARGIN_MB`, less ``working`` (what the request about to run
    holds at its peak: :func:`working_set`), less everything else resident (RSS less the ``held`` estimate).
    It corrects what the estimates and the reserve get wrong — the dense warm-up's buffers, allocator slack,
    a parse result being unpickled — from the daemon's own RSS."""
    cap = process_cap()
    with _cap_lock:
        if not _process.governed:
            return None
    other = resident_bytes() - held
    return max(0, cap.cap_bytes - (MARGIN_MB << 20) - working - other)


def working_set(size: int, parsed: bool) -> int:
    """What a request on an artifact holds at its peak beyond the parses kept: reading back the parse of
    ``size`` source bytes (``parsed`` False: the pickled result, its objects, the index a first read builds)
    or serving a held parse of ``size`` full-view characters (a pack built from it, encoded, frozen). Measured
    on the 15 MB FinanceBench JSONL: +186 MiB of RSS for its first intent read, +83 MiB for its ``@full``; at
    most three parse results."""
    return min((12 if not parsed else 6) * size, 3 * process_cap().result_bytes)


def footprint(value: Any) -> int:
    """Estimated bytes ``value`` keeps alive: exact for strings, bytes and arrays; containers of more than
    :data:`SAMPLE` items are measured on an even sample and scaled (a 40,000-row table costs a millisecond).
    Shared objects count once per reference: an overestimate, which errs towards evicting."""
    return _size(value, 0)


def _size(value: Any, depth: int) -> int:
    if isinstance(value, np.ndarray):
        return int(value.nbytes) + sys.getsizeof(np.empty(0))
    own = sys.getsizeof(value)
    if depth >= MAX_DEPTH or isinstance(value, (str, bytes, bytearray, int, float, complex, bool, type(None))):
        return own
    if isinstance(value, dict):
        return own + _sampled(list(value.items()), depth)
    if isinstance(value, (list, tuple, set, frozenset)):
        return own + _sampled(value if isinstance(value, (list, tuple)) else list(value), depth)
    return own + _object_fields(value, depth)


def _sampled(items: Any, depth: int) -> int:
    count = len(items)
    if count <= SAMPLE:
        return sum(_size(item, depth + 1) for item in items)
    step = count / SAMPLE
    measured = sum(_size(items[int(i * step)], depth + 1) for i in range(SAMPLE))
    return int(measured * count / SAMPLE)


def _object_fields(value: Any, depth: int) -> int:
    """An object's attributes (``__dict__`` or ``__slots__``): Reader indexes are plain objects."""
    fields = getattr(value, "__dict__", None)
    if isinstance(fields, dict):
        return _size(fields, depth + 1)
    slots = [name for cls in type(value).__mro__ for name in getattr(cls, "__slots__", ())]
    return sum(_size(getattr(value, name, None), depth + 1) for name in slots if isinstance(name, str))


# ---- parses held in memory -------------------------------------------------------------------------------

class Footprints:
    """Estimated footprint of each held parse, and the shape of its data when measured; not locked (the
    cache's lock guards it)."""

    def __init__(self) -> None:
        self._sizes: dict[tuple[str, str], tuple[int, tuple[tuple[str, int], ...]]] = {}
        self.total = 0

    def set(self, key: tuple[str, str], size: int, shape: tuple[tuple[str, int], ...]) -> None:
        self.forget(key)
        self._sizes[key] = (size, shape)
        self.total += size

    def forget(self, key: tuple[str, str]) -> int:
        """Stop counting ``key``; what it weighed."""
        size, _ = self._sizes.pop(key, (0, ()))
        self.total -= size
        return size

    def shape(self, key: tuple[str, str]) -> tuple[tuple[str, int], ...] | None:
        found = self._sizes.get(key)
        return found[1] if found is not None else None


def shape(parsed: Parsed) -> tuple[tuple[str, int], ...]:
    """What changes when a Reader adds an index or grows a cache: the data's keys and their lengths."""
    return tuple((key, len(value) if isinstance(value, (dict, list)) else -1)
                 for key, value in list(parsed.data.items()))


def measure(parsed: Parsed) -> int:
    """The parse's estimated footprint (its full view, data and indexes)."""
    for _ in range(3):
        try:
            return footprint(parsed.full_view) + footprint(parsed.data)
        except RuntimeError:  # a Reader filled a cache while it was measured: measure again
            continue
    return 2 * len(parsed.full_view)


# ---- the allocator ----------------------------------------------------------------------------------------

_libc: list[Any] = []
_trim = {"last": 0.0, "freed": 0, "count": 0}
_trim_lock = threading.Lock()


def _glibc() -> Any | None:
    if not _libc:
        name = ctypes.util.find_library("c")
        library = ctypes.CDLL(name) if name else None
        _libc.append(library if library is not None and hasattr(library, "malloc_trim") else None)
    return _libc[0]


def tune_allocator() -> bool:
    """Fixed 1 MiB mmap threshold and two arenas (glibc only; call before threads start). True if applied."""
    libc = _glibc()
    if libc is None or not hasattr(libc, "mallopt"):
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, 1 << 20)) and bool(libc.mallopt(_M_ARENA_MAX, 2))


def give_back(freed: int) -> None:
    """``freed`` bytes were just let go: hand free memory back to the kernel (``malloc_trim``), at most once
    per :data:`TRIM_EVERY_S`; the bytes of skipped calls are counted towards the next."""
    with _trim_lock:
        _trim["freed"] += freed
        now = time.monotonic()
        if now - _trim["last"] < TRIM_EVERY_S or _trim["freed"] < (8 << 20):
            return
        _trim["last"], _trim["freed"] = now, 0
        _trim["count"] += 1
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


def trims() -> int:
    """How many times freed memory was handed back (stats.json)."""
    with _trim_lock:
        return int(_trim["count"])


def resident_bytes() -> int:
    """This process's resident set size now."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0
