"""The guard: steer an unmodified agent from broad plain reads to sparse reading.

Opt-in per process tree (``--guard-pid PID``: that process and all its
descendants; ``--guard-comm NAME,...``: processes of that name and theirs;
``sparsefs.guard.proc``). The decision is made at *open* time, because on the
kernel backend plain reads never reach the daemon (passthrough). A read-only
open of a real file is answered with a short **card** (``sparsefs.guard.card``)
instead of the file when all of these hold:

* the caller is in a guarded tree and is either a guarded root that is not a
  shell (the harness whose Read tool reads in-process; a shell's own opens are
  redirects, ``done < file``), or a display tool (``DISPLAY_TOOLS``) with one
  file argument whose output a terminal or the harness reads (never a redirect
  into a file or a pipe into another tool). Everything else (grep, sed, git,
  compilers, the agent's scripts) gets the bytes: a card fed to a rewriter
  would be written back over the file;
* the file is of a guarded kind (``--guard-kinds``, by extension: each Reader's
  registration names its kind, ``readers.registry``), not hidden,
  not under a dependency directory, not a tool's own file, not executable, not
  a script (``#!``) or an ELF binary;
* its full view (the Gate's ``L``) is longer than the threshold;
* the path was never carded, never read again after a card, and never written
  through this mount (create, open for writing, truncate, rename onto it).

**Never block the open on a parse.** If the artifact is parsed (in memory or in
the parsed store), ``L`` is exact; otherwise ``sparsefs.guard.probe`` estimates
it from stat and a bounded look, the card says what is known, and the parse is
warmed on the guard's one worker thread. The decision is made once per (path,
version) and never flips: a version that got the bytes keeps getting them.

**Once per path.** After a card, the next plain read of that path by a
cardable process gets the faithful bytes (an agent that insists is never
blocked); it is recorded as a full-view exposure of the artifact's episode,
which closes like ``@full``. Then the path is never carded again in this mount,
whatever its version. The same process opening it again within ``REOPEN_S``
(a harness that sniffs, then reads) gets the same card again.

Attributes never change: ``stat`` reports the real file to everyone; the card
is shorter than ``st_size`` and served with direct_io, so tools that read to
EOF get it complete. Fail open: any error serves the real bytes, and so does a
kernel race (``accept`` said a passthrough open arrived meanwhile).

Log lines use the pack log's schema (artifact, fingerprint, episode, exposed,
L, decision ``guard-card``/``insisted``) and are written by the worker once
``L`` is known, so ``sparsefs stats``/``report`` count them as exposure.
"""

from __future__ import annotations

import logging
import os
import queue
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from readers import registry
from readers.base import ReaderError
from sparsefs.artifacts.cache import StatKey, stat_key
from sparsefs.guard.card import PREVIEW_CHARS, describe, render_card
from sparsefs.guard.probe import probe
from sparsefs.guard.proc import SHELLS, Caller, ProcessTree
from sparsefs.protocol.access import Protocol
from sparsefs.protocol.pack import display_name
from sparsefs.protocol.session_file import WRITE_FLAGS
from sparsefs.source.rootfs import SourceRoot, stat_dict
from sparsefs.store.stats import Stats

log = logging.getLogger("sparsefs.guard")

DEFAULT_THRESHOLD = 16_000
REOPEN_S = 2.0
DISPLAY_TOOLS = frozenset({"cat", "less", "more", "most", "pg", "bat", "batcat"})
SKIPPED_DIRS = frozenset({"node_modules", "__pycache__", "site-packages", "dist-packages", "venv", "vendor"})
TOOL_FILES = frozenset(
    {
        "package.json",
        "package-lock.json",
        "composer.json",
        "composer.lock",
        "tsconfig.json",
        "jsconfig.json",
        "deno.json",
        "bun.lock",
        "manifest.json",
        "CMakeCache.txt",
    }
)


def kind_extensions() -> dict[str, frozenset[str]]:
    """Guard kind -> the extensions carded under it: each Reader's registration says (``readers.registry``)."""
    return registry.guard_kinds()


