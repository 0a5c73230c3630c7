"""The Read Intent Protocol through the core: session intent, actions, episodes, persistence, concurrency."""

from __future__ import annotations

import os
import re
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparsefs.artifacts.cache import ArtifactCache
from sparsefs.protocol.episodes import ID_CHARS, episode_id
from sparsefs.protocol.pack import EvidencePack
from sparsefs.source.rootfs import SourceRoot
from sparsefs.store.parsed import open_store
from sparsefs.store.state import StateDB, StateDirBusy, StateLock, read_episodes
from sparsefs.store.stats import Stats
from sparsefs.vfs.core import Core
from tests.conftest import DEMO
from tests.unit.vfs.test_core_virtual import pack_json, read_virtual

REPORT = "annual-report.md"


class Mounted:
    """A core over a copy of the demo workspace with a state directory: one 'mount'."""

    def __init__(self, tmp: Path, session_intent: str | None = None) -> None:
        self.src, self.state_dir = tmp / "src", tmp / "state"
        if not self.src.exists():
            shutil.copytree(DEMO, self.src)
        self.root = SourceRoot.open(str(self.src))
        self.stats = Stats(self.state_dir / "log.jsonl")
        self.state = StateDB.in_dir(self.state_dir)
        self.store = open_store(self.state_dir)
        artifacts = ArtifactCache(self.root, store=self.store)
        self.core = Core(self.root, self.stats, state=self.state, session_intent=session_intent, artifacts=artifacts)

    def close(self) -> None:
        self.store.close()
        self.stats.close()
        self.state.close()
        self.root.close()


@pytest.fixture
def mounted(tmp_path: Path) -> Iterator[Mounted]:
    m = Mounted(tmp_path)
    yield m
    m.close()


def write_control(core: Core, path: str, data: bytes, flags: int = os.O_WRONLY | os.O_TRUNC) -> None:
    handle = core.open(path, flags)
    core.write(path, data, 0, handle.fh)
    core.release(path, handle.fh)


def spans_of(pack: EvidencePack) -> list[tuple[int, int]]:
    return [item.span for item in pack.evidence if item.span]


# ---- session intent ------------------------------------------------------------------


def test_session_file_is_written_read_and_persisted(tmp_path: Path) -> None:
    m = Mounted(tmp_path)
    assert m.core.getattr("/.sparsefs/session")["st_mode"] & 0o200
    write_control(m.core, "/.sparsefs/session", b"R&D spending\n\n")
    assert read_virtual(m.core, "/.sparsefs/session") == b"R&D spending\n"
    m.close()
    again = Mounted(tmp_path)  # a remount keeps the session intent
    assert read_virtual(again.core, "/.sparsefs/session") == b"R&D spending\n"
    again.core.truncate("/.sparsefs/session", 0)
    assert read_virtual(again.core, "/.sparsefs/session") == b""
    again.close()
    assert Mounted(tmp_path, session_intent="headcount").core.protocol.session.text == "headcount"


def test_session_file_behaves_like_one_file_for_every_writer(mounted: Mounted) -> None:
    core, path = mounted.core, "/.sparsefs/session"
    write_control(core, path, b"revenue growth in Europe\n")
    core.truncate(path, 0)  # what the kernel sends for 'echo debt >' without atomic O_TRUNC
    write_control(core, path, b"debt\n", os.O_WRONLY)
    assert read_virtual(core, path) == b"debt\n"
    first = core.open(path, os.O_WRONLY | os.O_APPEND)
    second = core.open(path, os.O_WRONLY | os.O_APPEND)
    core.write(path, b" alpha", 0, first.fh)  # both append at the end, whatever offset they carry
    core.write(path, b" beta", 0, second.fh)
    core.release(path, first.fh)
    assert read_virtual(core, path) == b"debt\n"  # the last writer has not closed yet
    core.release(path, second.fh)
    assert read_virtual(core, path) == b"debt alpha beta\n"
    handle = core.open(path, os.O_WRONLY | os.O_TRUNC)
    core.write(path, b"x" * 9000, 0, handle.fh)  # longer than any session: cut, not wiped
    core.write(path, b"\x00tail", 9000, handle.fh)
    core.release(path, handle.fh)
    assert read_virtual(core, path) == b"x" * 2000 + b"\n"
    write_control(core, path, b"gap\x00\x00here \xff\xfe")
    assert read_virtual(core, path) == b"gap here\n"


