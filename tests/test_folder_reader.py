"""The Folder Reader: conformance over an in-memory collection, and folders through the Core."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import orjson
import pytest

from readers import registry
from readers.base import Parsed, Reader, ReaderError
from readers.folder import FolderReader, Member
from sparsefs.core import Core
from sparsefs.pack import EvidencePack
from sparsefs.rootfs import SourceRoot
from sparsefs.stats import Stats
from tests.reader_conformance import MemorySource, ReaderConformance, Sample

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"


class MemoryCollection:
    """A CollectionSource over {path: bytes}, members parsed by the registry's Readers."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files
        self.name = "mem"

    def members(self) -> tuple[Sequence[Member], int]:
        return [Member(rel, len(data), 0) for rel, data in self.files.items()], 0

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
    assert batch.coverage[0].status == "matched"
    focus = reader.focus(parsed, batch.items[0].anchor.label)
    assert "TLS certificate" in focus.items[0].text
    scoped = reader.locate(parsed, ReadIntent("launch", ("launch",), scope="*.py"), 800)
    assert {i.anchor.label.split(":")[0] for i in scoped.items} == {"src/app.py"}


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