def parse_kinds(text: str) -> frozenset[str]:
    """``--guard-kinds text,pdf``: known kind names only."""
    kinds = frozenset(part.strip() for part in text.split(",") if part.strip())
    known = kind_extensions()
    unknown = kinds - set(known)
    if unknown or not kinds:
        raise ValueError(f"unknown guard kinds {sorted(unknown)}; known: {', '.join(known)}")
    return kinds


@dataclass(frozen=True)
class GuardConfig:
    """Who is guarded and what gets carded (``kinds``: all the registered guard kinds unless told)."""

    pids: frozenset[int] = frozenset()
    comms: frozenset[str] = frozenset()
    threshold: int = DEFAULT_THRESHOLD
    kinds: frozenset[str] = field(default_factory=lambda: frozenset(kind_extensions()))

    @property
    def extensions(self) -> frozenset[str]:
        known = kind_extensions()
        return frozenset().union(*(known.get(kind, frozenset()) for kind in self.kinds))

    def covers(self, rel: str) -> bool:
        """A file of a guarded kind, outside hidden and dependency directories, not a tool's own file."""
        parts = rel.split("/")
        if any(part.startswith(".") or part in SKIPPED_DIRS for part in parts) or parts[-1] in TOOL_FILES:
            return False
        return os.path.splitext(parts[-1])[1].lower() in self.extensions

    def min_bytes(self, rel: str) -> int:
        """Text never has more characters than bytes: smaller files cannot pass the threshold (a binary
        format's bytes say nothing about L: no size prefilter)."""
        ext = os.path.splitext(rel)[1].lower()
        registration = registry.guarding(ext)
        return 0 if registration is not None and ext in registration.binary else self.threshold + 1


@dataclass
class Card:
    """What a carded open serves: the card's bytes and the real file's attributes."""

    content: bytes
    attrs: dict[str, int]


@dataclass
class _State:
    """What the guard did with one path in this mount."""

    version: StatKey | None = None  # the version the last decision was about
    carded: bool = False  # a card was served (any version): never again
    insisted: bool = False  # read again after the card (recorded once)
    written: bool = False  # written through the mount: never carded
    card: bytes = b""
    card_pid: int = 0
    card_until: float = 0.0


