"""Multi-question replay over real QA documents: the evidence record's promises, read by read."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sparsefs.artifacts.cache import ArtifactCache
from sparsefs.protocol.access import Protocol
from sparsefs.source.rootfs import SourceRoot
from tests.replay import QA, Task, TaskResult, load_tasks, merge, overlap, replay, write_workspace

pytestmark = pytest.mark.skipif(not QA.exists(), reason="shared QA data not present")
TASKS = {"covidqa-dev": 6, "qmsum": 3}


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[tuple[Task, Protocol, TaskResult]]]:
    src = tmp_path_factory.mktemp("replay")
    tasks = [t for name, n in TASKS.items() for t in load_tasks(name, n, min_questions=4)]
    written = list(write_workspace(src, tasks))
    root = SourceRoot.open(str(src))
    out = []
    for rel, task in written:
        protocol = Protocol(ArtifactCache(root))
        out.append((task, protocol, replay(protocol, rel, task, "record")))
    yield out
    root.close()


def test_refine_never_reexposes_a_delivered_span(replayed: list[tuple[Task, Protocol, TaskResult]]) -> None:
    for task, _, result in replayed:
        delivered: list[tuple[int, int]] = []
        for read in result.reads:
            if read.served.pack.decision == "sparse":
                assert overlap(read.spans, delivered) == 0, task.doc_id
            delivered = merge([*delivered, *read.spans])
        assert sum(r.repeated_chars for r in result.reads if r.served.pack.decision == "sparse") == 0


def test_passages_are_exact_slices_of_the_document(replayed: list[tuple[Task, Protocol, TaskResult]]) -> None:
    for task, _, result in replayed:
        for read in result.reads:
            for item in read.served.pack.evidence:
                assert item.span is not None and task.text[item.span[0] : item.span[1]] == item.text


def test_coverage_lines_match_the_evidence_anchors(replayed: list[tuple[Task, Protocol, TaskResult]]) -> None:
    for _, protocol, result in replayed:
        for read in result.reads:
            pack = read.served.pack
            here = {item.anchor for item in pack.evidence}
            episode = protocol.episodes.get(pack.episode or "")
            assert episode is not None
            for cov in pack.coverage:
                assert len(pack.coverage) == len(pack.slots) or len(pack.coverage) == 1
                assert set(cov.anchors) <= here, (cov, here)
                if cov.status == "matched":
                    assert cov.anchors or cov.earlier, cov
                if pack.decision == "reuse-full-view":  # anchors into the full view this episode delivered
                    assert episode.budget.full_view_delivered and not cov.anchors
                else:
                    assert set(cov.earlier) <= set(episode.anchors)


def test_one_episode_per_task_and_its_budget_holds(replayed: list[tuple[Task, Protocol, TaskResult]]) -> None:
    for task, protocol, result in replayed:
        episodes = {read.served.pack.episode for read in result.reads}
        sparse = [r for r in result.reads if r.served.pack.decision == "sparse"]
        assert len(episodes) == 1 or any(r.served.pack.decision == "fallback" for r in result.reads), task.doc_id
        episode = protocol.episodes.get(result.reads[0].served.pack.episode or "")
        assert episode is not None and episode.reads == len(result.reads)
        if len(sparse) == len(result.reads):
            assert episode.budget.sparse_exposed == sum(r.served.exposed_chars for r in sparse)
        total = sum(r.served.exposed_chars for r in result.reads)
        assert total <= 2 * episode.budget.full_view_chars


def test_without_the_record_the_same_questions_repeat_characters(tmp_path: Path) -> None:
    tasks = load_tasks("covidqa-dev", 4, min_questions=6)
    root_dir = tmp_path / "src"
    root_dir.mkdir()
    written = list(write_workspace(root_dir, tasks))
    root = SourceRoot.open(str(root_dir))
    with_record = without = 0
    for rel, task in written:
        with_record += replay(Protocol(ArtifactCache(root)), rel, task, "record").repeated
        without += replay(Protocol(ArtifactCache(root)), rel, task, "no-record").repeated
    root.close()
    assert with_record == 0 < without
