"""The shared cache across "hosts" (issue 20): separate daemons, state directories and copies of one corpus,
one real redis-server on a loopback port. Also the CLI around it: index, read, mcp, doctor, mount refusals."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from sparsefs.app.reading import plan_read
from tests import mountutil, redis_server
from tests.conftest import DATA, HANG_GUARD_S, is_pack
from tests.unit.store.test_shared_cache import corpus_text

TEN_K = DATA / "pdf" / "filings" / "3M_2022_10K.pdf"
QUESTION = "R&D expenses 2022; number of employees"
READ_BOUND_S = 60.0  # a cold PDF parse on a loaded 2-CPU machine, with room; the parse bound is 30 s


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[redis_server.RedisServer]:
    """A real redis-server on a free loopback port; stopped (and reaped) whatever the test does."""
    with redis_server.running(tmp_path / "redis") as server:
        yield server


@pytest.fixture(autouse=True)
def _no_dense_warmup(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each daemon would embed the whole 10-K in the background: minutes of CPU on a shared 2-CPU machine."""
    monkeypatch.setenv("SPARSEFS_DENSE_WARMUP", "0")


def start_host(home: Path, files: dict[str, Path | str], cache: str | None, backend: str) -> mountutil.Mount:
    """A host: its own copy of the corpus, state directory and mirror mount over the shared cache."""
    (home / "src").mkdir(parents=True)
    (home / "mnt").mkdir()
    for name, content in files.items():
        if isinstance(content, Path):
            shutil.copyfile(content, home / "src" / name)
        else:
            (home / "src" / name).write_text(content)
    extra = ("--cache", cache) if cache else ()
    return mountutil.start(home / "src", home / "mnt", home / "state", *extra, backend=backend)


def read(mount: mountutil.Mount, name: str) -> bytes:
    started = time.monotonic()
    with open(mount.mountpoint / name, "rb") as pack:
        data = pack.read()
    assert time.monotonic() - started < READ_BOUND_S, f"{name} took {time.monotonic() - started:.1f} s"
    return data


def stats(mount: mountutil.Mount) -> dict[str, Any]:
    return dict(json.loads((mount.mountpoint / ".sparsefs" / "stats.json").read_bytes()))


def wait_for_views(server: redis_server.RedisServer, count: int, timeout: float = 60.0) -> None:
    """Until ``count`` artifacts have their view part (uploaded last, after what it needs)."""
    client = server.client()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        keys = client.keys("sparsefs:*")
        if sum(bool(client.hexists(k, "view")) for k in keys) >= count:
            return
        time.sleep(0.1)
    raise AssertionError(f"fewer than {count} artifacts were uploaded")


def test_the_second_host_reads_the_10k_from_the_shared_tier(tmp_path: Path, backend: str,
                                                              redis: redis_server.RedisServer) -> None:
    name = f"{TEN_K.name}@intent={QUESTION}"
    host1 = start_host(tmp_path / "host1", {TEN_K.name: TEN_K}, redis.url, backend)
    try:
        with mountutil.hang_guard(host1, HANG_GUARD_S):
            local = read(host1, name)
            first = stats(host1)
            wait_for_views(redis, 1)
        host2 = start_host(tmp_path / "host2", {TEN_K.name: TEN_K}, redis.url, backend)
        try:
            with mountutil.hang_guard(host2, HANG_GUARD_S):
                shared = read(host2, name)
                second = stats(host2)
        finally:
            mountutil.stop(host2)
    finally:
        mountutil.stop(host1)
    assert first["artifacts_parsed"] == 1 and dict(first["shared_cache"])["misses"] == 1
    assert second["artifacts_parsed"] == 0 and dict(second["shared_cache"])["hits"] == 1
    assert is_pack(local) and b": error: " not in local.split(b"\n")[0]
    assert shared == local  # byte for byte the pack of a local parse
    for mount in (host1, host2):
        assert "Traceback" not in mount.stderr() and " ERROR " not in mount.stderr(), mount.stderr()


def test_killing_redis_mid_run_loses_no_read(tmp_path: Path, backend: str, redis: redis_server.RedisServer) -> None:
    files: dict[str, Path | str] = {f"doc{i}.md": corpus_text(seed=i) for i in range(6)}
    names = [f"doc{i}.md@intent=northern region revenue growth; staff costs" for i in range(6)]
    host1 = start_host(tmp_path / "host1", files, redis.url, backend)
    try:
        with mountutil.hang_guard(host1, HANG_GUARD_S):
            expected = [read(host1, name) for name in names]
            wait_for_views(redis, 6)
    finally:
        mountutil.stop(host1)
    host2 = start_host(tmp_path / "host2", files, redis.url, backend)
    try:
        with mountutil.hang_guard(host2, HANG_GUARD_S):
            served = [read(host2, name) for name in names[:2]]  # from the store
            killer = threading.Thread(target=redis.kill)  # the store dies under the next reads
            killer.start()
            served += [read(host2, name) for name in names[2:]]  # in order: packs name their episode (e1, e2...)
            killer.join()
            after = stats(host2)
            doctor = _cli("doctor").stdout  # each mount with a shared cache gets a line of its counters
    finally:
        mountutil.stop(host2)
    assert f"mount {host2.mountpoint} cache: shared cache {redis.url}" in doctor, doctor
    assert served == expected  # every read answered, each the same pack as the first host's
    cache = dict(after["shared_cache"])
    assert cache["hits"] >= 2 and after["artifacts_parsed"] == 6 - cache["hits"]
    assert cache["unreachable"] + cache["slow"] >= 1 or cache["hits"] == 6, cache
    assert host2.stderr().count("store unreachable") <= 1  # logged once


