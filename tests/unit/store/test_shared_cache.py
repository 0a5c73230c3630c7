"""The shared cache tier (issue 20) in process: two "hosts" over one real redis-server or one fsspec directory.

Each host is its own ArtifactCache, state directory and copy of the corpus, as
two machines would be; the store is a redis-server on a loopback port (stopped
whatever happens) or a file:// directory. Every way the store can fail must end
in a local parse that is counted once per occurrence and logged once.
"""

from __future__ import annotations

import logging
import random
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from readers.base import Parsed, ReadIntent
from sparsefs.app.compose import build_artifacts, build_core, close_core
from sparsefs.artifacts.cache import ArtifactCache
from sparsefs.source.rootfs import SourceRoot
from sparsefs.store import blob, serial
from sparsefs.store import parsed as parsed_store
from sparsefs.store.engines import EngineUnavailable, parse_url, redact
from sparsefs.store.parsed import StoreConfig
from sparsefs.store.shared import Paused, SharedTier
from tests import redis_server

DOC = "report.md"
NEED = "quarterly revenue of the northern region"
INTENT = ReadIntent(text=NEED, slots=(NEED,))
_STORE = StoreConfig(min_parse_seconds=0.0)  # every parse is stored (and shared), however fast


def corpus_text(seed: int = 7, paragraphs: int = 900) -> str:
    """A markdown report over 64 KiB (the shared tier's floor), deterministic."""
    rng = random.Random(seed)
    words = ["revenue", "region", "northern", "southern", "quarter", "growth", "costs", "staff", "plant", "orders",
             "margin", "forecast", "supply", "demand", "contract", "energy", "steel", "delivery", "backlog", "tax"]
    lines = ["# Annual report", ""]
    for i in range(paragraphs):
        if i % 60 == 0:
            lines += [f"## Section {i // 60}", ""]
        lines.append(" ".join(rng.choice(words) for _ in range(14)) + f" ({i * 37 % 1000} units).")
    return "\n".join(lines) + "\n"


class Host:
    """One machine: its own copy of the corpus, state directory and artifact cache over the shared URL."""

    def __init__(self, home: Path, url: str | None, text: str) -> None:
        (home / "src").mkdir(parents=True, exist_ok=True)
        (home / "src" / DOC).write_text(text)
        self.home = home
        self.root = SourceRoot.open(str(home / "src"))
        self.cache: ArtifactCache = build_artifacts(self.root, home / "state", store_config=_STORE, cache=url)

    @property
    def shared(self) -> SharedTier:
        assert self.cache.store is not None and self.cache.store.shared is not None
        return self.cache.store.shared

    def close(self) -> None:
        if self.cache.store is not None:
            self.cache.store.close()
        self.root.close()


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[redis_server.RedisServer]:
    """A real redis-server on a free loopback port; stopped (and reaped) whatever the test does."""
    with redis_server.running(tmp_path / "redis") as server:
        yield server


@pytest.fixture
def text() -> str:
    return corpus_text()


def artifact_key(server: redis_server.RedisServer) -> bytes:
    keys = server.client().keys("sparsefs:*")
    assert len(keys) == 1, keys
    return bytes(keys[0])


def test_the_second_host_loads_the_first_hosts_parse(tmp_path: Path, redis: redis_server.RedisServer,
                                                     text: str) -> None:
    first = Host(tmp_path / "a", redis.url, text)
    parsed_a = first.cache.load(DOC)
    first.close()  # the upload is done once close returns
    assert first.shared.counts["misses"] == 1 and first.shared.counts["uploaded_parts"] >= 2
    second = Host(tmp_path / "b", redis.url, text)
    try:
        parsed_b = second.cache.load(DOC)
        assert second.cache.parses == 0 and second.cache.disk_loads == 1
        assert second.shared.counts["hits"] == 1 and second.shared.counts["fetched_bytes"] > 0
        assert parsed_b.parsed.full_view == parsed_a.parsed.full_view
        assert set(parsed_b.parsed.data) == set(parsed_a.parsed.data)
        loaded_keys = set(parsed_b.parsed.data)
        assert parsed_b.fingerprint == parsed_a.fingerprint
        located_a = parsed_a.reader.locate(parsed_a.parsed, INTENT, 1500)
        located_b = parsed_b.reader.locate(parsed_b.parsed, INTENT, 1500)
        assert [(e.anchor, e.text) for e in located_b.items] == [(e.anchor, e.text) for e in located_a.items]
    finally:
        second.close()
    third = Host(tmp_path / "c", redis.url, text)  # the second host kept it locally: no new upload was needed
    try:  # ... but for what its read built lazily (issue 27: a glossary, sentence groups), as for dense vectors
        assert second.shared.counts["uploaded_parts"] <= len(set(parsed_b.parsed.data) - loaded_keys)
        third.cache.load(DOC)
        assert third.cache.parses == 0 and third.shared.counts["hits"] == 1
    finally:
        third.close()


