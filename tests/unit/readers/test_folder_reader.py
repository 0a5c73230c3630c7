"""The Folder Reader: conformance over an in-memory collection, and folders through the Core."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import orjson
import pytest

from readers import folder, registry
from readers.base import Parsed, Reader, ReaderError
from readers.folder import FolderReader, Member
from readers.ops import OPERATIONS
from readers.text import TextReader
from sparsefs.artifacts.cache import ArtifactCache
from sparsefs.protocol.access import Protocol
from sparsefs.protocol.grammar import parse_suffix
from sparsefs.protocol.pack import EvidencePack
from sparsefs.source import collection
from sparsefs.source.rootfs import SourceRoot
from sparsefs.store.stats import Stats
from sparsefs.vfs.core import Core
from tests.reader_conformance import MemorySource, ReaderConformance, Sample

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT.parent / "shared" / "data"


class MemoryCollection:
    """A CollectionSource over {path: bytes}, members parsed by the registry's Readers."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files
        self.name = "mem"

    def members(self) -> tuple[Sequence[Member], int]:
        return [Member(rel, len(data), 0) for rel, data in self.files.items()], 0

    def cached(self, rel: str) -> bool:
        return False

    def parsed(self, rel: str) -> tuple[Reader, Parsed]:
        data = self.files[rel]
        reader = registry.select(rel, data[:8192])
        return reader, reader.parse(MemorySource(rel, data))


def _manifest(files: dict[str, bytes]) -> bytes:
    return orjson.dumps({rel: data.decode() for rel, data in files.items()})


FOLDER = {
    "notes/meeting.md": b"# Meeting\n\nWe agreed the launch date is 14 March.\n\nBudget review moved to Friday.\n",
    "notes/todo.txt": b"buy milk\nfix the flaky test in test_mount\nrenew the TLS certificate before it expires\n",
    "README.md": (ROOT / "README.md").read_bytes(),
    "src/app.py": (
        b'"""App."""\n\n\ndef launch(date: str) -> None:\n    """Start the launch on date."""\n    print(date)\n'
    ),
    "bin.dat": b"\x00\x01\x02binary",
}
_TEXT_FILES = {k: v for k, v in FOLDER.items() if k != "bin.dat"}


class TestFolderConformance(ReaderConformance):
    reader = FolderReader()
    routed = False  # a directory is chosen by stat, never by name (sparsefs.artifacts.cache)
    stored = False  # its parse lives in memory only; its members' parses are stored

    def samples(self) -> list[Sample]:
        return [
            Sample("folder", _manifest(_TEXT_FILES), "launch date"),
            Sample("folder2", _manifest(_TEXT_FILES), "TLS certificate; how to run the tests",
                   ("TLS certificate", "how to run the tests")),
        ]

    def parse(self, sample: Sample) -> Parsed:
        files = {rel: text.encode() for rel, text in orjson.loads(sample.data).items()}
        if sample.name == "folder2":
            files["bin.dat"] = FOLDER["bin.dat"]
        return self.reader.parse_collection(MemoryCollection(files))

    def test_accepts_its_samples(self) -> None:
        assert not self.reader.accepts("folder", b"")  # chosen by the daemon for directories only

    def malformed(self) -> list[tuple[str, bytes]]:
        return [("folder", b"bytes are not a directory")]

    def check_faithful(self, sample: Sample, parsed: Parsed) -> None:
        files = orjson.loads(sample.data)
        for rel, text in files.items():
            assert f"=== {rel} ===\n{text}\n" in parsed.full_view


def test_inventory_lists_every_member_with_kind_size_and_view_length() -> None:
    parsed = FolderReader().parse_collection(MemoryCollection(dict(FOLDER)))
    preview = FolderReader().preview(parsed, 2000)
    assert "folder: 5 files" in preview
    assert "bin.dat · unreadable" in preview
    assert f"notes/todo.txt · text · {len(FOLDER['notes/todo.txt'])} · {len(FOLDER['notes/todo.txt'])}" in preview
    assert len(FolderReader().preview(parsed, 150)) <= 150


