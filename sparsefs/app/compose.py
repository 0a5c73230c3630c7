"""The one composition root: every surface gets its Core, store, state, guard and watcher from here.

A mount (``sparsefs.app.daemon``: :func:`mount`), ``sparsefs read``, the Python
API and MCP (``sparsefs.app.reading``: :func:`build_core`) and ``sparsefs
index`` (``sparsefs.app.indexer``: :func:`build_artifacts`) build nothing
themselves. So each part is built one way everywhere: the state database,
parsed store and pack log of the state directory, the parse bounds of the
environment (``sparsefs.artifacts.bounded``), the Protocol with the session
intent the last mount left, the guard when a mount names processes to guard,
and the backend's binding (``sparsefs.vfs.binding``: :data:`NULL` without a
mount). A state directory that cannot hold the database or the store degrades
to memory with a warning; the mount still serves. ``cache``, the ``--cache URL``
of every surface, puts a shared tier (``sparsefs.store.shared``) under the parsed
store; a URL no engine here can serve raises ``EngineUnavailable`` (a
ValueError) at once, while a store that is down only counts as such per read.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path

import xxhash

from sparsefs.artifacts import memory, preload
from sparsefs.artifacts.bounded import Bounds
from sparsefs.artifacts.cache import ArtifactCache
from sparsefs.guard.policy import Guard, GuardConfig
from sparsefs.protocol.access import Protocol
from sparsefs.protocol.intents import persisted_session
from sparsefs.source.freshness import Freshness
from sparsefs.source.rootfs import SourceRoot
from sparsefs.store import retention
from sparsefs.store.parsed import ParsedStore, StoreConfig, open_store
from sparsefs.store.shared import SharedTier, open_shared
from sparsefs.store.state import StateDB
from sparsefs.store.stats import Stats
from sparsefs.vfs.binding import NULL, Binding, LateBinding
from sparsefs.vfs.control import CONTROL_DIR, LOG_NAME
from sparsefs.vfs.core import Core
from sparsefs.vfs.watcher import watch_source

log = logging.getLogger("sparsefs")


def default_state_dir(source: Path) -> Path:
    """Where a source's state lives unless told: ``$XDG_CACHE_HOME/sparsefs/<hash of its path>``."""
    return retention.cache_root() / xxhash.xxh64_hexdigest(os.fsencode(source))


def build_artifacts(
    root: SourceRoot, state_dir: Path, *, store_config: StoreConfig | None = None,
    max_parsed_chars: int | None = None, store_required: bool = False, cache: str | None = None,
) -> ArtifactCache:
    """Parsed artifacts of ``root``, stored in ``state_dir`` (over the shared ``cache`` if given), each parse
    under the environment's bounds.

    ``store_required``: a store that cannot open raises (``sparsefs index``, whose whole point is the
    store) instead of leaving the cache in memory."""
    shared = open_shared(cache) if cache else None
    if store_required:
        store: ParsedStore | None = open_store(state_dir, store_config, shared)
    else:
        store = _open_store(state_dir, store_config, shared)
    if max_parsed_chars is None:
        return ArtifactCache(root, store=store, bounds=Bounds.from_env())
    return ArtifactCache(root, max_parsed_chars=max_parsed_chars, store=store, bounds=Bounds.from_env())


def build_core(
    root: SourceRoot, state_dir: Path, backend: str, session_intent: str | None = None,
    artifacts: ArtifactCache | None = None, guard: GuardConfig | None = None, mountpoint: str = "",
    binding: Binding = NULL, cache: str | None = None,
) -> Core:
    """The Core every surface serves through. ``artifacts``: a cache kept warm across cores (MCP); it must
    read ``root``. ``guard``: the plain-read guard of a mount at ``mountpoint``; ``binding``: the backend's side;
    ``cache``: the shared tier's URL (unless ``artifacts`` is given)."""
    if artifacts is None:
        artifacts = build_artifacts(root, state_dir, cache=cache)
    stats = Stats(state_dir / "log.jsonl", backend=backend)
    shared = artifacts.store.shared if artifacts.store is not None else None
    if shared is not None:
        stats.sections["shared_cache"] = shared.snapshot
    state = _open_state(state_dir)
    _count_unsaved(stats, artifacts.store, state)
    protocol = Protocol(artifacts, state=state, session=persisted_session(state, session_intent))
    guarding = Guard(guard, root, protocol, stats, mountpoint) if guard is not None else None
    live_log = f"/{CONTROL_DIR}/{LOG_NAME}"
    stats.on_logged = lambda: binding.invalidate(live_log)  # `tail -f`'s next fstat sees the new size at once
    core = Core(root, stats, protocol, state, guard=guarding, binding=binding)
    stats.sections["memory"] = lambda: memory_state(core)
    return core