def test_caches_grown_after_the_parse_are_new_parts_and_the_largest_is_loaded(
    tmp_path: Path, redis: redis_server.RedisServer, text: str
) -> None:
    """Dense vectors (or a lazy index) added after the parse: each size is a part written once; a load takes the
    largest, and the view is never rewritten."""
    first = Host(tmp_path / "a", redis.url, text)
    loaded = first.cache.load(DOC)
    assert _wait_view(redis)
    client = redis.client()
    view = client.hget(artifact_key(redis), blob.VIEW)
    store = first.cache.store
    assert store is not None
    for grown, rows in enumerate((3, 5), start=1):  # as a warm-up embeds more units
        loaded.parsed.data["dense:test"] = {"ids": np.arange(rows), "vectors": np.ones((rows, 4), np.float32)}
        store.save_grown(loaded.parsed)
        assert _wait_parts(redis, 1 + len(loaded.parsed.data) + grown - 1)  # the view, each key, each growth
    first.close()
    parts = {bytes(p).decode() for p in client.hkeys(artifact_key(redis))}
    assert {blob.part_id("dense:test", 2 + 2 * 3), blob.part_id("dense:test", 2 + 2 * 5)} <= parts
    assert client.hget(artifact_key(redis), blob.VIEW) == view
    second = Host(tmp_path / "b", redis.url, text)
    try:
        fetched = second.cache.load(DOC)
        assert second.cache.parses == 0
        assert fetched.parsed.data["dense:test"]["vectors"].shape == (5, 4)
    finally:
        second.close()