def test_intent_reads_the_right_files_with_member_anchors() -> None:
    reader = FolderReader()
    parsed = reader.parse_collection(MemoryCollection(dict(FOLDER)))
    from readers.base import ReadIntent

    batch = reader.locate(parsed, ReadIntent("TLS certificate renewal", ("TLS certificate renewal",)), 800)
    assert batch.items[0].anchor.label.startswith("notes/todo.txt:")
    assert "TLS certificate" in batch.items[0].text
    assert batch.coverage[0].status in ("matched", "candidate")
    focus = reader.focus(parsed, batch.items[0].anchor.label)
    assert "TLS certificate" in focus.items[0].text
    scoped = reader.locate(parsed, ReadIntent("launch", ("launch",), scope="*.py"), 800)
    assert {i.anchor.label.split(":")[0] for i in scoped.items} == {"src/app.py"}


def test_the_budget_goes_to_the_best_file_and_a_match_left_out_is_a_candidate() -> None:
    from readers.base import ReadIntent

    strong = "".join(f"Vaccine trial {i}: the vaccine trial enrolled {i * 100} vaccine trial patients.\n\n"
                     for i in range(12))
    weak = "A short note mentions a trial once.\n\n" + "Unrelated filler about weather and roads.\n\n" * 30
    files = {"a-strong.txt": strong.encode(), "b-weak.txt": weak.encode(), "c-other.txt": b"nothing here\n" * 40}
    reader = FolderReader()
    parsed = reader.parse_collection(MemoryCollection(files))
    batch = reader.locate(parsed, ReadIntent("vaccine trial patients", ("vaccine trial patients",)), 600)
    sent = sum(len(item.text) for item in batch.items)
    assert 0 < sent <= 600
    strong_chars = sum(len(i.text) for i in batch.items if i.anchor.label.startswith("a-strong.txt:"))
    assert strong_chars > 600 // 2  # an even split gave each of the 2 files read 300 at most
    for method in ("lexical", "bm25", "region"):
        scoped = reader.locate(parsed, ReadIntent("vaccine trial", ("vaccine trial",), method=method), 600)
        assert scoped.scope.method.startswith(method)
    slots = ("vaccine trial patients", "weather and roads")  # one file each; the budget holds one passage
    tight = reader.locate(parsed, ReadIntent("; ".join(slots), slots), 75)
    labels = {item.anchor.label for item in tight.items}
    # the one passage sent (the weak file's single 'trial') holds one of three words: no promise for slot 1
    assert [cov.status for cov in tight.coverage] == ["unresolved", "unresolved"], tight.coverage
    assert any(c.startswith("a-strong.txt:") for c in tight.coverage[0].candidates)
    for cov in tight.coverage:
        assert set(cov.anchors) <= labels  # matched only by what was sent
        if cov.status == "unresolved":  # the other file's match, left out by the budget: a candidate
            assert cov.candidates and not any(c in labels for c in cov.candidates)


def test_passage_scores_are_compared_relative_to_their_file() -> None:
    from readers.base import ReadIntent

    notes = ("Meeting notes. " + "The sales figures for the north region were discussed at length. " * 3 + "\n\n") * 20
    table = "region,sales\n" + "".join(f"north,{i}\nsouth,{i * 2}\n" for i in range(200))
    files = {"notes.txt": notes.encode(), "sales.csv": table.encode()}
    reader = FolderReader()
    parsed = reader.parse_collection(MemoryCollection(files))
    batch = reader.locate(parsed, ReadIntent("north region sales figures", ("north region sales figures",)), 1500)
    files_sent = {item.anchor.label.split(":")[0] for item in batch.items}
    assert "notes.txt" in files_sent  # raw scores let the table's larger scale fill the pack with rows


# -- through the Core (what the mount serves) ------------------------------------------


@pytest.fixture
def core(tmp_path: Path) -> Iterator[Core]:
    src = tmp_path / "src"
    (src / "docs").mkdir(parents=True)
    for rel in ("notes/meeting.md", "notes/todo.txt", "src/app.py"):
        (src / "docs" / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / "docs" / rel).write_bytes(FOLDER[rel])
    shutil.copy(DATA / "csv" / "datasets-covid-19" / "reference.csv", src / "docs" / "reference.csv")
    (src / "docs" / ".hidden").write_text("secret launch plan")
    os.symlink("/etc", src / "docs" / "etc-link")
    root = SourceRoot.open(str(src))
    stats = Stats(tmp_path / "state" / "log.jsonl")
    yield Core(root, stats)
    stats.close()
    root.close()


