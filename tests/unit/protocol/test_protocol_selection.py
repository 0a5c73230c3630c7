"""SelectReader in the protocol: the shipped table's choices, a table of our own, the full view, online costs."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from readers.selection import SNIPPETS, CalibrationTable, Cell, RequestGroup, Selector
from sparsefs.artifacts.cache import ArtifactCache
from sparsefs.protocol.access import Protocol
from sparsefs.protocol.grammar import parse_suffix
from sparsefs.protocol.pack import EvidencePack
from sparsefs.protocol.selecting import ConfigurationChooser
from sparsefs.source.rootfs import SourceRoot
from tests.conftest import DEMO

REPORT = "annual-report.md"  # 29,991 chars: the 8K-32K band
GROUP = RequestGroup("text", "8K-32K", "selective-fact")


@pytest.fixture
def root(tmp_path: Path) -> Iterator[SourceRoot]:
    shutil.copytree(DEMO, tmp_path / "src")
    opened = SourceRoot.open(str(tmp_path / "src"))
    yield opened
    opened.close()


def serve(protocol: Protocol, suffix: str) -> EvidencePack:
    return protocol.serve(REPORT, parse_suffix(suffix)).pack


def test_the_shipped_table_reads_a_mid_size_fact_with_bm25(root: SourceRoot) -> None:
    pack = serve(Protocol(ArtifactCache(root)), "intent=R%26D expenses in 2023")
    assert pack.decision == "sparse" and pack.configuration is not None
    assert pack.configuration.startswith("bm25/snippets for text|8K-32K|selective-fact")
    assert pack.scope.method.startswith("bm25")


def test_a_summary_request_gets_the_full_view_and_a_refine_points_into_it(root: SourceRoot) -> None:
    protocol = Protocol(ArtifactCache(root))
    summary = serve(protocol, "intent=Summarize the discussion of risk factors")
    assert summary.decision == "full" and summary.full_view is not None
    assert summary.configuration is not None and "none/full-view" in summary.configuration
    refined = serve(protocol, "refine=supply chain risk")
    assert refined.decision == "reuse-full-view" and refined.exposure.artifact_chars == 0


def _table(method: str, successes: int) -> CalibrationTable:
    cells = {(GROUP.key, SNIPPETS[m].key): Cell(40, successes if m == method else 5, 900.0, 0.0)
             for m in ("lexical", "bm25", "hybrid", "region")}
    return CalibrationTable(requests={GROUP.key: 40}, cells=cells)


def test_the_selector_picks_the_only_reliable_method_and_refine_keeps_it(root: SourceRoot) -> None:
    chooser = ConfigurationChooser(Selector(_table("lexical", 38)))
    protocol = Protocol(ArtifactCache(root), chooser=chooser)
    first = serve(protocol, "intent=R%26D expenses in 2023")
    assert first.scope.method.startswith("lexical") and first.configuration is not None
    assert first.configuration.startswith("lexical/snippets")
    more = serve(protocol, "refine=headcount at year end")
    assert more.episode == first.episode and more.scope.method.startswith("lexical")


def test_nothing_reliable_means_the_full_view_never_a_relaxed_threshold(root: SourceRoot) -> None:
    protocol = Protocol(ArtifactCache(root), chooser=ConfigurationChooser(Selector(_table("lexical", 20))))
    pack = serve(protocol, "intent=R%26D expenses in 2023")  # 20/40: p_valid 0.35 < 0.6
    assert pack.decision == "full" and pack.full_view is not None


def test_what_reads_cost_never_changes_what_the_next_read_gets(root: SourceRoot) -> None:
    """The cost book is calibration's: however many reads come before, the same question gets the same
    configuration and the same pack (issue 27: online costs made packs depend on earlier questions)."""
    chooser = ConfigurationChooser(Selector(_table("bm25", 38)))
    protocol = Protocol(ArtifactCache(root), chooser=chooser)
    before = chooser.selector.costs.estimate(GROUP, SNIPPETS["bm25"])
    first = serve(protocol, "intent=R%26D expenses in 2023")
    for words in ("staff", "gross margin", "headcount", "Lantern"):
        serve(protocol, f"intent={words}")
        serve(protocol, "refine=staff")
    serve(protocol, "full")
    again = serve(protocol, "intent=R%26D expenses in 2023")
    assert chooser.selector.costs.estimate(GROUP, SNIPPETS["bm25"]) == before
    assert again.model_dump(exclude={"episode"}) == first.model_dump(exclude={"episode"})


def test_a_huge_full_view_is_never_sent_unasked(tmp_path: Path) -> None:
    (tmp_path / "big.md").write_text("Revenue grew in the north region this year.\n" * 2_000)  # ~90K chars
    root = SourceRoot.open(str(tmp_path))
    group = RequestGroup("text", ">32K", "selective-fact")
    cells = {(group.key, SNIPPETS["bm25"].key): Cell(40, 5, 900.0, 0.0)}
    chooser = ConfigurationChooser(Selector(CalibrationTable(requests={group.key: 40}, cells=cells)))
    protocol = Protocol(ArtifactCache(root), chooser=chooser)
    pack = protocol.serve("big.md", parse_suffix("intent=revenue north")).pack
    assert pack.decision == "preview" and "needs-scope" in pack.flags and pack.full_view is None
    assert "&scope=" in pack.scope.note and pack.exposure.pack_chars <= 2_000
    scoped = protocol.serve("big.md", parse_suffix("intent=revenue north&scope=L1-400")).pack
    assert scoped.decision == "sparse"  # a scoped read is not judged by whole-artifact groups
    root.close()


def test_refine_after_a_remount_keeps_the_episode_method(tmp_path: Path) -> None:
    from sparsefs.store.state import StateDB

    shutil.copytree(DEMO, tmp_path / "src")

    def mount(reliable: str) -> tuple[Protocol, StateDB, SourceRoot]:
        root, state = SourceRoot.open(str(tmp_path / "src")), StateDB.in_dir(tmp_path / "state")
        chooser = ConfigurationChooser(Selector(_table(reliable, 38)))
        return Protocol(ArtifactCache(root), state=state, chooser=chooser), state, root

    protocol, state, root = mount("lexical")
    first = serve(protocol, "intent=R%26D expenses in 2023")
    state.close()
    root.close()
    protocol, state, root = mount("bm25")  # the next mount's table would pick another method for a new objective
    more = serve(protocol, "refine=headcount at year end")
    state.close()
    root.close()
    assert more.episode == first.episode and more.scope.method.startswith("lexical")


def test_a_dense_model_failing_at_run_time_leaves_bm25_answering(monkeypatch: pytest.MonkeyPatch) -> None:
    from readers.base import ReadIntent
    from readers.kit.source import MemorySource
    from readers.retrieval import dense
    from readers.text import TextReader

    if not dense.available():
        pytest.skip(dense.missing_reason())

    class Fail(Exception):  # what onnxruntime raises: an Exception, not a RuntimeError
        pass

    def broken(*args: object, **kwargs: object) -> None:
        raise Fail("[ONNXRuntimeError] : 1 : FAIL")

    monkeypatch.setattr(dense, "unit_similarities", broken)
    reader = TextReader()
    parsed = reader.parse(MemorySource("r.md", (DEMO / REPORT).read_bytes()))
    batch = reader.locate(parsed, ReadIntent("R&D expenses", ("R&D expenses",), method="hybrid"), 1500)
    assert "hybrid-unavailable" in batch.flags and batch.items and batch.scope.method.startswith("bm25")