def test_bare_intent_reads_the_session_intent(mounted: Mounted) -> None:
    bare = pack_json(mounted.core, f"/{REPORT}@intent")
    assert bare.decision == "preview" and "underspecified-intent" in bare.flags
    write_control(mounted.core, "/.sparsefs/session", b"R&D expenses")
    used = pack_json(mounted.core, f"/{REPORT}@intent")
    assert used.decision == "sparse" and "session-intent-used" in used.flags
    assert used.intent == "R&D expenses" and used.session_intent == "R&D expenses"
    assert any("48.2 million" in item.text for item in used.evidence)


def test_session_context_reranks_but_the_access_intent_wins(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    filler = "Unrelated paragraph about weather and sailing boats in the harbor. " * 30
    paragraphs = [f"Revenue in fiscal {year} was {amount} million dollars overall." for year, amount in
                  (("2019", 11), ("2020", 12), ("2021", 13), ("2022", 14))]
    (src / "r.md").write_text("\n\n".join(p + "\n\n" + filler for p in paragraphs))
    m = Mounted(tmp_path, session_intent="fiscal 2021 figures")
    ranked = pack_json(m.core, "/r.md@intent=revenue&k=1")
    assert "session-context" in ranked.flags and "2021" in ranked.evidence[0].text
    access_wins = pack_json(m.core, "/r.md@intent=revenue 2020&k=1")
    assert "2020" in access_wins.evidence[0].text
    m.close()


# ---- actions ---------------------------------------------------------------------------


def test_collect_gives_every_slot_evidence_where_intent_may_not(mounted: Mounted) -> None:
    need = "revenue growth revenue segments revenue; Lantern; staff turnover"
    ranked = pack_json(mounted.core, f"/{REPORT}@intent={need}&budget=400")
    assert any(cov.status == "unresolved" for cov in ranked.coverage)  # the strong slot took the budget
    collected = pack_json(mounted.core, f"/{REPORT}@collect={need}&budget=400")
    assert {j for item in collected.evidence for j in item.slots} == {0, 1, 2}
    for cov in collected.coverage:
        shown = {item.anchor for item in collected.evidence}
        assert cov.status in ("matched", "candidate") and set(cov.anchors) <= shown


def test_verify_finds_supporting_and_contradicting_passages(mounted: Mounted) -> None:
    wrong = pack_json(mounted.core, f"/{REPORT}@verify=R%26D expenses were $52.5 million in 2023")
    assert wrong.evidence and {item.stance for item in wrong.evidence} == {"contradicting"}
    assert any("48.2" in item.text for item in wrong.evidence)
    assert [c.status for c in wrong.coverage] == ["unresolved", "matched"]
    assert [c.slot.split(":")[0] for c in wrong.coverage] == ["supporting", "contradicting"]
    true = pack_json(mounted.core, f"/{REPORT}@verify=R%26D expenses were $48.2 million in 2023")
    assert true.episode == wrong.episode  # verify continues the episode: the passage is cited, not re-sent
    assert true.coverage[0].status == "matched" and true.coverage[0].earlier
    assert not {i.anchor for i in true.evidence} & set(true.coverage[0].earlier)
    text = read_virtual(mounted.core, f"/{REPORT}@verify=R%26D expenses were $52.5 million").decode()
    assert "supporting: " in text and "; earlier " in text


def test_verify_cites_passages_the_episode_already_delivered(mounted: Mounted) -> None:
    first = pack_json(mounted.core, f"/{REPORT}@intent=R%26D expenses 2023")
    held = {item.anchor for item in first.evidence if "48.2" in item.text}
    assert held
    checked = pack_json(mounted.core, f"/{REPORT}@verify=R%26D expenses were $48.2 million in 2023")
    assert checked.episode == first.episode
    assert held <= set(checked.coverage[0].earlier) and not held & {i.anchor for i in checked.evidence}
    assert checked.coverage[0].status == "matched"


def test_inconsistent_scope_gets_the_preview_with_a_flag(mounted: Mounted) -> None:
    pack = pack_json(mounted.core, f"/{REPORT}@intent=revenue&scope=L5000-6000")
    assert pack.decision == "preview" and "inconsistent-scope" in pack.flags and pack.preview
    assert "L5000" in pack.scope.note and pack.episode is None


def test_stopword_intent_is_underspecified(mounted: Mounted) -> None:
    pack = pack_json(mounted.core, f"/{REPORT}@intent=what is the")
    assert pack.decision == "preview" and "underspecified-intent" in pack.flags


# ---- episodes --------------------------------------------------------------------------


def test_fallback_closes_and_retires_earlier_observations(mounted: Mounted) -> None:
    first = pack_json(mounted.core, f"/{REPORT}@intent=revenue")
    lines = (mounted.src / REPORT).read_text().count("\n")
    big = pack_json(mounted.core, f"/{REPORT}@focus=L1-{lines}")
    assert big.decision == "fallback" and big.episode == first.episode
    assert "earlier-evidence-retired" in big.flags and "episode-closed" in big.flags
    episode = mounted.core.protocol.episodes.get(first.episode or "")
    assert episode is not None and episode.retired and episode.closed
    within = pack_json(mounted.core, f"/{REPORT}@refine=headcount")  # the agent holds the full view
    assert within.decision == "reuse-full-view" and within.episode == first.episode
    assert within.exposure.artifact_chars == 0 and not within.evidence and within.full_view is None
    assert "full-view-delivered-earlier" in within.flags and within.coverage[0].earlier
    fresh = pack_json(mounted.core, f"/{REPORT}@intent=headcount")  # a new objective: a new episode
    assert fresh.episode != first.episode and fresh.decision == "sparse"


def test_a_changed_file_closes_its_episode_and_starts_another(mounted: Mounted) -> None:
    first = pack_json(mounted.core, f"/{REPORT}@intent=revenue")
    with open(mounted.src / REPORT, "a") as f:
        f.write("\nRevenue note appended later.\n")
    mounted.core.on_source_change(REPORT)
    second = pack_json(mounted.core, f"/{REPORT}@refine=revenue")
    assert second.episode != first.episode and "artifact-changed-since-last-read" in second.flags
    old = mounted.core.protocol.episodes.get(first.episode or "")
    assert old is not None and old.closed and old.close_reason.startswith("artifact changed")


def test_episodes_and_packs_survive_a_remount(tmp_path: Path) -> None:
    m = Mounted(tmp_path)
    first_bytes = read_virtual(m.core, f"/{REPORT}@intent=revenue")
    first = pack_json(m.core, f"/{REPORT}@intent=revenue")
    episode = m.core.protocol.episodes.get(first.episode or "")
    assert episode is not None
    exposed = episode.budget.sparse_exposed
    m.close()
    m = Mounted(tmp_path)  # remount
    assert read_virtual(m.core, f"/{REPORT}@intent=revenue") == first_bytes  # frozen, not admitted again
    restored = m.core.protocol.episodes.get(first.episode or "")
    assert restored is not None and restored.budget.sparse_exposed == exposed
    refined = pack_json(m.core, f"/{REPORT}@refine=revenue")
    assert refined.episode == first.episode
    delivered = spans_of(first)
    assert all(e <= s2 or e2 <= s for s, e in spans_of(refined) for s2, e2 in delivered)
    listed = {e["id"] for e in read_episodes(m.state_dir)}
    assert first.episode in listed and f"{first.episode}.json" in m.core.control.listdir("episodes")
    m.close()


def test_a_new_mount_numbers_episodes_after_the_saved_ones(tmp_path: Path) -> None:
    m = Mounted(tmp_path)
    first = pack_json(m.core, f"/{REPORT}@intent=revenue")
    m.close()
    m = Mounted(tmp_path)
    other = pack_json(m.core, f"/{REPORT}@intent=headcount")
    numbers = {e["id"]: e["number"] for e in read_episodes(tmp_path / "state")}
    assert other.episode != first.episode and numbers[str(other.episode)] > numbers[str(first.episode)]
    m.close()


def test_an_episode_id_is_the_objectives_not_a_count_of_what_came_before() -> None:
    """The same objective opens the same id on any mount; its next episode (the first one closed) another."""
    taken: set[str] = set()
    first = episode_id("a.md", "f1", "revenue", taken.__contains__)
    assert first == episode_id("a.md", "f1", "revenue", lambda _: False) and len(first) == 1 + ID_CHARS
    taken.add(first)
    again = episode_id("a.md", "f1", "revenue", taken.__contains__)
    assert again != first and again.startswith("e")
    assert episode_id("a.md", "f2", "revenue", lambda _: False) != first  # another version


def test_a_damaged_state_file_is_moved_aside(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "state.sqlite").write_bytes(b"not a database at all" * 100)
    m = Mounted(tmp_path)
    assert pack_json(m.core, f"/{REPORT}@intent=revenue").decision == "sparse"
    assert any(p.name.startswith("state.sqlite.damaged-") for p in state.iterdir())
    m.close()


# ---- concurrency -----------------------------------------------------------------------


def _read_open(core: Core, path: str) -> bytes:
    """stat, open, then read as much as the open handle says (fstat): a pack built at lookup is built again at
    open when another pack of its artifact was charged in between, as the kernel's open then re-asks its size."""
    core.getattr(path)
    handle = core.open(path, os.O_RDONLY)
    size = core.getattr(None, handle.fh)["st_size"]
    data = core.read(path, size + 1, 0, handle.fh)
    core.release(path, handle.fh)
    assert len(data) == size
    return data


def test_concurrent_readers_never_lose_an_update_or_charge_a_pack_twice(mounted: Mounted) -> None:
    core, served = mounted.core, []
    original = core.protocol.serve

    def counting(rel: str, request: object, session: str | None = None, deferred: bool = False) -> object:
        served.append((rel, request))
        return original(rel, request, session, deferred)  # type: ignore[arg-type]

    core.protocol.serve = counting  # type: ignore[method-assign,assignment]
    paths = [f"/{REPORT}@intent=revenue"] + [f"/{REPORT}@refine={w}" for w in ("staff", "Lantern", "margin")]
    errors: list[BaseException] = []

    def reader(n: int) -> None:
        try:
            for path in paths[n % 2 :] + paths[: n % 2]:
                _read_open(core, path)
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=reader, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors and len(served) >= len(paths)  # a pack built before another was charged is built again
    logged = mounted.stats.log_path.read_text().splitlines()
    assert len(logged) == len(paths)  # but each path is charged and logged exactly once
    texts = [read_virtual(core, p).decode() for p in paths]  # frozen: the same bytes again
    shown: dict[str, list[int]] = {}  # which pack opened the episode depends on arrival order
    for text in texts:  # E counts every character of each pack
        shown.setdefault(_field(r"^\S+@\w+ (e[0-9a-z]+) ", text), []).append(len(text))
    for opened, sizes in shown.items():
        episode = core.protocol.episodes.get(opened)
        assert episode is not None and episode.budget.sparse_exposed == sum(sizes) and episode.reads == len(sizes)


def _field(pattern: str, text: str) -> str:
    found = re.search(pattern, text)
    assert found is not None, pattern
    return found.group(1)


def test_old_closed_episodes_are_pruned_but_open_ones_stay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sparsefs.store import state as state_module

    monkeypatch.setattr(state_module, "MAX_EPISODES_KEPT", 3)
    db = StateDB.in_dir(tmp_path)
    for n in range(1, 8):
        db.save_episode({"id": f"e{n}", "artifact_rel": "a.txt", "n": n}, is_open=n == 1)
    db.close()
    db = StateDB.in_dir(tmp_path)  # pruning happens when a mount opens the state
    assert [r["id"] for r, _ in db.load_episodes()] == ["e1", "e5", "e6", "e7"]
    db.close()


# ---- review findings -------------------------------------------------------------------


def test_same_size_rewrite_with_the_old_mtime_is_a_new_version(mounted: Mounted) -> None:
    path = mounted.src / "notes.txt"
    before = pack_json(mounted.core, "/notes.txt@full")
    st = path.stat()
    path.write_text(path.read_text().replace("a", "b", 1))  # same size
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # what cp -p or touch -d leave behind
    after = pack_json(mounted.core, "/notes.txt@full")  # no watcher event: only stat can tell
    assert after.fingerprint != before.fingerprint and after.full_view != before.full_view


def test_the_same_bytes_under_two_extensions_are_two_artifacts(mounted: Mounted) -> None:
    code = "def handler(event):\n    return event\n" * 150
    (mounted.src / "a.py").write_text(code)
    (mounted.src / "a.rb").write_text(code)
    py = read_virtual(mounted.core, "/a.py@scout").decode()
    rb = read_virtual(mounted.core, "/a.rb@scout").decode()
    assert "python source:" in py and "ruby source:" in rb


def test_a_failing_state_database_never_fails_a_read(mounted: Mounted) -> None:
    mounted.state._db.close()  # every later statement raises sqlite3.ProgrammingError
    pack = pack_json(mounted.core, f"/{REPORT}@intent=revenue")
    assert pack.decision == "sparse"


def test_after_the_full_view_verify_also_points_into_it(mounted: Mounted) -> None:
    first = pack_json(mounted.core, f"/{REPORT}@full")
    checked = pack_json(mounted.core, f"/{REPORT}@verify=R%26D expenses were $48.2 million in 2023")
    assert checked.decision == "reuse-full-view" and checked.episode == first.episode
    assert checked.exposure.artifact_chars == 0 and checked.coverage[0].earlier


def test_a_remount_remembers_closed_episodes_and_folder_packs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sparsefs.store import parsed as parsed_store

    monkeypatch.setattr(parsed_store, "RACY_NS", 0)  # files copied just now may be persisted (racy rule off)
    m = Mounted(tmp_path)
    first = pack_json(m.core, f"/{REPORT}@full")
    folder = read_virtual(m.core, "/src@intent=forecast model")
    m.close()
    with open(tmp_path / "src" / "notes.txt", "a") as f:
        f.write("changed while unmounted\n")
    m = Mounted(tmp_path)
    within = pack_json(m.core, f"/{REPORT}@refine=revenue segments")
    assert within.decision == "reuse-full-view" and within.episode == first.episode
    assert read_virtual(m.core, "/src@intent=forecast model") == folder  # frozen: not admitted again
    m.close()


def test_a_second_mount_cannot_share_the_state_directory(tmp_path: Path) -> None:
    first, second = StateLock(tmp_path), StateLock(tmp_path)
    first.acquire()
    with pytest.raises(StateDirBusy, match=str(os.getpid())):
        second.acquire()
    first.release()
    second.acquire()
    second.release()


def test_bare_collect_reads_the_session_intent(mounted: Mounted) -> None:
    assert pack_json(mounted.core, f"/{REPORT}@collect").decision == "preview"
    write_control(mounted.core, "/.sparsefs/session", b"R&D expenses; headcount")
    pack = pack_json(mounted.core, f"/{REPORT}@collect")
    assert pack.decision == "sparse" and pack.slots == ["R&D expenses", "headcount"]