def test_index_warms_the_store_for_index_read_and_mcp_elsewhere(tmp_path: Path,
                                                               redis: redis_server.RedisServer) -> None:
    text = corpus_text(seed=11)
    homes = [tmp_path / f"host{i}" for i in range(4)]
    for home in homes:
        (home / "src").mkdir(parents=True)
        (home / "src" / "report.md").write_text(text)
    first = _cli("index", str(homes[0] / "src"), "--state-dir", str(homes[0] / "state"), "--cache", redis.url,
                 "--no-progress")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "1 files in it now (0 fetched from it)" in first.stdout, first.stdout
    second = _cli("index", str(homes[1] / "src"), "--state-dir", str(homes[1] / "state"), "--no-progress",
                  env={"SPARSEFS_CACHE": redis.url})  # the environment's URL is --cache's default
    assert second.returncode == 0 and "1 files in it now (1 fetched from it)" in second.stdout, second.stdout
    read_out = _cli("read", "--root", str(homes[2] / "src"), "--state-dir", str(homes[2] / "state"), "--cache",
                    redis.url, "report.md@intent=northern region revenue")
    assert read_out.returncode == 0 and is_pack(read_out.stdout), read_out.stderr
    plan = plan_read(homes[3] / "src", homes[3] / "state", timeout=5, cache=redis.url)
    assert plan.local is not None
    try:
        assert is_pack(plan.local.read("report.md@intent=staff costs"))
        assert plan.local.core.artifacts.parses == 0 and plan.local.core.artifacts.disk_loads == 1
    finally:
        plan.local.close()
    hits = _keyspace_hits(redis)
    assert is_pack(anyio.run(_mcp_read, homes[3] / "src", tmp_path / "mcp-state", redis.url))  # the compact pack
    assert _keyspace_hits(redis) > hits  # the MCP server fetched from the store


def _keyspace_hits(server: redis_server.RedisServer) -> int:
    return int(server.client().info("stats")["keyspace_hits"])


async def _mcp_read(root: Path, state: Path, cache: str) -> str:
    from mcp.client.client import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=["-m", "sparsefs", "mcp", "--root", str(root),
                                                                 "--state-dir", str(state), "--cache", cache])
    async with Client(params, read_timeout_seconds=60) as client:
        result = await client.call_tool("sro_read", {"path": "report.md", "intent": "northern region revenue"})
    return "".join(part.text for part in result.content if part.type == "text")


def test_doctor_checks_the_cache_url(tmp_path: Path) -> None:
    with redis_server.running(tmp_path / "redis", "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru") as srv:
        good = _cli("doctor", "--cache", srv.url)
        assert f"[  ok] shared cache {srv.url}: answers in" in good.stdout and "allkeys-lru" in good.stdout, good.stdout
        dead = srv.url
    down = _cli("doctor", "--cache", dead)
    assert down.returncode == 1 and f"[FAIL] shared cache {dead}" in down.stdout, down.stdout
    folder = _cli("doctor", "--cache", f"file://{tmp_path / 'shared'}")
    assert "[  ok] shared cache file://" in folder.stdout, folder.stdout


def test_a_cache_url_nothing_here_can_serve_is_refused_at_once(tmp_path: Path, workspace: Path) -> None:
    (tmp_path / "mnt").mkdir()
    mount = _cli("mount", str(workspace), str(tmp_path / "mnt"), "--state-dir", str(tmp_path / "state"),
                 "--cache", "nosuchproto://host/x")
    assert mount.returncode == 2 and "nosuchproto" in mount.stderr, mount.stderr
    reading = _cli("read", "--root", str(workspace), "--cache", "redis://h?timeout=x", "annual-report.md@scout")
    assert reading.returncode == 1 and "timeout" in reading.stderr


def test_a_hung_store_never_hangs_a_mount(tmp_path: Path, backend: str) -> None:
    """A store that accepts and never answers: reads wait its bound once, then skip it; unmount is prompt."""
    files: dict[str, Path | str] = {f"doc{i}.md": corpus_text(seed=i) for i in range(3)}
    with redis_server.blackhole() as url:
        host = start_host(tmp_path / "host", files, url + "?timeout=0.5", backend)
        try:
            with mountutil.hang_guard(host, HANG_GUARD_S):
                packs = [read(host, f"doc{i}.md@intent=staff costs") for i in range(3)]
                cache = dict(stats(host)["shared_cache"])
        finally:
            started = time.monotonic()
            mountutil.stop(host)
            stopped_in = time.monotonic() - started
    assert all(is_pack(pack) for pack in packs)
    # the first read waited its bound; reads within the backoff after it did not ask (a busy machine may let the
    # backoff lapse between reads: then the store is asked, and waited for, once more)
    assert cache["slow"] >= 1 and cache["slow"] + cache["skipped"] == 3 and cache["hits"] == 0, cache
    assert stopped_in < 15


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sparsefs", *args], capture_output=True, text=True, timeout=240,
                          check=False, env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)
