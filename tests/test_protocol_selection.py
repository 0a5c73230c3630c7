"""SelectReader in the protocol: the shipped table's choices, a table of our own, the full view, online costs."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from readers.selection import SNIPPETS, CalibrationTable, Cell, RequestGroup, Selector
from sparsefs.artifacts import ArtifactCache
from sparsefs.grammar import parse_suffix
from sparsefs.pack import EvidencePack
from sparsefs.protocol import Protocol
from sparsefs.rootfs import SourceRoot
from sparsefs.selecting import ConfigurationChooser
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
    assert refined.decision == "reuse-full-view" and refined.exposure.pack_chars == 0


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


def test_an_episode_teaches_the_cost_book_what_its_reads_cost(root: SourceRoot) -> None:
    chooser = ConfigurationChooser(Selector(_table("bm25", 38)))
    protocol = Protocol(ArtifactCache(root), chooser=chooser)
    before = chooser.selector.costs.estimate(GROUP, SNIPPETS["bm25"])
    first = serve(protocol, "intent=R%26D expenses in 2023")
    follow = serve(protocol, "refine=staff")
    serve(protocol, "intent=gross margin")  # a new objective settles the first episode
    after = chooser.selector.costs.estimate(GROUP, SNIPPETS["bm25"])
    assert before is not None and after is not None and after != before
    exposed, follow_up = first.exposure.pack_chars, follow.exposure.pack_chars
    n = 20  # the calibration prior counts for 20 observations
    assert after == pytest.approx((900.0 * n + exposed) / (n + 1) + 160 + follow_up / (n + 1))