def memory_state(core: Core) -> dict[str, object]:
    """stats.json's "memory": the cap, this process's resident memory, and what the cap's shares hold."""
    cap = memory.process_cap()
    packs, packs_bound = core.evidence.memo.held()
    return {"cap_mib": cap.cap_mb, "rss_mib": memory.resident_bytes() >> 20, **core.artifacts.memory_state(),
            "packs_mib": packs >> 20, "packs_budget_mib": packs_bound >> 20, "trims": memory.trims(),
            "set_by": memory.source()}


def close_core(core: Core, keep_artifacts: bool = False) -> None:
    """Stop background work, then save what grew; the stats log closes after its last writer."""
    core.protocol.chooser.close()  # the dense warm-up stops between batches
    if core.guard is not None:
        core.guard.close()  # its background log lines stop before the stats log closes
    if core.artifacts.store is not None and not keep_artifacts:
        core.artifacts.store.close()  # saves indexes built since, flushes the queue
    core.stats.close()
    if core.state is not None:
        core.state.close()


@dataclass
class Mounted:
    """What a mount serves: the Core, the binding its backend attaches to, the source watcher."""

    core: Core
    binding: LateBinding
    freshness: Freshness

    def close(self) -> None:
        """After the backend returned: stop watching, then close the Core."""
        self.freshness.stop()
        close_core(self.core)


def mount(
    root: SourceRoot, state_dir: Path, backend: str, mountpoint: str, *, session_intent: str | None = None,
    guard: GuardConfig | None = None, watch: str | None = None, cache: str | None = None, source: str = "",
) -> Mounted:
    """A mount's Core with a late binding for ``backend``, watching ``watch`` (a path to the source tree;
    None: ``--no-watch``, source changes are checked on each open), over the shared ``cache`` if given.
    ``source``: the source's path, whose filesystem and the mounts under it decide what watching can see."""
    warming = preload.start() if cache else None  # a fleet host: Readers and the model before the mount
    threading.Thread(target=sweep_cache, name="sparsefs-retention", daemon=True).start()
    binding = LateBinding()  # the backend attaches once it speaks to the kernel
    core = build_core(root, state_dir, backend, session_intent, guard=guard, mountpoint=mountpoint, binding=binding,
                      cache=cache)
    freshness = watch_source(core, watch or "", enabled=watch is not None, source=source)
    if warming is not None:
        preload.wait(warming)
    return Mounted(core, binding, freshness)


def sweep_cache() -> None:
    """Remove the cache root's state directories idle past the retention age (sparsefs.store.retention); ours
    is locked by this mount, so kept. Off the serving path: a big tree takes a while to remove."""
    try:
        outcome = retention.sweep(retention.cache_root(), retention.retain_days())
    except OSError as err:
        log.warning("retention sweep of %s failed (%s)", retention.cache_root(), err)
        return
    for path, size in outcome.removed:
        log.warning("removed %s (%d bytes, unused for over %g days: $%s)", path, size, retention.retain_days(),
                 retention.RETAIN_ENV)


def _count_unsaved(stats: Stats, store: ParsedStore | None, state: StateDB | None) -> None:
    """stats.json's ``not_saved`` counts the writes the state directory refused (a full disk): the mount serves
    on from memory, and says so once."""
    if state is not None:
        stats.unsaved["state_writes_failed"] = lambda: state.failed_writes
    else:
        stats.unsaved["state_database_not_opened"] = lambda: 1
    if store is not None:
        stats.unsaved["parsed_store_writes_failed"] = lambda: store.failures
    else:
        stats.unsaved["parsed_store_not_opened"] = lambda: 1


def _open_state(state_dir: Path) -> StateDB | None:
    """Episodes, frozen packs and the session intent on disk; without them the mount still serves."""
    try:
        return StateDB.in_dir(state_dir)
    except (OSError, sqlite3.Error) as err:
        log.warning("state database unavailable (%s); episodes and packs will not survive this mount", err)
        return None


def _open_store(state_dir: Path, config: StoreConfig | None, shared: SharedTier | None) -> ParsedStore | None:
    """Fingerprints and parsed artifacts on disk; a state dir that cannot hold them means memory only (and no
    shared tier: it sits under the local store)."""
    try:
        return open_store(state_dir, config, shared)
    except (OSError, sqlite3.Error) as err:
        log.warning("parsed-artifact store unavailable (%s); this mount starts cold and stays in memory", err)
        if shared is not None:
            shared.close(0.1)
        return None
