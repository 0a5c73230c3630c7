"""A new Reader is one file plus one registry line: ``tests/toy_reader.py`` and :data:`TOY`, nothing else.

The toy Reader is registered at run time (in a mount's daemon through a ``sitecustomize`` on
PYTHONPATH, as tests/mount/test_faults.py plants its faulty Readers) and then passes the conformance
suite, is served through the protocol without a mount and through a real mount, is filed by the
selector, known to the guard, and part of the store's code version.
"""

from __future__ import annotations

import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from readers import registry
from readers.base import Parsed
from readers.registry import Persisted, Registration
from sparsefs.app.api import Workspace
from sparsefs.guard.policy import kind_extensions, parse_kinds
from sparsefs.store.parsed import code_version
from tests import mountutil
from tests.conftest import HANG_GUARD_S
from tests.reader_conformance import ReaderConformance, Sample
from tests.toy_reader import ToyReader

ROOT = Path(__file__).resolve().parents[3]
TOY = Registration(  # the one registry line
    "toy", "tests.toy_reader:ToyReader", extensions=frozenset({".toy"}), kinds={"toy": "text"},
    persists=(Persisted("tests.toy_reader.Verses"), Persisted("readers.retrieval.bm25index.UnitIndex")),
    guard_kind="toy",
)
SITECUSTOMIZE = """
from readers import registry
from readers.registry import Persisted, Registration

registry.register(Registration(
    "toy", "tests.toy_reader:ToyReader", extensions=frozenset({".toy"}), kinds={"toy": "text"},
    persists=(Persisted("tests.toy_reader.Verses"), Persisted("readers.retrieval.bm25index.UnitIndex")),
    guard_kind="toy",
))
"""
KEEPER = "The lighthouse keeper climbed the spiral stair at dusk\nand lit the great lamp for the fishing fleet."


def poem() -> str:
    """About 6,000 characters (past native fit, inside the <=8K band): 60 verses, one about a lighthouse."""
    verses = [f"Verse {n} of the long road home,\nwhere hedges rise and rivers roam,\nstep {n} follows step."
              for n in range(1, 61)]
    verses[16] = KEEPER
    return "\n\n".join(verses) + "\n"


@pytest.fixture(autouse=True)
def toy_registered(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The registry as it is, plus the toy's line, for this module's tests only."""
    monkeypatch.setattr(registry, "_REGISTRATIONS", list(registry._REGISTRATIONS))
    monkeypatch.setattr(registry, "_loaded", dict(registry._loaded))
    registry.register(TOY)
    yield


class TestToyConformance(ReaderConformance):
    reader = ToyReader()

    def samples(self) -> list[Sample]:
        return [
            Sample("poem.toy", poem().encode(), "lighthouse keeper"),
            Sample("two.toy", b"Tides and moons\nturn slowly.\n\nBread and salt\non the table.\n", "bread; tides",
                   ("bread", "tides")),
        ]

    def malformed(self) -> list[tuple[str, bytes]]:
        return [("bad.toy", b"\xff\xfe\x00\x01 not text"), ("blank.toy", b"\n \n\t\n")]

    def check_faithful(self, sample: Sample, parsed: Parsed) -> None:
        assert parsed.full_view == sample.data.decode("utf-8")


def test_a_toy_file_is_served_through_the_protocol(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "poem.toy").write_text(poem())
    workspace = Workspace(tmp_path / "ws", tmp_path / "state")
    with workspace:
        data = workspace.ask("poem.toy", "intent", "lighthouse keeper", fmt="json").json()
        pack = workspace.ask("poem.toy", "intent", "lighthouse keeper").text
        assert "lighthouse keeper climbed" in pack and "v17" in pack, pack
        assert "Verse 3 of" not in pack  # evidence, not the whole file
        assert "Verse 40 of" in workspace.ask("poem.toy", "focus", "v40").text
        assert "60 verses" in workspace.preview("poem.toy").text
    assert (data["reader"], data["decision"], data["scope"]["method"]) == ("toy", "sparse", "lexical"), data


def test_the_control_plane_reads_the_toy_from_its_registration() -> None:
    assert registry.artifact_type("toy") == "text"
    assert kind_extensions()["toy"] == frozenset({".toy"}) and parse_kinds("toy") == {"toy"}
    assert "tests.toy_reader.Verses" in registry.persisted()
    with_toy = code_version()
    registry._REGISTRATIONS.remove(TOY)
    assert code_version() != with_toy  # a plug-in Reader's source is part of the code version


def test_a_toy_file_is_served_through_a_mount(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "sitecustomize.py").write_text(textwrap.dedent(SITECUSTOMIZE))
    source, mnt = tmp_path / "ws", tmp_path / "mnt"
    source.mkdir()
    mnt.mkdir()
    (source / "poem.toy").write_text(poem())
    mount = mountutil.start(source, mnt, tmp_path / "state", plugins=plugins)  # the daemon runs -I: no PYTHONPATH
    try:
        with mountutil.hang_guard(mount, HANG_GUARD_S):
            result = subprocess.run(["cat", str(mnt / "poem.toy@intent=lighthouse keeper")], capture_output=True,
                                    text=True, timeout=60, check=True)
            assert "lighthouse keeper climbed" in result.stdout and "v17" in result.stdout, result.stdout
            assert (mnt / "poem.toy").read_text() == poem()
    finally:
        mountutil.stop(mount)
    assert "Traceback" not in mount.stderr(), mount.stderr()
