"""Virtual paths through the operations core, without FUSE (same code the mount runs)."""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from sparsefs.protocol.pack import EvidencePack
from sparsefs.source.rootfs import SourceRoot
from sparsefs.store.stats import Stats
from sparsefs.vfs.core import Core
from tests.conftest import DEMO

REPORT = "annual-report.md"


class FakeBinding:
    """A binding (sparsefs.vfs.binding) as a test drives it: a settable caller, recorded invalidations."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self.invalidated: list[str] = []

    def caller_pid(self) -> int | None:
        return self.pid

    def caller(self) -> None:
        return None  # in process: no caller to check

    def invalidate(self, path: str) -> None:
        self.invalidated.append(path)

    def ready_since(self) -> float | None:
        return None


@pytest.fixture
def binding() -> FakeBinding:
    return FakeBinding()


@pytest.fixture
def core(tmp_path: Path, binding: FakeBinding) -> Iterator[Core]:
    src = tmp_path / "src"
    shutil.copytree(DEMO, src)
    root = SourceRoot.open(str(src))
    stats = Stats(tmp_path / "state" / "log.jsonl")
    yield Core(root, stats, binding=binding)
    stats.close()
    root.close()


def read_virtual(core: Core, path: str) -> bytes:
    """stat, open, read in 4 KiB pieces, release — like cat does."""
    size = core.getattr(path)["st_size"]
    handle = core.open(path, os.O_RDONLY)
    assert handle.direct_io
    chunks, offset = [], 0
    while chunk := core.read(path, 4096, offset, handle.fh):
        chunks.append(chunk)
        offset += len(chunk)
    core.release(path, handle.fh)
    data = b"".join(chunks)
    assert len(data) == size, "stat size must equal the bytes read returns"
    return data


def pack_json(core: Core, path: str) -> EvidencePack:
    return EvidencePack.model_validate(orjson.loads(read_virtual(core, path + "&format=json")))


def test_intent_returns_anchored_evidence_far_smaller_than_the_file(core: Core) -> None:
    pack = pack_json(core, f"/{REPORT}@intent=R&D expenses 2023; headcount at year end")
    assert pack.decision == "sparse" and pack.slots == ["R&D expenses 2023", "headcount at year end"]
    text = " ".join(item.text for item in pack.evidence)
    assert "48.2 million" in text and "1,184" in text
    assert all(c.status in ("matched", "candidate") and c.anchors for c in pack.coverage)
    full = (Path(core_src(core)) / REPORT).read_text()
    for item in pack.evidence:
        assert item.text in full and item.anchor.startswith("L")
    assert pack.exposure.pack_chars < len(full) / 5
    assert pack.exposure.full_view_chars == len(full)


def core_src(core: Core) -> str:
    return os.readlink(f"/proc/self/fd/{core.root.fd}")


def test_rereading_the_same_path_is_not_admitted_again(core: Core) -> None:
    path = f"/{REPORT}@intent=risk factors supply chain"
    first = read_virtual(core, path)
    exposed = core.stats.snapshot()["chars_exposed"]
    assert read_virtual(core, path) == first
    assert core.stats.snapshot()["chars_exposed"] == exposed
    assert core.stats.snapshot()["packs_served"] == 1


def test_refine_never_reexposes_a_span_and_budget_never_exceeds_2l(core: Core) -> None:
    seen: list[tuple[int, int]] = []
    pack = pack_json(core, f"/{REPORT}@intent=robots warehouse customers")
    length = pack.exposure.full_view_chars
    delivered = pack.exposure.pack_chars
    seen.extend(item.span for item in pack.evidence if item.span)
    for round_ in range(60):
        pack = pack_json(core, f"/{REPORT}@refine=robots warehouse customers {round_}")
        delivered += pack.exposure.pack_chars
        if pack.decision != "sparse":
            break
        spans = [item.span for item in pack.evidence if item.span]
        assert not any(a < d and c < b for a, b in spans for c, d in seen), "a span was exposed twice"
        seen.extend(spans)
        assert pack.exposure.episode_exposed <= length
    assert pack.decision in ("fallback", "sparse")
    assert delivered <= 2 * length


def test_small_file_is_native_fit(core: Core) -> None:
    pack = pack_json(core, "/notes.txt@intent=decisions")
    notes = (Path(core_src(core)) / "notes.txt").read_text()
    assert pack.decision == "native-fit" and pack.full_view == notes


def test_scout_is_bounded_and_outside_the_episode_budget(core: Core) -> None:
    pack = pack_json(core, f"/{REPORT}@scout")
    assert pack.decision == "preview" and pack.preview and len(pack.preview) <= 2000
    text = read_virtual(core, f"/{REPORT}@scout").decode()
    assert pack.exposure.episode_exposed == 0 and pack.exposure.pack_chars == len(text) > len(pack.preview)
    assert "Research and development" in pack.preview


def test_full_is_faithful_and_closes_the_episode(core: Core) -> None:
    pack = pack_json(core, f"/{REPORT}@full")
    assert pack.full_view == (Path(core_src(core)) / REPORT).read_text()
    assert "episode-closed" in pack.flags


def test_raw_serves_original_bytes(core: Core) -> None:
    assert read_virtual(core, f"/{REPORT}@raw") == (Path(core_src(core)) / REPORT).read_bytes()


def test_focus_by_lines_and_heading(core: Core) -> None:
    pack = pack_json(core, f"/{REPORT}@focus=L1-3")
    assert pack.evidence[0].lines == (1, 3)
    pack = pack_json(core, f"/{REPORT}@focus=%23Employees and headcount")
    assert "1,184" in pack.evidence[0].text


@pytest.mark.parametrize(
    ("suffix", "expected"),
    [
        ("@frobnicate=x", "unknown action"),
        ("@intent=50%zz", "%"),
        ("@focus=L9000-9100", "lines"),
        ("@focus=#No such heading", "heading"),
    ],
)
def test_bad_requests_read_as_error_packs(core: Core, suffix: str, expected: str) -> None:
    text = read_virtual(core, f"/{REPORT}{suffix}").decode()
    assert ": error: " in text and expected.lower() in text.lower()


def test_intent_on_a_binary_file_is_an_error_pack(core: Core) -> None:
    (Path(core_src(core)) / "blob.bin").write_bytes(bytes(range(256)) * 64)
    text = read_virtual(core, "/blob.bin@intent=anything").decode()
    assert ": error: " in text and "@raw" in text


def test_missing_base_is_enoent(core: Core) -> None:
    with pytest.raises(FileNotFoundError):
        core.getattr("/missing.md@intent=x")


def test_real_name_with_at_sign_wins(core: Core) -> None:
    (Path(core_src(core)) / "a@intent=x").write_text("real file\n")
    assert core.getattr("/a@intent=x")["st_size"] == len("real file\n")


def test_name_at_the_255_byte_limit(core: Core) -> None:
    name = "n" * 251 + ".txt"
    (Path(core_src(core)) / name).write_text("tiny\n" * 2000)
    assert core.getattr(f"/{name}")["st_size"] == 10_000
    assert b"\n[L" in read_virtual(core, f"/{name}@intent=tiny")  # an anchored passage


def test_base_deleted_between_stat_and_read(core: Core) -> None:
    path = f"/{REPORT}@intent=outlook"
    core.getattr(path)
    os.unlink(Path(core_src(core)) / REPORT)
    with pytest.raises(FileNotFoundError):
        core.open(path, os.O_RDONLY)


def test_symlink_out_of_the_root_is_never_served(core: Core, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET " * 1000)
    os.symlink(secret, Path(core_src(core)) / "escape.txt")
    text = read_virtual(core, "/escape.txt@intent=secret").decode()
    assert "TOP-SECRET" not in text and "outside" in text
    raw = read_virtual(core, "/escape.txt@raw").decode()  # an error pack like every other action (issue 25.9)
    assert "TOP-SECRET" not in raw and raw.startswith("escape.txt@raw: error: ") and "outside" in raw
    with pytest.raises(OSError):
        core.getattr("/../secret.txt")


def test_control_tree_is_read_only_and_logs_every_pack(core: Core) -> None:
    read_virtual(core, f"/{REPORT}@intent=gross margin")
    with pytest.raises(OSError) as raised:
        core.open("/.sparsefs/stats.json", os.O_WRONLY)
    assert raised.value.errno == errno.EROFS
    stats = orjson.loads(read_virtual(core, "/.sparsefs/stats.json"))
    assert stats["packs_served"] == 1 and stats["chars_exposed"] > 0
    log = [orjson.loads(line) for line in read_virtual(core, "/.sparsefs/log.jsonl").splitlines()]
    assert log[-1]["action"] == "intent" and log[-1]["decision"] == "sparse" and log[-1]["E"] == log[-1]["exposed"]
    episode_files = [name for name, _, _ in core.readdir("/.sparsefs/episodes") if name.endswith(".json")]
    episode = orjson.loads(read_virtual(core, f"/.sparsefs/episodes/{episode_files[0]}"))
    assert episode["exposed_sparse"] == log[-1]["E"] and episode["objective"] == "gross margin"


def test_virtual_paths_never_appear_in_readdir(core: Core) -> None:
    read_virtual(core, f"/{REPORT}@intent=outlook")
    names = [name for name, _, _ in core.readdir("/")]
    assert not any("@" in name for name in names) and ".sparsefs" not in names  # reachable by name only


def test_change_of_artifact_starts_a_new_episode_and_is_flagged(core: Core) -> None:
    first = pack_json(core, f"/{REPORT}@intent=outlook 2024")
    with open(Path(core_src(core)) / REPORT, "a") as f:
        f.write("\nAn appended paragraph about the outlook for 2024 and beyond.\n")
    core.on_source_change(REPORT)
    second = pack_json(core, f"/{REPORT}@intent=outlook 2024")
    assert second.episode != first.episode and second.fingerprint != first.fingerprint
    assert "artifact-changed-since-last-read" in second.flags


def test_a_second_read_of_the_same_file_does_not_reparse(core: Core) -> None:
    read_virtual(core, f"/{REPORT}@intent=gross margin")
    read_virtual(core, f"/{REPORT}@intent=board of directors")
    read_virtual(core, f"/{REPORT}@scout")
    assert core.artifacts.parses == 1
    with open(Path(core_src(core)) / REPORT, "a") as f:
        f.write("\nmore\n")
    core.on_source_change(REPORT)
    read_virtual(core, f"/{REPORT}@intent=board of directors")
    assert core.artifacts.parses == 2


@pytest.mark.parametrize("name", ["notes.txt@old", "annual-report.md@v2", "notes.txt@2023-01-01"])
def test_names_with_at_that_are_not_requests_can_be_created(core: Core, name: str) -> None:
    with pytest.raises(FileNotFoundError):
        core.getattr(f"/{name}")
    handle = core.create(f"/{name}", os.O_WRONLY, 0o644)
    core.write(f"/{name}", b"kept", 0, handle.fh)
    core.release(f"/{name}", handle.fh)
    assert (Path(core_src(core)) / name).read_bytes() == b"kept"


@pytest.mark.parametrize("suffix", ["@scuot", "@ful", "@intnet=x"])
def test_typos_of_actions_read_as_error_packs(core: Core, suffix: str) -> None:
    assert ": error: " in read_virtual(core, f"/{REPORT}{suffix}").decode()


def test_dotdot_is_never_a_base(core: Core) -> None:
    with pytest.raises(FileNotFoundError):
        core.getattr("/..@intent=x")
    with pytest.raises(FileNotFoundError):
        core.getattr("/.@scout")


def test_stat_alone_does_not_count_as_exposure(core: Core) -> None:
    path = f"/{REPORT}@intent=gross margin"
    for _ in range(4):
        core.getattr(path)
    assert core.stats.snapshot()["packs_served"] == 0
    read_virtual(core, path)
    read_virtual(core, path)
    assert core.stats.snapshot()["packs_served"] == 1


def test_fstat_on_an_open_pack_reports_its_own_size(core: Core) -> None:
    path = f"/{REPORT}@intent=gross margin"
    size = core.getattr(path)["st_size"]
    handle = core.open(path, os.O_RDONLY)
    with open(Path(core_src(core)) / REPORT, "a") as f:
        f.write("\nGross margin will rise.\n")
    core.on_source_change(REPORT)
    assert core.getattr(path, handle.fh)["st_size"] == size
    assert len(core.read(path, 1 << 20, 0, handle.fh)) == size
    core.release(path, handle.fh)


def test_non_utf8_names_never_break_packs_or_the_control_tree(core: Core) -> None:
    name = os.fsdecode(b"caf\xe9.txt")
    (Path(core_src(core)) / name).write_text("The cafe sells coffee. " * 300)
    pack = pack_json(core, f"/{name}@intent=coffee")
    assert pack.artifact == "caf\\xe9.txt"
    ids = [n for n, _, _ in core.readdir("/.sparsefs/episodes") if n.endswith(".json")]
    assert all(orjson.loads(read_virtual(core, f"/.sparsefs/episodes/{i}")) for i in ids)


def test_previews_count_as_exposure_and_error_packs_save_nothing(core: Core) -> None:
    served = read_virtual(core, f"/{REPORT}@scout&format=json").decode()
    stats = core.stats.snapshot()
    assert stats["chars_exposed"] == len(served)  # what the agent read: the whole served pack
    read_virtual(core, f"/{REPORT}@focus=L99999")
    after = core.stats.snapshot()
    assert after["full_read_chars"] == stats["full_read_chars"]


def test_scope_restricts_where_evidence_comes_from(core: Core) -> None:
    pack = pack_json(core, f"/{REPORT}@intent=revenue growth&scope=L1-40")
    assert pack.evidence and all(item.lines and item.lines[1] <= 40 for item in pack.evidence)
    unscoped = pack_json(core, f"/{REPORT}@intent=revenue growth")
    assert any(item.lines and item.lines[0] > 40 for item in unscoped.evidence)
    bad = read_virtual(core, f"/{REPORT}@intent=revenue&scope=L900-950").decode()
    # an inconsistent scope is not an error: the Object Preview shows what the file has, flagged
    assert ": error: " not in bad and " · preview" in bad
    assert "inconsistent-scope" in bad and "L900" in bad


def test_a_batch_that_does_not_fit_falls_back_to_the_full_view_once(core: Core) -> None:
    first = pack_json(core, f"/{REPORT}@intent=robots revenue")
    length = first.exposure.full_view_chars
    lines = (Path(core_src(core)) / REPORT).read_text().count("\n")
    whole = pack_json(core, f"/{REPORT}@focus=L1-{lines}")
    assert whole.decision == "fallback" and whole.full_view is not None and len(whole.full_view) == length
    assert "batch-over-budget" in whole.flags and "episode-closed" in whole.flags
    assert first.exposure.pack_chars + whole.exposure.pack_chars <= 2 * length
    after = pack_json(core, f"/{REPORT}@refine=robots revenue")
    assert after.episode == first.episode and after.decision == "reuse-full-view"  # nothing is sent again
    assert after.full_view is None and not after.evidence
    assert after.exposure.episode_exposed == first.exposure.pack_chars
    new = pack_json(core, f"/{REPORT}@intent=robots revenue growth")
    assert new.episode != first.episode


def test_open_after_an_unannounced_change_makes_the_kernel_ask_again(core: Core, binding: FakeBinding) -> None:
    invalidated = binding.invalidated
    path = f"/{REPORT}@intent=gross margin"
    old_size = core.getattr(path)["st_size"]
    with open(Path(core_src(core)) / REPORT, "a") as f:  # the watcher has not reported this yet
        f.write("\\nGross margin will rise to 40 percent, says the gross margin plan.\\n")
    handle = core.open(path, os.O_RDONLY)
    served = core.read(path, 1 << 20, 0, handle.fh)
    assert path in invalidated and len(served) != old_size
    assert core.getattr(path, handle.fh)["st_size"] == len(served)
    core.release(path, handle.fh)


def test_raw_size_follows_changes_of_its_file(core: Core, binding: FakeBinding) -> None:
    invalidated = binding.invalidated
    assert core.getattr("/notes.txt@raw")["st_size"] == (Path(core_src(core)) / "notes.txt").stat().st_size
    handle = core.open("/notes.txt", os.O_WRONLY | os.O_APPEND)
    core.write("/notes.txt", b"appended\\n", 0, handle.fh)
    core.release("/notes.txt", handle.fh)
    assert "/notes.txt@raw" in invalidated
    assert read_virtual(core, "/notes.txt@raw") == (Path(core_src(core)) / "notes.txt").read_bytes()


def test_a_process_holding_a_pack_sees_its_size_by_path_too(core: Core, binding: FakeBinding) -> None:
    binding.pid = 4242
    path = f"/{REPORT}@intent=gross margin"
    handle = core.open(path, os.O_RDONLY)
    served = core.read(path, 1 << 20, 0, handle.fh)
    with open(Path(core_src(core)) / REPORT, "a") as f:
        f.write("\\nThe gross margin plan adds more gross margin words here.\\n")
    core.on_source_change(REPORT)
    assert core.getattr(path)["st_size"] == len(served)  # fstat arrives as a path getattr
    binding.pid = 7
    assert core.getattr(path)["st_size"] != len(served)  # another process sees the new pack
    core.release(path, handle.fh)


def test_the_selectors_configuration_reaches_json_and_verbose_packs(core: Core) -> None:
    pack = pack_json(core, f"/{REPORT}@intent=revenue growth 2023")
    assert pack.configuration and "p_valid" in pack.configuration
    verbose = read_virtual(core, f"/{REPORT}@intent=revenue growth in 2023&format=verbose").decode()
    compact = read_virtual(core, f"/{REPORT}@intent=growth").decode()
    assert "configuration: " in verbose and "configuration" not in compact
