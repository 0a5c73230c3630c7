"""The guard policy without a mount: who is guarded, what is carded, once per path, fail open."""

from __future__ import annotations

import io
import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from sparsefs.app import cli
from sparsefs.artifacts.cache import Artifact, ArtifactCache
from sparsefs.guard import policy as guard_module
from sparsefs.guard.card import END, MARK, describe, render_card
from sparsefs.guard.policy import Guard, GuardConfig, parse_kinds
from sparsefs.guard.proc import ProcessTree
from sparsefs.protocol.access import Protocol
from sparsefs.source.rootfs import SourceRoot
from sparsefs.store.stats import Stats

BIG = "".join(f"Line {n}: the committee discussed revenue, staffing and the R&D budget.\n" for n in range(600))


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A live child process named 'sleep' to stand for a guarded caller."""
    child = subprocess.Popen(["sleep", "60"])
    try:
        yield child
    finally:
        child.kill()
        child.wait()


@pytest.fixture
def cat_child() -> Iterator[subprocess.Popen[bytes]]:
    """A live child named 'cat' (a display tool), waiting on its stdin."""
    child = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    try:
        yield child
    finally:
        child.kill()
        child.wait()


class Setup:
    def __init__(self, tmp: Path, config: GuardConfig) -> None:
        self.src = tmp / "src"
        self.src.mkdir(exist_ok=True)
        self.root = SourceRoot.open(str(self.src))
        self.stats = Stats(tmp / "state" / "log.jsonl")
        self.protocol = Protocol(ArtifactCache(self.root))
        self.guard = Guard(config, self.root, self.protocol, self.stats, "/mnt/ws")

    def write(self, rel: str, text: str, mode: int = 0o644) -> str:
        path = self.src / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(mode)
        return rel

    def close(self) -> None:
        self.guard.close()
        self.stats.close()
        self.root.close()


@pytest.fixture
def by_name(tmp_path: Path) -> Iterator[Setup]:
    """Processes named 'sleep' are guarded roots."""
    setup = Setup(tmp_path, GuardConfig(comms=frozenset({"sleep"})))
    yield setup
    setup.close()


@pytest.fixture
def at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """No same-process grace: the next open by the same process is a new read."""
    monkeypatch.setattr(guard_module, "REOPEN_S", 0.0)


def test_a_cold_card_is_built_without_a_parse_then_the_bytes(
    by_name: Setup, sleeper: subprocess.Popen[bytes], at_once: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    rel = by_name.write("notes/minutes.md", BIG)
    load = by_name.protocol.artifacts.load

    def slow(rel: str) -> Artifact:
        time.sleep(0.5)
        return load(rel)

    monkeypatch.setattr(by_name.protocol.artifacts, "load", slow)
    start = time.monotonic()
    card = by_name.guard.card(rel, os.O_RDONLY, sleeper.pid)
    assert card is not None and time.monotonic() - start < 0.4  # the parse is warmed in the background
    text = card.content.decode()
    assert text.startswith(MARK) and text.endswith(END + "\n") and f"up to {len(BIG):,} characters" in text
    assert "'/mnt/ws/notes/minutes.md@intent=" in text and "@raw" in text and "@full" in text
    assert "Line 0:" in text  # the head of the file as its preview
    assert card.attrs["st_size"] == len(BIG) > len(card.content)  # stat stays the file's
    assert by_name.guard.card(rel, os.O_RDONLY, sleeper.pid) is None  # insisted: the bytes
    assert by_name.guard.card(rel, os.O_RDONLY, sleeper.pid) is None  # and from then on
    assert by_name.guard.drain()
    counters = by_name.stats.snapshot()
    assert counters["guard_cards"] == 1 and counters["guard_insisted_reads"] == 1
    assert counters["guard_plain_reads"] == 3 and counters["chars_exposed"] == len(text) + len(BIG)
    (episode,) = by_name.protocol.episodes.all()
    assert episode.budget.full_view_delivered and episode.closed and episode.artifact == rel
    card_line, insisted = map(json.loads, by_name.stats.log_path.read_text().splitlines())
    assert (card_line["decision"], card_line["L"], card_line["exposed"], card_line["comm"]) == (
        "guard-card",
        len(BIG),
        len(text),
        "sleep",
    )
    assert insisted["decision"] == "insisted" and insisted["episode"] == episode.id
    assert card_line["artifact"] == insisted["artifact"] == rel and card_line["fingerprint"] == insisted["fingerprint"]


def test_a_parsed_file_gets_its_exact_length_and_preview(by_name: Setup, sleeper: subprocess.Popen[bytes]) -> None:
    rel = by_name.write("minutes.md", BIG)
    by_name.protocol.artifacts.load(rel)
    card = by_name.guard.card(rel, os.O_RDONLY, sleeper.pid)
    assert card is not None and f"{len(BIG):,} characters of text" in card.content.decode()


def test_a_path_is_carded_once_in_a_mount_whatever_its_version(
    by_name: Setup, sleeper: subprocess.Popen[bytes], at_once: None
) -> None:
    rel = by_name.write("minutes.md", BIG)
    assert by_name.guard.card(rel, os.O_RDONLY, sleeper.pid) is not None
    by_name.write(rel, BIG + "one more line\n")
    assert by_name.guard.card(rel, os.O_RDONLY, sleeper.pid) is None
    assert by_name.guard.card(rel, os.O_RDONLY, sleeper.pid) is None
    assert by_name.stats.snapshot()["guard_insisted_reads"] == 1


def test_a_written_path_is_never_carded(by_name: Setup, sleeper: subprocess.Popen[bytes]) -> None:
    rel = by_name.write("minutes.md", BIG)
    by_name.guard.written(rel)
    assert by_name.guard.card(rel, os.O_RDONLY, sleeper.pid) is None
    assert by_name.stats.snapshot()["guard_insisted_reads"] == 0


def test_the_same_process_gets_the_card_again_for_a_moment(
    by_name: Setup, sleeper: subprocess.Popen[bytes], cat_child: subprocess.Popen[bytes]
) -> None:
    rel = by_name.write("minutes.md", BIG)
    first = by_name.guard.card(rel, os.O_RDONLY, sleeper.pid)
    again = by_name.guard.card(rel, os.O_RDONLY, sleeper.pid)  # a harness that sniffs, then reads
    assert first is not None and again is not None and again.content == first.content
    counters = by_name.stats.snapshot()
    assert counters["guard_cards"] == 1 and counters["guard_insisted_reads"] == 0


def test_a_version_that_got_the_bytes_keeps_them(
    by_name: Setup, sleeper: subprocess.Popen[bytes], at_once: None
) -> None:
    """Plain text in .html: the cheap estimate says short; the exact L (parsed later) would say long."""
    rel = by_name.write("page.html", BIG[:40_000])
    assert by_name.guard.card(rel, os.O_RDONLY, sleeper.pid) is None
    assert len(by_name.protocol.artifacts.load(rel).parsed.full_view) > 16_000
    assert by_name.guard.card(rel, os.O_RDONLY, sleeper.pid) is None


@pytest.mark.parametrize(
    ("rel", "text", "mode"),
    [
        ("small.md", "a short note\n", 0o644),
        ("tool.py", BIG, 0o644),  # code is not a guarded kind
        ("run.md", BIG, 0o755),  # executable
        ("script.txt", "#!/bin/sh\n" + BIG, 0o644),  # a script whatever its name
        (".git/description.txt", BIG, 0o644),  # hidden directory
        ("node_modules/pkg/README.md", BIG, 0o644),
        ("package-lock.json", '{"a": "' + BIG.replace("\n", " ") + '"}', 0o644),
    ],
)
def test_never_carded(by_name: Setup, sleeper: subprocess.Popen[bytes], rel: str, text: str, mode: int) -> None:
    by_name.write(rel, text, mode)
    assert by_name.guard.card(rel, os.O_RDONLY, sleeper.pid) is None
    assert by_name.stats.snapshot()["guard_fail_open"] == 0


def test_writes_and_unguarded_processes_get_the_file(by_name: Setup, sleeper: subprocess.Popen[bytes]) -> None:
    rel = by_name.write("minutes.md", BIG)
    assert by_name.guard.card(rel, os.O_RDWR, sleeper.pid) is None
    other = subprocess.Popen(["sh", "-c", "read x"], stdin=subprocess.PIPE)
    try:
        assert by_name.guard.card(rel, os.O_RDONLY, other.pid) is None
    finally:
        other.kill()
        other.wait()
    assert by_name.guard.card(rel, os.O_RDONLY, None) is None
    assert by_name.stats.snapshot()["guard_plain_reads"] == 0  # neither was a guarded read
    assert by_name.guard.card(rel, os.O_RDONLY, sleeper.pid) is not None  # the card was still unspent


def test_in_a_guarded_tree_other_tools_and_unseen_output_get_the_bytes(
    tmp_path: Path, sleeper: subprocess.Popen[bytes], cat_child: subprocess.Popen[bytes]
) -> None:
    setup = Setup(tmp_path, GuardConfig(pids=frozenset({os.getpid()})))
    try:
        rel = setup.write("minutes.md", BIG)
        assert setup.guard.card(rel, os.O_RDONLY, sleeper.pid) is None  # a descendant, but not a display tool
        assert setup.guard.card(rel, os.O_RDONLY, cat_child.pid) is None  # cat, but its output goes nowhere
        assert setup.guard.card(rel, os.O_RDONLY, os.getpid()) is None  # the daemon's own opens
        assert setup.stats.snapshot()["guard_plain_reads"] == 2
    finally:
        setup.close()


def test_kinds_and_threshold_are_configurable(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    setup = Setup(tmp_path, GuardConfig(comms=frozenset({"sleep"}), threshold=len(BIG), kinds=parse_kinds("text")))
    try:
        assert setup.guard.card(setup.write("minutes.md", BIG), os.O_RDONLY, sleeper.pid) is None
        assert setup.guard.card(setup.write("longer.md", BIG + "x\n"), os.O_RDONLY, sleeper.pid) is not None
        assert setup.guard.card(setup.write("data.log", BIG + "x\n"), os.O_RDONLY, sleeper.pid) is None
    finally:
        setup.close()
    with pytest.raises(ValueError, match="unknown guard kinds"):
        parse_kinds("text,code")


def test_a_card_is_never_longer_than_the_file(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    setup = Setup(tmp_path, GuardConfig(comms=frozenset({"sleep"}), threshold=10))
    try:
        assert setup.guard.card(setup.write("short.md", "x" * 300 + "\n"), os.O_RDONLY, sleeper.pid) is None
    finally:
        setup.close()


def test_errors_fail_open_and_stay_bytes(
    by_name: Setup, sleeper: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    rel = by_name.write("minutes.md", BIG)

    def broken(*args: object) -> None:
        raise RuntimeError("probe bug")

    monkeypatch.setattr(guard_module, "probe", broken)
    assert by_name.guard.card(rel, os.O_RDONLY, sleeper.pid) is None
    monkeypatch.undo()
    assert by_name.guard.card(rel, os.O_RDONLY, sleeper.pid) is None  # this version was decided: bytes
    assert by_name.stats.snapshot()["guard_fail_open"] == 1


def test_a_refused_card_serves_the_bytes_and_is_not_counted(by_name: Setup, sleeper: subprocess.Popen[bytes]) -> None:
    """The kernel backend's accept() says a passthrough open arrived while the card was built."""
    rel = by_name.write("minutes.md", BIG)
    assert by_name.guard.card(rel, os.O_RDONLY, sleeper.pid, accept=lambda: False) is None
    assert by_name.guard.card(rel, os.O_RDONLY, sleeper.pid) is None  # never flips to a card later
    assert by_name.guard.drain()
    counters = by_name.stats.snapshot()
    assert counters["guard_cards"] == 0 and counters["guard_fail_open"] == 1
    assert counters["guard_insisted_reads"] == 0 and by_name.stats.log_path.read_text() == ""


