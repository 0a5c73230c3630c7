"""The on-disk fingerprint index and parsed-artifact store (sparsefs.store.parsed, sparsefs.store.serial).

Round trips per Reader family compare a parse loaded from disk with a fresh
parse of the same bytes through the Reader itself: preview, locate (two
intents) and focus on the first anchor must give equal Batches.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xxhash

from readers import registry
from readers.base import Parsed, Reader, ReadIntent
from readers.kit.source import MemorySource
from readers.retrieval.segment import Heading
from sparsefs.artifacts.cache import ArtifactCache
from sparsefs.source.rootfs import SourceRoot
from sparsefs.store import parsed as parsed_store
from sparsefs.store import serial
from sparsefs.store.parsed import ParsedStore, StoreConfig, open_store
from sparsefs.store.stats import Stats
from sparsefs.vfs.core import Core
from tests.unit.vfs.test_core_virtual import read_virtual

DATA = Path(__file__).resolve().parents[4] / "shared" / "data"
HTML = ("<!DOCTYPE html><html><head><title>Rates</title></head><body><main><h1>Interest rates</h1>"
        "<p>The central bank raised rates by 25 basis points in March.</p><h2>Outlook</h2>"
        "<p>Inflation is expected to fall to 2.5 percent next year.</p></main></body></html>")


def _meeting(tmp: Path) -> Path:
    with (DATA / "qa" / "qmsum.docs.jsonl").open() as lines:
        text = json.loads(lines.readline())["text"]
    path = tmp / "meeting.md"
    path.write_text(text)
    return path


def _html(tmp: Path) -> Path:
    path = tmp / "page.html"
    path.write_text(HTML)
    return path


SAMPLES: dict[str, Any] = {
    "text": (_meeting, "remote control design; buttons"),
    "code": (lambda _: Path(serial.__file__), "decode a whitelisted class; array loader"),
    "pdf": (lambda _: DATA / "pdf" / "papers" / "2020.acl-main.447.pdf", "evaluation results; dataset"),
    "csv": (lambda _: DATA / "csv" / "datasets-covid-19" / "reference.csv", "Germany population; Iowa"),
    "xlsx": (lambda _: DATA / "xlsx" / "sheetcopilot" / "EntireShippingCosts.xlsx", "Oakland Fairfield; Mesa Seattle"),
    "json": (lambda _: DATA / "json" / "octokit-fixtures" / "get-content.raw-fixture.json", "content sha; path"),
    "jsonl": (lambda _: DATA / "logs" / "elastic-examples" / "nginxplus_json_logs.jsonl", "upstream errors; ssl"),
    "log": (lambda _: DATA / "logs" / "elastic-examples" / "kafka0_controller.log.2016-12-19-16",
            "controller election; broker failure"),
    "html": (_html, "inflation outlook; rates"),
}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ParsedStore]:
    opened = open_store(tmp_path / "state")
    yield opened
    opened.close()


def _parse(path: Path) -> tuple[Reader, Parsed]:
    data = path.read_bytes()
    reader = registry.select(path.name, data[:8192])
    return reader, reader.parse(MemorySource(path.name, data))


def _intents(text: str) -> list[ReadIntent]:
    slots = tuple(s.strip() for s in text.split(";"))
    return [ReadIntent(text, slots), ReadIntent(slots[0], slots[:1])]


def _answers(reader: Reader, parsed: Parsed, intent: str) -> list[Any]:
    out: list[Any] = [reader.preview(parsed, 2000)]
    for read_intent in _intents(intent):
        batch = reader.locate(parsed, read_intent, 3000)
        out.append(batch)
        if batch.items:
            out.append(reader.focus(parsed, batch.items[0].anchor.label))
    return out


def _saved_and_reloaded(tmp: Path, reader: Reader, parsed: Parsed, fingerprint: str = "f" * 32) -> Parsed | None:
    first = open_store(tmp / "state")
    first.save(fingerprint, reader.name, parsed, parse_seconds=1.0)
    first.close()
    second = open_store(tmp / "state")
    try:
        return second.load(fingerprint, reader.name)
    finally:
        second.close()


@pytest.mark.parametrize("family", sorted(SAMPLES))
def test_round_trip_gives_identical_batches(tmp_path: Path, family: str) -> None:
    make, intent = SAMPLES[family]
    path = make(tmp_path)
    reader, fresh = _parse(path)
    loaded = _saved_and_reloaded(tmp_path, reader, fresh)
    assert loaded is not None, f"{family}: not persisted"
    assert loaded is not fresh and loaded.full_view == fresh.full_view and loaded.kind == fresh.kind
    assert set(loaded.data) == set(fresh.data) - parsed_store.TRANSIENT_KEYS
    _, reference = _parse(path)  # an independent parse, untouched by the save
    answers = _answers(reader, loaded, intent)
    assert answers == _answers(reader, reference, intent)
    assert any(getattr(a, "items", ()) for a in answers), f"{family}: intents found nothing, the test proves little"
    grown = _saved_and_reloaded(tmp_path / "again", reader, loaded)  # with the caches locate() built lazily
    assert grown is not None and set(grown.data) == set(loaded.data) - parsed_store.TRANSIENT_KEYS
    assert _answers(reader, grown, intent) == answers


def test_lazily_built_index_is_saved_when_used_again(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "ref.csv").write_bytes((DATA / "csv" / "datasets-covid-19" / "reference.csv").read_bytes())
    os.utime(src / "ref.csv", ns=(1_600_000_000 * 10**9,) * 2)
    root = SourceRoot.open(str(src))
    store = open_store(tmp_path / "state", StoreConfig(min_parse_seconds=60))  # the parse alone is not worth it
    cache = ArtifactCache(root, store=store)
    artifact = cache.load("ref.csv")
    artifact.reader.locate(artifact.parsed, _intents("Germany population")[0], 2000)  # builds the BM25 index
    assert "index" in artifact.parsed.data
    assert cache.load("ref.csv").parsed is artifact.parsed  # warm hit: notices the new index
    store.close()
    again = open_store(tmp_path / "state")
    cache2 = ArtifactCache(root, store=again)
    reloaded = cache2.load("ref.csv")
    assert (cache2.parses, cache2.disk_loads) == (0, 1)
    assert reloaded.fingerprint == artifact.fingerprint and "index" in reloaded.parsed.data
    again.close()
    root.close()


def test_remount_reuses_fingerprints_and_parses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "src"
    src.mkdir()
    _meeting(src)
    root = SourceRoot.open(str(src))
    monkeypatch.setattr(parsed_store, "RACY_NS", 0)  # the file was written just now; pretend it has aged
    store = open_store(tmp_path / "state", StoreConfig(min_parse_seconds=0))
    cache = ArtifactCache(root, store=store)
    first = cache.load("meeting.md")
    store.close()
    store = open_store(tmp_path / "state")
    assert store.fingerprint_get(os.stat(src / "meeting.md")) == first.fingerprint
    cache = ArtifactCache(root, store=store)
    assert cache.fingerprint("meeting.md") == first.fingerprint
    second = cache.load("meeting.md")
    assert (cache.parses, cache.disk_loads) == (0, 1)
    assert second.parsed.full_view == first.parsed.full_view
    store.close()
    root.close()


def test_racy_fingerprint_is_not_persisted_until_rehashed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("alpha beta gamma\n" * 50)
    root = SourceRoot.open(str(src))
    store = open_store(tmp_path / "state")
    cache = ArtifactCache(root, store=store)
    fingerprint = cache.fingerprint("a.txt")
    store._flush()
    assert store.fingerprint_get(os.stat(src / "a.txt")) is None  # mtime is within 2 s of the hash
    monkeypatch.setattr(parsed_store, "RACY_NS", 0)  # the file has aged: the next lookup hashes once more
    assert cache.fingerprint("a.txt") == fingerprint
    assert store.fingerprint_get(os.stat(src / "a.txt")) == fingerprint
    store.close()
    root.close()


def test_rewrite_with_restored_mtime_misses_by_ctime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parsed_store, "RACY_NS", 0)
    path = tmp_path / "a.txt"
    path.write_text("one")
    store = open_store(tmp_path / "state")
    before = os.stat(path)
    store.fingerprint_put(before, "x" * 32, before.st_mtime_ns + 10**10)
    time.sleep(0.05)  # past the kernel's coarse timestamp tick, so ctime moves
    path.write_text("two")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)
    assert store.fingerprint_get(before) == "x" * 32
    assert after.st_ctime_ns != before.st_ctime_ns and store.fingerprint_get(after) is None
    store.close()


def _stored(tmp: Path) -> tuple[Path, Reader, Parsed]:
    reader, parsed = _parse(DATA / "pdf" / "papers" / "2020.acl-main.447.pdf")
    store = open_store(tmp / "state")
    store.save("ab" * 16, reader.name, parsed, parse_seconds=1.0)
    store.close()
    entry = store.entries / "ab" / f"{'ab' * 16}.{reader.name}"
    assert entry.is_dir()
    return entry, reader, parsed


def _garble_meta(entry: Path) -> None:
    (entry / "meta.json").write_bytes((entry / "meta.json").read_bytes()[:-40])


def _other_format(entry: Path) -> None:
    meta = json.loads((entry / "meta.json").read_text())
    meta["format"] = serial.FORMAT + 1
    (entry / "meta.json").write_text(json.dumps(meta))


def _rewrite_data(entry: Path, old: str, new: str) -> None:
    """Edit data.json and fix up its size and hash in meta.json, as a deliberate tamperer would."""
    data = (entry / "data.json").read_text()
    assert old in data
    data = data.replace(old, new, 1)
    (entry / "data.json").write_text(data)
    meta = json.loads((entry / "meta.json").read_text())
    meta["files"]["data.json"] = len(data.encode())
    meta["hashes"]["data.json"] = xxhash.xxh3_64_hexdigest(data.encode())
    (entry / "meta.json").write_text(json.dumps(meta))


def _flip_data(entry: Path) -> None:
    data = (entry / "data.json").read_bytes()
    (entry / "data.json").write_bytes(data.replace(b"PageMap", b"PageMaq", 1))


def _truncate_view(entry: Path) -> None:
    with (entry / "full_view.txt").open("r+b") as view:
        view.truncate(100)


def _flip_view(entry: Path) -> None:
    data = bytearray((entry / "full_view.txt").read_bytes())
    data[10] = ord("Z") if data[10] != ord("Z") else ord("Y")
    (entry / "full_view.txt").write_bytes(bytes(data))


DAMAGE: dict[str, Callable[[Path], object]] = {
    "missing npy": lambda e: next(e.glob("a*.npy")).unlink(),
    "truncated npy": lambda e: next(e.glob("a*.npy")).write_bytes(b"\x93NUMPY"),
    "garbled meta": _garble_meta,
    "other format": _other_format,
    "evil class name": lambda e: _rewrite_data(e, "readers.pdf.anchors.PageMap", "subprocess.Popen"),
    "method shadowed": lambda e: _rewrite_data(e, '"shift"', '"scores"'),
    "garbled data": _flip_data,
    "truncated view": _truncate_view,
    "flipped byte in view": _flip_view,
    "missing blob": lambda e: next(e.glob("b*.bin")).unlink(),
    "same-size blob swap": lambda e: _flip_bytes(next(e.glob("b*.bin")), 64),
    "same-size array edit": lambda e: _flip_bytes(max(e.glob("a*.npy"), key=lambda p: p.stat().st_size), -80),
}


def _flip_bytes(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_entry_reads_as_miss_and_is_removed(tmp_path: Path, damage: str) -> None:
    entry, reader, _ = _stored(tmp_path)
    DAMAGE[damage](entry)
    store = open_store(tmp_path / "state")
    assert store.load("ab" * 16, reader.name) is None
    assert not entry.exists() and store.corrupt == 1
    store.close()


def test_unserializable_data_is_not_persisted(store: ParsedStore) -> None:
    store.save("cd" * 16, "text", Parsed("view", "text", {"pattern": re.compile("x")}), parse_seconds=1.0)
    store.save("ce" * 16, "text", Parsed("view", "text", {"ok": [1]}), parse_seconds=0.0)  # too cheap to keep
    store.close()
    assert store.saves == 0 and store.load("cd" * 16, "text") is None and store.load("ce" * 16, "text") is None


def test_store_is_bounded_lru_by_last_use(tmp_path: Path) -> None:
    store = open_store(tmp_path / "state", StoreConfig(max_bytes=60_000))
    view = "x" * 25_000
    for name in ("a", "b"):
        store.save(name * 32, "text", Parsed(view, "text", {}), parse_seconds=1.0)
    store.close()
    store = open_store(tmp_path / "state", StoreConfig(max_bytes=60_000))
    assert store.load("a" * 32, "text") is not None  # a is now more recently used than b
    store.save("c" * 32, "text", Parsed(view, "text", {}), parse_seconds=1.0)
    store.close()
    store = open_store(tmp_path / "state", StoreConfig(max_bytes=60_000))
    present = [n for n in "abc" if store.load(n * 32, "text") is not None]
    store.close()
    assert present == ["a", "c"]


def test_codec_round_trip_of_every_supported_type() -> None:
    view = "the full view " * 100
    value: dict[str, Any] = {
        "tuple": (1, (2, "3"), None), "counter": Counter({"a": 2}), "nan": float("nan"), "inf": -float("inf"),
        "big": 1 << 80, "keys": {(0, 1): [1.5], 3: "x"}, "bytes": b"\x00\xff", "array": np.arange(5, dtype=np.uint64),
        "json": [{"a": [1, 2.5, True, None]}], "heading": Heading(1, "Intro", 3, 40), "view": view,
        "mixed": [(1,), {"k": b"v"}],
    }
    encoded = serial.encode(value, {id(view): "full_view"})
    assert len(encoded.arrays) == 1 and len(encoded.blobs) == 2
    tree = json.loads(json.dumps(encoded.tree))
    back = serial.decode(tree, encoded.arrays.__getitem__, encoded.blobs.__getitem__, {"full_view": view})
    assert back["view"] is view and np.isnan(back.pop("nan")) and np.array_equal(back.pop("array"), value["array"])
    value.pop("nan"), value.pop("array")
    assert back == value and type(back["counter"]) is Counter and type(back["tuple"][1]) is tuple


@pytest.mark.parametrize("tree", [
    {"$t": "obj", "c": "subprocess.Popen", "v": {}},
    {"$t": "obj", "c": "readers.retrieval.segment.Heading", "v": {"title": "x"}},
    {"$t": "nope"}, {"$t": "array", "i": 7}, {"$t": "dict", "pairs": [[[1], 2]]},
])
def test_codec_rejects_what_it_does_not_know(tree: Any) -> None:
    with pytest.raises(serial.Corrupt):
        serial.decode(tree, [].__getitem__, [].__getitem__, {})


def test_codec_refuses_non_whitelisted_objects() -> None:
    for value in (re.compile("x"), np.array([object()]), Path("/"), {"f": len}):
        with pytest.raises(serial.Unserializable):
            serial.encode(value)


def test_damaged_database_starts_afresh(tmp_path: Path) -> None:
    store = open_store(tmp_path / "state")
    store.close()
    (tmp_path / "state" / "index" / "index.sqlite").write_bytes(b"not a database" * 100)
    store = open_store(tmp_path / "state")
    assert store.fingerprint_get(os.stat(tmp_path)) is None
    store.close()


def test_pack_after_remount_is_byte_identical(tmp_path: Path) -> None:
    """Through the Core (no FUSE): a pack served from a stored parse equals the one from a fresh parse."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "paper.pdf").write_bytes((DATA / "pdf" / "papers" / "2020.acl-main.447.pdf").read_bytes())
    os.utime(src / "paper.pdf", ns=(1_600_000_000 * 10**9,) * 2)

    def mount(store: ParsedStore | None) -> tuple[bytes, ArtifactCache]:
        root = SourceRoot.open(str(src))
        stats = Stats(tmp_path / "state" / "log.jsonl")
        core = Core(root, stats, artifacts=ArtifactCache(root, store=store))
        try:
            return read_virtual(core, "/paper.pdf@intent=evaluation results; dataset"), core.artifacts
        finally:
            stats.close()
            root.close()

    fresh, _ = mount(None)
    first = open_store(tmp_path / "state", StoreConfig(min_parse_seconds=0))
    assert mount(first)[0] == fresh
    first.close()
    second = open_store(tmp_path / "state")
    again, cache = mount(second)
    second.close()
    assert (cache.parses, cache.disk_loads) == (0, 1)
    assert again == fresh and b"\n[p" in fresh  # page-anchored passages