def test_vectors_a_read_embedded_reach_the_store_while_the_host_runs(
    tmp_path: Path, redis: redis_server.RedisServer, text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No save, no unmount: the writer shares dense growth on its own (each time it has grown 4-fold)."""
    monkeypatch.setattr(parsed_store, "SHARE_GROWTH_S", 0.05)
    first = Host(tmp_path / "a", redis.url, text)
    try:
        loaded = first.cache.load(DOC)
        assert _wait_view(redis)
        parts = redis.client().hlen(artifact_key(redis))
        loaded.parsed.data["dense:test"] = {"ids": np.arange(3), "vectors": np.ones((3, 4), np.float32)}
        assert _wait_parts(redis, parts + 1)
        loaded.parsed.data["dense:test"] = {"ids": np.arange(5), "vectors": np.ones((5, 4), np.float32)}
        time.sleep(0.5)
        assert redis.client().hlen(artifact_key(redis)) == parts + 1  # not 4-fold
        second = Host(tmp_path / "b", redis.url, text)
        try:
            fetched = second.cache.load(DOC)
            assert fetched.parsed.data["dense:test"]["vectors"].shape == (3, 4)
        finally:
            second.close()
    finally:
        first.close()


def _wait_parts(server: redis_server.RedisServer, count: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.client().hlen(artifact_key(server)) >= count:
            return True
        time.sleep(0.05)
    return False


def _wait_view(server: redis_server.RedisServer, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        keys = server.client().keys("sparsefs:*")
        if keys and server.client().hexists(keys[0], blob.VIEW):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("damage", ["flip", "truncate", "skew"])
def test_a_damaged_part_is_a_local_parse_counted_and_replaced(tmp_path: Path, redis: redis_server.RedisServer,
                                                             text: str, damage: str,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    first = Host(tmp_path / "a", redis.url, text)
    first.cache.load(DOC)
    first.close()
    client = redis.client()
    key = artifact_key(redis)
    good = bytes(client.hget(key, blob.VIEW))
    client.hset(key, blob.VIEW, _damaged(good, damage))
    second = Host(tmp_path / "b", redis.url, text)
    with caplog.at_level(logging.WARNING, logger="sparsefs.store.shared"):
        second.cache.load(DOC)
        second.close()
    kind = "skewed" if damage == "skew" else "corrupt"
    assert second.cache.parses == 1 and second.shared.counts[kind] == 1 and second.shared.counts["hits"] == 0
    assert sum(kind in r.getMessage() for r in caplog.records) == 1
    replaced = client.hget(key, blob.VIEW)
    assert replaced is not None and bytes(replaced) != _damaged(good, damage)  # discarded, then uploaded again
    third = Host(tmp_path / "c", redis.url, text)
    try:
        third.cache.load(DOC)
        assert third.cache.parses == 0 and third.shared.counts["hits"] == 1
    finally:
        third.close()


def _damaged(good: bytes, how: str) -> bytes:
    if how == "flip":
        return good[:-10] + bytes([good[-10] ^ 0xFF]) + good[-9:]
    if how == "truncate":
        return good[: len(good) // 2]
    header_end = good.index(b"\n")
    code = parse_header(good)["code"]
    return good[:header_end].replace(code.encode(), b"0" * len(code)) + good[header_end:]


def parse_header(data: bytes) -> dict[str, str]:
    import orjson

    return dict(orjson.loads(data[len(blob.MAGIC) : data.index(b"\n")]))


def test_an_unreachable_store_is_a_local_parse_then_not_asked_for_a_while(
    tmp_path: Path, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"redis://127.0.0.1:{redis_server.free_port()}/0"  # nothing listens there
    host = Host(tmp_path / "a", url, text)
    (tmp_path / "a" / "src" / "other.md").write_text(corpus_text(seed=8))
    try:
        with caplog.at_level(logging.WARNING, logger="sparsefs.store.shared"):
            started = time.monotonic()
            host.cache.load(DOC)
            host.cache.load("other.md")
            elapsed = time.monotonic() - started
        assert host.cache.parses == 2 and elapsed < 10
        counts = host.shared.counts
        assert counts["unreachable"] == 1 and counts["skipped"] == 1  # the second read did not ask
        assert host.shared.snapshot()["state"].startswith("down")
        assert sum("unreachable" in r.getMessage() for r in caplog.records) == 1
        store, artifact = host.cache.store, host.cache.load(DOC)
        assert store is not None
        with pytest.raises(Paused):  # sparsefs index does not wait on a store that is down either
            store.publish(*artifact.parse_key, artifact.parsed)
    finally:
        host.close()


def test_a_hung_store_costs_a_read_at_most_its_timeout(tmp_path: Path, text: str) -> None:
    with redis_server.blackhole() as url:
        baseline = Host(tmp_path / "local", None, text)
        started = time.monotonic()
        baseline.cache.load(DOC)
        local_s = time.monotonic() - started
        baseline.close()
        host = Host(tmp_path / "a", url + "?timeout=0.5", text)
        try:
            started = time.monotonic()
            host.cache.load(DOC)
            elapsed = time.monotonic() - started
            assert host.cache.parses == 1 and host.shared.counts["slow"] == 1
            assert elapsed < local_s + 0.5 + 2.0, (elapsed, local_s)  # the bound, plus scheduling on a busy box
        finally:
            started = time.monotonic()
            host.close()
            assert time.monotonic() - started < 12  # close is bounded too, with the store still hanging


def test_a_full_store_pauses_uploads_and_every_read_is_served(tmp_path: Path, text: str) -> None:
    with redis_server.running(tmp_path / "redis", "--maxmemory", "1mb", "--maxmemory-policy", "noeviction") as srv:
        host = Host(tmp_path / "a", srv.url, corpus_text(seed=1, paragraphs=12_000))  # ~1 MB of parse
        try:
            artifact = host.cache.load(DOC)
            assert artifact.parsed.full_view
        finally:
            host.close()
        assert host.shared.counts["full"] == 1, host.shared.snapshot()


def test_a_read_only_user_fetches_and_never_writes(tmp_path: Path, redis: redis_server.RedisServer,
                                                  text: str) -> None:
    redis.client().execute_command("ACL", "SETUSER", "reader", "on", ">pw", "~*", "+@read", "+@connection")
    reader_url = f"redis://reader:pw@127.0.0.1:{redis.port}/0"
    refused = Host(tmp_path / "a", reader_url, text)
    refused.cache.load(DOC)
    refused.close()
    assert refused.shared.counts["refused"] == 1 and refused.cache.parses == 1
    assert "pw" not in str(refused.shared.snapshot())  # the password never reaches stats.json
    writer = Host(tmp_path / "b", redis.url, text)
    writer.cache.load(DOC)
    writer.close()
    reader = Host(tmp_path / "c", reader_url + "?write=0", text)
    try:
        reader.cache.load(DOC)
        assert reader.cache.parses == 0 and reader.shared.counts["hits"] == 1
    finally:
        reader.close()
    assert reader.shared.counts["refused"] == 0 and reader.shared.counts["uploaded_parts"] == 0


def test_small_artifacts_never_ask_the_store(tmp_path: Path) -> None:
    url = f"redis://127.0.0.1:{redis_server.free_port()}/0"
    host = Host(tmp_path / "a", url, "# small\n\nA short note about revenue.\n")
    try:
        host.cache.load(DOC)
        assert all(host.shared.counts[name] == 0 for name in ("unreachable", "misses", "skipped"))
    finally:
        host.close()


def test_an_fsspec_directory_is_a_shared_store(tmp_path: Path, text: str) -> None:
    url = f"file://{tmp_path / 'shared'}"
    first = Host(tmp_path / "a", url, text)
    parsed_a = first.cache.load(DOC)
    first.close()
    files = [p for p in (tmp_path / "shared").rglob("*") if p.is_file()]
    assert files and not [p for p in files if ".tmp-" in p.name]  # renamed into place
    view = next(p for p in files if p.name == blob.VIEW)
    second = Host(tmp_path / "b", str(tmp_path / "shared"), text)  # a plain path is a file:// store
    try:
        assert second.cache.load(DOC).parsed.full_view == parsed_a.parsed.full_view
        assert second.cache.parses == 0 and second.shared.counts["hits"] == 1
    finally:
        second.close()
    view.write_bytes(view.read_bytes()[:-1] + b"!")
    third = Host(tmp_path / "c", url, text)
    try:
        third.cache.load(DOC)
        assert third.cache.parses == 1 and third.shared.counts["corrupt"] == 1
    finally:
        third.close()


def test_stats_json_shows_the_shared_cache(tmp_path: Path, redis: redis_server.RedisServer, text: str) -> None:
    home = tmp_path / "a"
    (home / "src").mkdir(parents=True)
    (home / "src" / DOC).write_text(text)
    root = SourceRoot.open(str(home / "src"))
    core = build_core(root, home / "state", "in-process", cache=redis.url.replace("redis://", "redis://:hunter2@"))
    try:
        section = core.stats.snapshot()["shared_cache"]
        assert section["engine"] == "redis" and section["state"] == "up" and section["hits"] == 0
        assert "hunter2" not in section["url"] and "***" in section["url"]
    finally:
        close_core(core)
        root.close()


def test_blob_checks() -> None:
    owner = blob.Owner("c0de", "ab" * 32, "text-md")
    parsed = Parsed("hello world", "markdown", {"index": {"a": 1, "b": [1, 2]}, "raw": b"\x00\x01"})
    wanted = blob.wanted_ids(parsed)
    parts = {pid: blob.encode_part(owner, parsed, key, ["index", "raw"]) for pid, key in wanted.items()}
    again = blob.assemble(parts, owner)
    assert again.full_view == "hello world" and again.data == parsed.data and again.kind == "markdown"
    other = blob.Owner("c0de", "cd" * 32, "text-md")
    with pytest.raises(blob.PartError):
        blob.assemble(parts, other)  # a blob names the artifact it belongs to
    with pytest.raises(blob.PartError) as skew:
        blob.assemble(parts, blob.Owner("beef", owner.name, owner.reader))
    assert skew.value.skewed
    with pytest.raises(blob.PartError):
        blob.assemble({blob.VIEW: parts[blob.VIEW]}, owner)  # a required part is missing
    assert blob.choose(["view", "kaaa.3", "kaaa.10", "kbbb.n"]) == ["view", "kaaa.10", "kbbb.n"]
    assert blob.choose(["kaaa.3"]) == []  # no view: nothing is usable yet
    with pytest.raises(serial.Corrupt):
        blob.decode_part(b"garbage", owner, blob.VIEW)


def test_cache_urls() -> None:
    parsed = parse_url("rediss://u:secret@cache:6380/2?timeout=0.5&write=0&ssl_cert_reqs=none")
    assert parsed.engine == "redis" and parsed.timeout == 0.5 and not parsed.write
    assert "secret" not in parsed.shown and parsed.url.endswith("?ssl_cert_reqs=none")
    assert parse_url("/srv/cache").url == "file:///srv/cache" and parse_url("/srv/cache").engine == "fsspec"
    assert "***" in redact("s3://bucket/p?secret_access_key=xyz") and "xyz" not in redact("s3://b/p?token=xyz")
    for bad in ("redis://h?timeout=-1", "redis://h?timeout=x", "relative/path"):
        with pytest.raises(EngineUnavailable):
            parse_url(bad)
    with pytest.raises(EngineUnavailable, match="no filesystem"):
        build_artifacts(SourceRoot.open("/"), Path("/nonexistent"), cache="nosuchproto://x")


def test_copies_of_one_file_on_two_hosts_share_one_entry(tmp_path: Path, redis: redis_server.RedisServer,
                                                         text: str) -> None:
    """The name is the bytes' hash: a renamed copy (same extension) on another host is the same artifact."""
    first = Host(tmp_path / "a", redis.url, text)
    first.cache.load(DOC)
    first.close()
    second = Host(tmp_path / "b", redis.url, text)
    shutil.copyfile(tmp_path / "b" / "src" / DOC, tmp_path / "b" / "src" / "renamed.md")
    try:
        second.cache.load("renamed.md")
        assert second.cache.parses == 0 and second.shared.counts["hits"] == 1
    finally:
        second.close()


def test_a_redis_cluster_is_a_shared_store(tmp_path: Path, text: str) -> None:
    """redis+cluster://: one hash per artifact lives in one slot, so a fetch is still two round trips."""
    with redis_server.cluster(tmp_path / "cluster") as url:
        first = Host(tmp_path / "a", url, text)
        parsed_a = first.cache.load(DOC)
        first.close()
        assert first.shared.counts["uploaded_parts"] >= 2, first.shared.snapshot()
        second = Host(tmp_path / "b", url, text)
        try:
            assert second.cache.load(DOC).parsed.full_view == parsed_a.parsed.full_view
            assert second.cache.parses == 0 and second.shared.counts["hits"] == 1
        finally:
            second.close()


def test_concurrent_reads_of_a_healthy_store_all_hit(tmp_path: Path, redis: redis_server.RedisServer,
                                                     text: str) -> None:
    """More concurrent misses than fetch slots wait for a slot; a healthy store is never taken for slow."""
    names = [f"doc{i}.md" for i in range(8)]
    first = Host(tmp_path / "a", redis.url, text)
    for i, name in enumerate(names):
        (tmp_path / "a" / "src" / name).write_text(corpus_text(seed=100 + i))
    for name in names:
        first.cache.load(name)
    first.close()
    second = Host(tmp_path / "b", redis.url, text)
    for i, name in enumerate(names):
        (tmp_path / "b" / "src" / name).write_text(corpus_text(seed=100 + i))
    try:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(second.cache.load, names))
        assert second.shared.counts["hits"] == 8 and second.shared.counts["slow"] == 0, second.shared.snapshot()
        assert second.cache.parses == 0
    finally:
        second.close()