def _pack(core: Core, path: str) -> EvidencePack:
    size = core.getattr(path)["st_size"]
    handle = core.open(path, os.O_RDONLY)
    data = core.read(path, size + 1, 0, handle.fh)
    core.release(path, handle.fh)
    assert len(data) == size
    return EvidencePack.model_validate(orjson.loads(data))


def test_folder_scout_through_the_core(core: Core) -> None:
    pack = _pack(core, "/docs@scout&format=json")
    assert pack.decision in ("preview", "native-fit")
    text = pack.preview or pack.full_view or ""
    assert "notes/todo.txt" in text and "reference.csv" in text
    assert ".hidden" not in text and "etc-link" not in text and "passwd" not in text


def test_folder_intent_through_the_core_and_a_change_makes_a_new_version(core: Core, tmp_path: Path) -> None:
    pack = _pack(core, "/docs@intent=TLS certificate&format=json")
    assert pack.evidence and pack.evidence[0].anchor.startswith("notes/todo.txt:")
    before = pack.fingerprint
    time.sleep(0.01)
    (tmp_path / "src" / "docs" / "notes" / "todo.txt").write_text("nothing about certificates any more\n")
    core.evidence.source_changed("docs/notes/todo.txt")
    after = _pack(core, "/docs@intent=TLS certificate&format=json")
    assert after.fingerprint != before
    assert "renew the TLS" not in " ".join(e.text for e in after.evidence)


def test_member_error_does_not_fail_the_folder() -> None:
    files = dict(FOLDER)
    files["broken.json"] = b"{not json"
    parsed = FolderReader().parse_collection(MemoryCollection(files))
    assert "bin.dat" in FolderReader().preview(parsed, 4000)
    with pytest.raises(ReaderError):
        FolderReader().focus(parsed, "bin.dat")


# -- versions, partial indexes and bounds (review findings) -------------------------------


def _protocol(src: Path) -> tuple[SourceRoot, Protocol]:
    root = SourceRoot.open(str(src))
    return root, Protocol(ArtifactCache(root))


def _serve(protocol: Protocol, rel: str, suffix: str) -> EvidencePack:
    return protocol.serve(rel, parse_suffix(suffix, OPERATIONS)).pack


def test_folders_with_equal_names_sizes_and_mtimes_do_not_share_a_parse(tmp_path: Path) -> None:
    for name, word in (("g", "GGGG"), ("h", "HHHH")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "a.txt").write_text(f"content of {word}\n")
    stamp = os.stat(tmp_path / "g" / "a.txt").st_mtime_ns
    os.utime(tmp_path / "h" / "a.txt", ns=(stamp, stamp))  # as cp -a, tar or rsync -a leave them
    root, protocol = _protocol(tmp_path)
    assert "GGGG" in (_serve(protocol, "g", "full").full_view or "")
    assert "HHHH" in (_serve(protocol, "h", "full").full_view or "")
    root.close()


def test_a_rewrite_keeping_size_and_mtime_reaches_the_folder_once_marked(tmp_path: Path) -> None:
    (tmp_path / "f").mkdir()
    member = tmp_path / "f" / "a.txt"
    member.write_text("version ONE\n")
    root, protocol = _protocol(tmp_path)
    assert "ONE" in (_serve(protocol, "f", "full").full_view or "")
    stamp = os.stat(member).st_mtime_ns
    member.write_text("version TWO\n")
    os.utime(member, ns=(stamp, stamp))
    protocol.artifacts.mark_dirty("f/a.txt")  # what a write through the mount or the watcher does
    assert "TWO" in (_serve(protocol, "f", "full").full_view or "")
    root.close()


