"""The memory cap (issue 25.8): its shares, the footprint estimate, and a parse cache bounded in bytes whose
evicted parses the parsed store serves again. The daemon's RSS under the cap through real mounts is checked
in tests/mount/test_hostile.py (the hostile corpus) and tests/mount/test_mount_memory.py (the large shared data)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from sparsefs.app import doctor
from sparsefs.artifacts import memory
from sparsefs.artifacts.cache import ArtifactCache
from sparsefs.artifacts.memory import MemoryCap, footprint
from sparsefs.source.rootfs import SourceRoot
from sparsefs.store.parsed import StoreConfig, open_store


def test_the_cap_and_its_shares(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(memory.ENV, "2048")
    cap = MemoryCap.from_env()
    assert cap.cap_mb == 2048
    assert cap.parsed_bytes + cap.packs_bytes + cap.headroom_bytes == (2048 - memory.RESERVE_MB) << 20
    assert cap.parsed_bytes == 4 * cap.packs_bytes and cap.result_bytes <= cap.parsed_bytes // 2
    monkeypatch.setenv(memory.ENV, "100")  # below what the process itself needs: the floor
    assert MemoryCap.from_env().cap_mb == memory.MIN_CAP_MB
    monkeypatch.setenv(memory.ENV, "lots")
    assert MemoryCap.from_env().cap_mb == memory.default_cap_mb()
    assert memory.MIN_CAP_MB <= memory.default_cap_mb() <= memory.DEFAULT_MAX_MB


def test_footprint_is_exact_for_flat_values_and_close_for_large_containers() -> None:
    assert footprint("x" * 1000) == sys.getsizeof("x" * 1000)
    assert footprint(np.zeros((1000, 384), np.float32)) >= 1000 * 384 * 4
    rows = [[f"cell {i} {j}" * (1 + i % 7) for j in range(12)] for i in range(20_000)]
    exact = sys.getsizeof(rows) + sum(sys.getsizeof(r) + sum(sys.getsizeof(c) for c in r) for r in rows)
    assert abs(footprint(rows) - exact) < 0.1 * exact  # measured on 48 sampled rows
    nested = {"units": rows[:100], "index": {"vectors": np.ones((100, 8), np.float16)}}
    assert footprint(nested) > footprint(rows[:100])


def _documents(folder: Path, count: int, size: int) -> list[str]:
    names = []
    for i in range(count):
        words = " ".join(f"word{i}x{j} harbor fleet" for j in range(size // 24))
        (folder / f"doc{i}.md").write_text(f"# Document {i}\n\n{words}\n")
        names.append(f"doc{i}.md")
    return names


def test_parses_beyond_the_byte_bound_are_evicted_and_the_store_serves_them(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    names = _documents(src, 6, 400_000)
    root = SourceRoot.open(str(src))
    store = open_store(tmp_path / "state", StoreConfig(min_parse_seconds=0.0))
    try:
        cache = ArtifactCache(root, store=store, max_parsed_bytes=3 << 20)
        first = {name: cache.load(name).parsed.full_view for name in names}
        state = cache.memory_state()
        assert state["evictions"] >= 3 and state["parsed_entries"] < len(names)
        assert cache._sizes.total <= 3 << 20 or state["parsed_entries"] == 1
        store.close()  # every queued write on disk
        store = open_store(tmp_path / "state", StoreConfig(min_parse_seconds=0.0))
        cache.store = store
        parses = cache.parses
        again = cache.load(names[0])  # evicted long ago: from the store, not parsed again
        assert again.parsed.full_view == first[names[0]]
        assert cache.parses == parses and cache.disk_loads == 1
    finally:
        store.close()
        root.close()


def test_a_parse_that_grows_an_index_is_measured_again(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("harbor fleet\n" * 1000)
    root = SourceRoot.open(str(tmp_path))
    try:
        cache = ArtifactCache(root, max_parsed_bytes=64 << 20)
        artifact = cache.load("a.md")
        before = cache.memory_state()["parsed_mib"], cache._sizes.total
        artifact.parsed.data["grown"] = np.zeros((4 << 20,), np.uint8)  # what a lazily built index does
        cache.load("a.md")
        assert cache._sizes.total >= before[1] + (4 << 20)
    finally:
        root.close()


def test_room_for_parses_follows_resident_memory_only_when_governed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "_process", memory._Process(MemoryCap(1024)))
    monkeypatch.setattr(memory, "resident_bytes", lambda: 900 << 20)
    assert memory.room_for_parses(100 << 20) is None  # a library user's process: only the fixed share
    memory._process.governed = True
    assert memory.room_for_parses(100 << 20) == (1024 - memory.MARGIN_MB - 800) << 20
    assert memory.room_for_parses(100 << 20, working=80 << 20) == (1024 - memory.MARGIN_MB - 800 - 80) << 20
    monkeypatch.setattr(memory, "resident_bytes", lambda: 1100 << 20)
    assert memory.room_for_parses(0) == 0  # everything else already fills the cap: keep only the newest
    assert memory.working_set(10 << 20, parsed=False) == 120 << 20
    assert memory.working_set(10 << 20, parsed=True) == 60 << 20
    huge = memory.working_set(1 << 30, parsed=False)  # a parse result is bounded: so is what reading it holds
    assert huge == 3 * MemoryCap(1024).result_bytes


def test_an_eviction_hands_memory_back(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(memory, "_trim", {"last": 0.0, "freed": 0, "count": 0})
    monkeypatch.setattr(memory, "_glibc", lambda: type("L", (), {"malloc_trim": lambda self, n: calls.append(n)})())
    memory.give_back(1 << 20)  # too little to be worth a trim
    assert calls == []
    memory.give_back(16 << 20)
    memory.give_back(64 << 20)  # within a second of the last: waits for the next
    assert calls == [0] and memory.trims() == 1


def test_packs_have_their_share(monkeypatch: pytest.MonkeyPatch) -> None:
    from sparsefs.vfs.virtual import VirtualMemo

    monkeypatch.setattr(memory, "_process", memory._Process(MemoryCap(1024)))
    assert VirtualMemo().held() == (0, MemoryCap(1024).packs_bytes)


def test_doctor_shows_memory_against_the_cap() -> None:
    under = doctor.memory_check("m", {"rss_mib": 600, "cap_mib": 1024, "set_by": "default", "parsed_mib": 100,
                                      "parsed_budget_mib": 288, "evictions": 3})
    assert under.ok and "600 MiB resident of a 1024 MiB cap (default)" in under.detail
    assert not doctor.memory_check("m", {"rss_mib": 1100, "cap_mib": 1024}).ok
