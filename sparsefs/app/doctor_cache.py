"""``sparsefs doctor --cache URL``: is the shared parse cache usable, and how do the mounts' caches fare?

The URL check builds the engine (is its extra installed?), then probes the store
on a thread with a deadline (a store that hangs must not hang doctor): connect,
write a probe, read it back, remove it, and for Redis report the server version,
``maxmemory`` and its eviction policy. A Redis without ``maxmemory`` grows until
the machine runs out; one with ``noeviction`` refuses writes once full (counted
as ``full``, reads still served), so both are warnings with the setting to use.
A mount's line comes from the ``shared_cache`` section of its stats.json.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from sparsefs.app.doctor import Check
from sparsefs.store.engines import Engine, EngineUnavailable, open_engine, parse_url
from sparsefs.store.shared import FAILURES

PROBE_GRACE_S = 5.0
_EVICTING = ("allkeys-lru", "allkeys-lfu", "volatile-lru", "volatile-lfu", "allkeys-random")


def check_cache(url: str) -> Check:
    """One line for a shared cache URL: reachable, writable, bounded; the fix when it is not."""
    try:
        config = parse_url(url)
        engine = open_engine(config)
    except EngineUnavailable as err:
        return Check("shared cache", False, str(err), "fix the URL or install the extra it names")
    name = f"shared cache {config.shown}"
    started = time.monotonic()
    outcome = _probe(engine, config.timeout + PROBE_GRACE_S)
    elapsed_ms = (time.monotonic() - started) * 1000
    if outcome is None:
        return Check(name, False, f"no answer within {config.timeout + PROBE_GRACE_S:g} s",
                     "check the host, port and firewall; mounts parse locally meanwhile")
    engine.close()
    if isinstance(outcome, BaseException):
        return Check(name, False, f"{type(outcome).__name__}: {outcome}",
                     "check the address, credentials and permissions; mounts parse locally meanwhile")
    detail, policy = outcome
    mode = "read-write" if config.write else "read-only (?write=0)"
    return _bounded(name, f"answers in {elapsed_ms:.0f} ms, {mode}; {detail}", config.engine, policy)


def _probe(engine: Engine, seconds: float) -> list[str] | BaseException | None:
    """The engine's probe on a thread: its answer, its failure, or None when it did not finish in ``seconds``
    (a store that hangs must not hang doctor; the thread is left behind, a daemon)."""
    outcome: list[list[str] | BaseException] = []

    def probe() -> None:
        try:
            outcome.append(engine.probe())
        except Exception as err:  # noqa: BLE001 - every failure is the check's answer
            outcome.append(err)

    thread = threading.Thread(target=probe, name="sparsefs-doctor-cache", daemon=True)
    thread.start()
    thread.join(seconds)
    return outcome[0] if outcome else None


def _bounded(name: str, detail: str, engine: str, policy: str) -> Check:
    """A Redis that grows without bound, or refuses writes when full, works but deserves a warning."""
    if engine != "redis":
        return Check(name, True, detail)
    if "maxmemory 0," in detail:
        return Check(name, False, detail + " (unbounded)",
                     "CONFIG SET maxmemory 4gb and maxmemory-policy allkeys-lru (redis.conf to keep it)",
                     required=False)
    if policy not in _EVICTING:
        return Check(name, False, detail, "CONFIG SET maxmemory-policy allkeys-lru: with "
                     f"{policy or 'this policy'} a full store refuses uploads", required=False)
    return Check(name, True, detail)


def mount_cache_check(name: str, shared: dict[str, Any]) -> Check:
    """A mount's shared cache from its stats.json: state, hits and misses, and what failed."""
    failures = {kind: shared.get(kind, 0) for kind in FAILURES if shared.get(kind)}
    detail = (f"shared cache {shared.get('url')}: {shared.get('state')}, {shared.get('hits', 0)} hits, "
              f"{shared.get('misses', 0)} misses, {shared.get('uploaded_parts', 0)} parts uploaded")
    if not failures:
        return Check(f"{name} cache", True, detail, required=False)
    listed = ", ".join(f"{kind} {count}" for kind, count in failures.items())
    return Check(f"{name} cache", False, f"{detail}; failed: {listed} (reads parsed locally)",
                 "sparsefs doctor --cache URL (the same URL) says why", required=False)