def test_a_partial_index_progresses_and_never_outlives_its_episode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(folder, "PARSE_TIME_BUDGET_S", 0.0)  # one member per request
    (tmp_path / "d").mkdir()
    for i in range(3):
        (tmp_path / "d" / f"m{i}.txt").write_text(f"member {i} alpha\n" * 400)
    root, protocol = _protocol(tmp_path)
    first = _serve(protocol, "d", "intent=alpha")
    assert "partial-index" in first.flags
    lengths = [first.exposure.full_view_chars]
    while "partial-index" in (pack := _serve(protocol, "d", "intent=alpha")).flags:
        lengths.append(pack.exposure.full_view_chars)
    lengths.append(pack.exposure.full_view_chars)
    assert lengths == sorted(lengths) and len(set(lengths)) == 3  # one more member each time
    full = _serve(protocol, "d", "full")
    assert full.exposure.full_view_chars == len(full.full_view or "")  # L of this episode is what it delivers
    root.close()


def test_the_walk_stops_stat_ing_at_its_bound_and_counts_what_it_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(collection, "MAX_WALK_ENTRIES", 5)
    for i in range(8):
        (tmp_path / f"f{i}.txt").write_text("x")
    (tmp_path / "node_modules").mkdir()
    root = SourceRoot.open(str(tmp_path))
    listing = collection.walk(root, "")
    assert len(listing.members) == 5 and listing.left_out == 4  # 3 files past the bound + node_modules
    root.close()


def test_exact_operations_do_not_take_over_the_sparse_episode(tmp_path: Path) -> None:
    shutil.copy(DATA / "csv" / "elastic-examples" / "zip_codes.csv", tmp_path / "zip.csv")
    root, protocol = _protocol(tmp_path)
    first = _serve(protocol, "zip.csv", "intent=Boston")
    _serve(protocol, "zip.csv", "count")
    again = _serve(protocol, "zip.csv", "refine=Boston")
    assert again.episode == first.episode
    seen = {e.anchor for e in first.evidence}
    assert not seen & {e.anchor for e in again.evidence}
    root.close()


def test_operation_options_outside_an_operation_are_an_error_pack(tmp_path: Path) -> None:
    shutil.copy(DATA / "csv" / "datasets-covid-19" / "reference.csv", tmp_path / "r.csv")
    root, protocol = _protocol(tmp_path)
    pack = _serve(protocol, "r.csv", "intent=population&where=Country_Region:Germany")
    assert pack.decision == "error" and "&where=" in pack.error.message  # type: ignore[union-attr]
    root.close()


def test_a_reader_bug_is_an_error_pack_not_an_exception(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a.txt").write_text("some words here\n" * 1500)  # 8K-32K: a group the selector reads sparsely

    def broken(*args: object, **kwargs: object) -> None:
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(TextReader, "locate", broken)
    root, protocol = _protocol(tmp_path)
    pack = _serve(protocol, "a.txt", "intent=words")
    assert pack.decision == "error" and "ZeroDivisionError" in pack.error.message  # type: ignore[union-attr]
    root.close()


def test_members_past_the_bound_are_flagged_and_named_in_focus_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(folder, "MAX_MEMBERS", 2)
    files = {f"f{i}.txt": f"file {i} mentions launch\n".encode() for i in range(4)}
    reader = FolderReader()
    parsed = reader.parse_collection(MemoryCollection(files))
    from readers.base import ReadIntent

    batch = reader.locate(parsed, ReadIntent("launch", ("launch",)), 800)
    assert any(flag.startswith("folder-bound: 2 entries") for flag in batch.flags)
    with pytest.raises(ReaderError, match="past the folder bound"):
        reader.focus(parsed, "f3.txt")


def test_next_steps_of_a_folder_pack_resolve_as_written(core: Core) -> None:
    pack = _pack(core, "/docs@intent=TLS certificate&format=json")
    focus = next(step for step in pack.next_steps if step.startswith("@focus="))  # appended to the path read
    assert "/" not in focus  # a member path inside a name is written %2F
    again = _pack(core, "/docs" + focus + "&format=json")
    assert again.decision in ("sparse", "fallback", "native-fit") and "TLS" in (
        " ".join(e.text for e in again.evidence) + (again.full_view or ""))