@dataclass
class _Memory:
    """Per path, bounded: the least recently decided path is forgotten first (then, at worst, carded again)."""

    limit: int = 50_000
    paths: OrderedDict[str, _State] = field(default_factory=OrderedDict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def state(self, rel: str) -> _State:
        """The path's state (created on first use); call with ``lock`` held."""
        found = self.paths.get(rel)
        if found is None:
            found = self.paths[rel] = _State()
            while len(self.paths) > self.limit:
                self.paths.popitem(last=False)
        self.paths.move_to_end(rel)
        return found


CARD, AGAIN, INSISTED, BYTES = "card", "again", "insisted", "bytes"


class Guard:
    """The per-mount guard policy; ``card`` never raises."""

    def __init__(
        self,
        config: GuardConfig,
        root: SourceRoot,
        protocol: Protocol,
        stats: Stats,
        mountpoint: str,
        tree: ProcessTree | None = None,
    ) -> None:
        self.config = config
        self.root = root
        self.protocol = protocol
        self.stats = stats
        self.mountpoint = mountpoint.rstrip("/")
        self.tree = tree or ProcessTree(config.pids, config.comms)
        self.memory = _Memory()
        self._closed = False
        self._close_lock = threading.Lock()
        self._tasks: queue.Queue[Callable[[], None]] = queue.Queue()
        self._tasks.put(_import_probes)  # so the first PDF probe on the open path does not pay for the import
        threading.Thread(target=self._work, name="sparsefs-guard", daemon=True).start()

    # ---- the open path ----------------------------------------------------------
    def card(self, rel: str, flags: int, tid: int | None, accept: Callable[[], bool] = lambda: True) -> Card | None:
        """A card to serve instead of ``rel``, or None: open the real file. Fails open.

        ``accept`` is asked after the card is built: False (the kernel backend saw a
        passthrough open of the file meanwhile) serves the bytes instead."""
        try:
            return self._decide(rel, flags, tid, accept)
        except Exception as err:  # fail open: any error serves the real bytes
            log.warning("guard failed open on %s: %s", display_name(rel), err, exc_info=True)
            self.stats.add("guard_fail_open", 1)
            return None

    def written(self, rel: str) -> None:
        """``rel`` was created, opened for writing, truncated or renamed onto through the mount: never card it."""
        if not self.config.covers(rel):
            return  # never carded anyway: keep the memory for the paths that could be
        with self.memory.lock:
            self.memory.state(rel).written = True

    def _decide(self, rel: str, flags: int, tid: int | None, accept: Callable[[], bool]) -> Card | None:
        if tid is None or tid <= 0 or flags & WRITE_FLAGS:
            return None
        caller = self.tree.caller(tid)
        if caller is None or not caller.guarded or caller.pid == os.getpid():
            return None
        st = _regular(self.root, rel)
        if st is None:
            return None  # a virtual path, a directory, a device: not a plain read of a file
        self.stats.add("guard_plain_reads", 1)
        if not self._cardable(caller, rel, st):
            return None
        verdict, state = self._recall(rel, stat_key(st), caller)
        if verdict == AGAIN:
            return Card(state.card, stat_dict(st))
        if verdict == INSISTED:
            self.stats.add("guard_insisted_reads", 1)
            self._tasks.put(lambda: self._insisted(rel, caller))
        if verdict != CARD:
            return None
        return self._serve(rel, st, caller, accept)

    def _cardable(self, caller: Caller, rel: str, st: os.stat_result) -> bool:
        if caller.comm in DISPLAY_TOOLS:
            if not self.tree.shows_to_harness(caller):
                return False
        elif not caller.root or caller.comm in SHELLS:
            return False
        if not self.config.covers(rel) or st.st_mode & 0o111 or st.st_size < self.config.min_bytes(rel):
            return False
        return not _looks_like_code(self.root, rel)

    def _recall(self, rel: str, key: StatKey, caller: Caller) -> tuple[str, _State]:
        """What this open gets, from what the guard did with the path before; reserves a first card."""
        with self.memory.lock:
            state = self.memory.state(rel)
            if state.carded and state.card_pid == caller.pid and time.monotonic() < state.card_until:
                return (AGAIN if state.version == key and not state.written else BYTES), state
            if state.carded and not state.insisted:
                state.insisted = True
                return INSISTED, state
            if state.carded or state.written or state.version == key:
                return BYTES, state
            state.version, state.carded, state.card_pid = key, True, caller.pid  # reserved: a racing open insists
            return CARD, state

    def _serve(self, rel: str, st: os.stat_result, caller: Caller, accept: Callable[[], bool]) -> Card | None:
        try:
            text = self._text(rel, st)
        except Exception:
            self._withdraw(rel)
            raise
        if text is None:
            self._withdraw(rel)
            return None
        content = text.encode("utf-8", "surrogateescape")
        if not accept():
            log.info("guard: %s was opened for passthrough meanwhile; serving the bytes", display_name(rel))
            self.stats.add("guard_fail_open", 1)
            self._withdraw(rel)
            return None
        with self.memory.lock:
            state = self.memory.state(rel)
            state.card, state.card_until = content, time.monotonic() + REOPEN_S
        self.stats.add("guard_cards", 1)
        self.stats.add("guard_card_chars", len(text))
        self._tasks.put(lambda: self._log_card(rel, caller, len(text)))
        return Card(content, stat_dict(st))

    def _withdraw(self, rel: str) -> None:
        """No card after all: this version keeps getting the bytes."""
        with self.memory.lock:
            state = self.memory.state(rel)
            state.carded = state.insisted = False

    def _text(self, rel: str, st: os.stat_result) -> str | None:
        """The card's text; None when this version is not carded (too short, or the card would not be shorter)."""
        path = display_name(f"{self.mountpoint}/{rel}")
        skill = f"{self.mountpoint}/.sparsefs/SKILL.md"
        ext = os.path.splitext(rel)[1].lower().lstrip(".")
        if self.protocol.artifacts._is_cached(rel):
            artifact = self.protocol.artifacts.load(rel)
            parsed, reader = artifact.parsed, artifact.reader
            if len(parsed.full_view) <= self.config.threshold:
                return None
            read_as = reader.name if parsed.kind == reader.name else f"{reader.name}/{parsed.kind}"
            text = render_card(
                path, describe(read_as, st.st_size, len(parsed.full_view)), reader.preview(parsed, PREVIEW_CHARS), skill
            )
        else:
            found = probe(self.root, rel, st.st_size)
            if found.estimate <= self.config.threshold:
                return None
            text = render_card(path, describe(ext, st.st_size, None, found.facts), found.preview, skill)
        return text if len(text.encode("utf-8", "surrogateescape")) < st.st_size else None

    # ---- the worker: parses and log lines, off the open path ---------------------
    def close(self) -> None:
        """The mount is stopping: no more log lines (the stats log is about to close and its fd be reused)."""
        with self._close_lock:
            self._closed = True

    def _record(self, entry: dict[str, Any], counts: dict[str, int]) -> None:
        with self._close_lock:
            if not self._closed:
                self.stats.record_guard(entry, counts)

    def _work(self) -> None:
        while True:
            task = self._tasks.get()
            try:
                if not self._closed:
                    task()
            except Exception as err:  # a log line or a warm-up lost; the open was answered long ago
                log.warning("guard: background work failed: %s", err, exc_info=not self._closed)
            finally:
                self._tasks.task_done()

    def drain(self, timeout_s: float = 30.0) -> bool:
        """Wait for the worker to finish what is queued (tests, shutdown); False on timeout."""
        done = threading.Event()
        self._tasks.put(done.set)
        return done.wait(timeout_s)

    def _log_card(self, rel: str, caller: Caller, card_chars: int) -> None:
        """The card's log line, once the parse (warmed here) knows L and the fingerprint."""
        try:
            artifact = self.protocol.artifacts.load(rel)
        except (OSError, ReaderError) as err:
            log.info("guard: %s carded but not readable as an artifact: %s", display_name(rel), err)
            return
        length = len(artifact.parsed.full_view)
        entry = _entry(rel, artifact.fingerprint, None, caller, "guard-card", card_chars, length)
        entry["reader"] = artifact.reader.name
        self._record(entry, {})  # its exposure and full read count from the line itself

    def _insisted(self, rel: str, caller: Caller) -> None:
        """The agent read it again after the card: a full-view exposure of the artifact's episode."""
        episode, exposed, length = self.protocol.record_plain_read(rel)
        artifact = self.protocol.artifacts.load(rel)
        entry = _entry(rel, artifact.fingerprint, episode, caller, "insisted", exposed, length)
        entry["reader"] = artifact.reader.name
        self._record(entry, {})


def _import_probes() -> None:
    """Import the Readers' probes (pymupdf for PDF) off the open path."""
    for registration in registry.registrations():
        if registration.probe and registration.guard_kind:
            registry.resolve(registration.probe, registration)


def _regular(root: SourceRoot, rel: str) -> os.stat_result | None:
    try:
        st = root.lstat(rel)
    except OSError:
        return None
    return st if stat.S_ISREG(st.st_mode) else None


def _looks_like_code(root: SourceRoot, rel: str) -> bool:
    """A script (``#!``) or an ELF binary, whatever its name says."""
    fd = root.open_file(rel, os.O_RDONLY | os.O_NONBLOCK)
    try:
        head = os.pread(fd, 4, 0)
    finally:
        os.close(fd)
    return head.startswith(b"#!") or head == b"\x7fELF"


def _entry(
    rel: str, fingerprint: str, episode: str | None, caller: Caller, decision: str, exposed: int, length: int
) -> dict[str, Any]:
    """A log line in the pack log's schema (sparsefs.vfs.evidence), so stats and report read it."""
    return {
        "path": display_name(rel),
        "artifact": display_name(rel),
        "action": "plain-read",
        "decision": decision,
        "exposed": exposed,
        "L": length,
        "episode": episode,
        "fingerprint": fingerprint,
        "pid": caller.pid,
        "comm": caller.comm,
    }