# ---- the process tree -------------------------------------------------------


def test_descendants_threads_and_names(sleeper: subprocess.Popen[bytes]) -> None:
    tree = ProcessTree([os.getpid()], ["sleep"])
    me = tree.caller(os.getpid())
    assert me is not None and me.guarded and me.root
    child = tree.caller(sleeper.pid)
    assert child is not None and child.guarded and child.root and child.comm == "sleep"
    outside = ProcessTree([sleeper.pid], [])
    assert not outside.caller(os.getpid()).guarded  # type: ignore[union-attr]  # the parent is not below it
    assert ProcessTree([os.getpid()], []).caller(os.getppid()).guarded is False  # type: ignore[union-attr]


def test_a_thread_counts_as_its_process() -> None:
    tree = ProcessTree([os.getpid()], [])
    seen: list[bool] = []
    done = threading.Event()

    def probe() -> None:
        found = tree.caller(threading.get_native_id())
        seen.append(found is not None and found.pid == os.getpid() and found.root)
        done.set()

    threading.Thread(target=probe).start()
    assert done.wait(5) and seen == [True]


def _fake_proc(proc: Path, pid: int, comm: str, ppid: int, start: int) -> None:
    (proc / str(pid)).mkdir(parents=True, exist_ok=True)
    fields = ["S", str(ppid)] + ["0"] * 17 + [str(start)] + ["0"] * 30
    (proc / str(pid) / "stat").write_text(f"{pid} ({comm}) {' '.join(fields)}\n")
    (proc / str(pid) / "status").write_text(f"Name:\t{comm}\nTgid:\t{pid}\nPPid:\t{ppid}\n")