def test_a_forged_ledger_row_never_deletes_outside_the_store(tmp_path: Path) -> None:
    victim = tmp_path / "victim.x"
    victim.mkdir()
    store = open_store(tmp_path / "state", StoreConfig(max_bytes=1))
    with store._db_lock, store._db:
        store._db.execute("INSERT INTO parsed VALUES (?, ?, ?, ?)", ("../../../victim", "x", 10**13, 0))
    store.save("ab" * 16, "text", Parsed("v" * 1000, "text", {}), parse_seconds=1.0)  # triggers eviction
    store.close()
    assert victim.is_dir()


def test_the_writer_survives_a_database_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(tmp_path / "state")
    real_flush, failures = store._flush, []

    def flaky_flush() -> None:
        if not failures:
            failures.append(1)
            raise sqlite3.OperationalError("database or disk is full")
        real_flush()

    monkeypatch.setattr(store, "_flush", flaky_flush)
    store.save("ab" * 16, "text", Parsed("v" * 1000, "text", {}), parse_seconds=1.0)
    store.close()
    assert failures and store.failures == 1 and store.saves == 1
    again = open_store(tmp_path / "state")
    assert again.load("ab" * 16, "text") is not None
    again.close()


def test_entries_of_other_reader_code_are_dropped_at_open(tmp_path: Path) -> None:
    store = open_store(tmp_path / "state")
    store.save("ab" * 16, "text", Parsed("v" * 1000, "text", {}), parse_seconds=1.0)
    store.close()
    stale = store.parsed_dir / "0123456789abcdef"
    store.entries.rename(stale)  # what a Reader code change leaves behind
    again = open_store(tmp_path / "state")
    again.close()
    assert not stale.exists() and again.load("ab" * 16, "text") is None
