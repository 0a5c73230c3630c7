"""A pack is a function of the artifact version, the request and the episode state (issue 27).

Never of what other questions came first, nor of timing: the same questions, replayed in two orders on
two fresh protocols (what two fresh mounts build: nothing parsed, nothing embedded), with the background
dense warm-up running, give byte-identical packs, episode ids included. Each question is read the way an
agent works (``@intent``, ``@refine``, ``@focus`` on the suggested anchor, ``@full``, which closes the
episode so the next question opens a fresh one). The documents are long enough (> 32K characters) for the
selector to serve hybrid reads when the dense extra is installed, so the warm-up's progress differs
between the two orders.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from readers.retrieval import dense
from sparsefs.artifacts import warmup
from sparsefs.artifacts.cache import ArtifactCache
from sparsefs.protocol.access import Protocol
from sparsefs.protocol.grammar import parse_suffix
from sparsefs.protocol.steps import encode_anchor
from sparsefs.source.rootfs import SourceRoot
from tests.replay import QA, Task, load_tasks, write_workspace

pytestmark = pytest.mark.skipif(not QA.exists(), reason="shared QA data not present")
QUESTIONS = 3


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SourceRoot, list[tuple[str, Task]]]]:
    src = tmp_path_factory.mktemp("orders")
    tasks = [t for t in load_tasks("covidqa-dev", 45, min_questions=QUESTIONS) if len(t.text) > 32 * 1024][:2]
    written = list(write_workspace(src, tasks))
    root = SourceRoot.open(str(src))
    yield root, written
    root.close()


def _asked(written: list[tuple[str, Task]]) -> list[tuple[str, str]]:
    return [(rel, " ".join(q.split())) for rel, task in written for q in task.questions[:QUESTIONS]]


def _replay(root: SourceRoot, asked: list[tuple[str, str]]) -> dict[tuple[str, str], list[str]]:
    """Each question's packs, as the agent reads them, on a fresh protocol, in the order given."""
    protocol = Protocol(ArtifactCache(root))
    out: dict[tuple[str, str], list[str]] = {}
    try:
        for rel, question in asked:
            first = protocol.serve(rel, parse_suffix(f"intent={encode_anchor(question)}"))
            texts = [first.text, protocol.serve(rel, parse_suffix(f"refine={encode_anchor(question)}")).text]
            focus = next((s for s in first.pack.next_steps if s.startswith("@focus=")), None)
            if focus is not None:
                texts.append(protocol.serve(rel, parse_suffix(focus[1:])).text)
            texts.append(protocol.serve(rel, parse_suffix("full")).text)
            out[(rel, question)] = texts
    finally:
        protocol.chooser.close()
    return out


def test_two_orders_on_two_fresh_mounts_give_the_same_packs(
    workspace: tuple[SourceRoot, list[tuple[str, Task]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(warmup.ENV, "1")
    root, written = workspace
    assert len(written) == 2
    asked = _asked(written)
    forward = _replay(root, asked)
    backward = _replay(root, list(reversed(asked)))
    for key, packs in forward.items():
        assert packs == backward[key], key
    headers = [packs[0].split("\n", 1)[0] for packs in forward.values()]
    if dense.available():  # the warm-up ran: what the orders were exposed to differed
        assert any(" hybrid " in header for header in headers), headers