def test_exec_changes_the_verdict(tmp_path: Path) -> None:
    """A shell that execs the agent keeps its pid and start time, but not its name."""
    proc = tmp_path / "proc"
    _fake_proc(proc, 1, "init", 0, 1)
    _fake_proc(proc, 500, "bash", 1, 1000)
    tree = ProcessTree([], ["claude"], ttl_s=0.0, proc=str(proc))
    assert tree.caller(500).guarded is False  # type: ignore[union-attr]
    _fake_proc(proc, 500, "claude", 1, 1000)
    assert tree.caller(500).root is True  # type: ignore[union-attr]


def test_a_reused_guard_pid_is_not_guarded(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    _fake_proc(proc, 1, "init", 0, 1)
    _fake_proc(proc, 500, "harness (x)", 1, 1000)  # a name with parentheses and a space
    _fake_proc(proc, 600, "cat", 500, 1100)
    tree = ProcessTree([500], [], ttl_s=0.0, proc=str(proc))
    found = tree.caller(600)
    assert found is not None and found.guarded and not found.root
    _fake_proc(proc, 500, "harness (x)", 1, 9999)  # pid 500 exited and was reused
    _fake_proc(proc, 700, "cat", 500, 10000)
    assert tree.caller(700).guarded is False  # type: ignore[union-attr]
    assert tree.caller(42) is None  # gone


def test_card_paths_are_quoted_for_the_shell() -> None:
    text = render_card("/m/it's a file.md", describe("text", 30_000, 20_000), "x\n" * 2000, "/m/.sparsefs/SKILL.md")
    assert "cat '/m/it'\\''s a file.md@scout'" in text
    assert "[... preview cut]" in text and len(text) < 3_000


def test_cli_prints_the_skill() -> None:
    out = io.StringIO()
    with redirect_stdout(out):
        assert cli.main(["skill"]) == 0
    assert out.getvalue().startswith("# Reading files here (SparseFS)")


def test_virtual_paths_and_directories_are_left_to_the_core(by_name: Setup, sleeper: subprocess.Popen[bytes]) -> None:
    by_name.write("minutes.md", BIG)
    for rel in ("minutes.md@intent=revenue. staffing", "minutes.md@scout", "missing.md", ""):
        assert by_name.guard.card(rel, os.O_RDONLY, sleeper.pid) is None
    counters = by_name.stats.snapshot()
    assert counters["guard_plain_reads"] == 0 and counters["guard_fail_open"] == 0
