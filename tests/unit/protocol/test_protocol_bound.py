"""The 2L bound through the real protocol: random request sequences, measured on the whole served text.

Exposure is what the agent reads: every character of a pack, its header, coverage and next steps
included. Packs that admit or deliver the artifact (sparse, exact, native fit, full view, fallback)
count against the episode's 2L; a pack about a closed episode (a refine pointing into the full view it
already delivered) carries no artifact text and stays small."""

from __future__ import annotations

import shutil
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparsefs.artifacts.cache import ArtifactCache
from sparsefs.protocol.access import Protocol, Served
from sparsefs.protocol.grammar import VirtualRequest, split_slots
from sparsefs.source.rootfs import SourceRoot
from tests.conftest import DEMO

WORDS = ["revenue", "robots", "R&D", "headcount", "risk", "margin", "cash", "board", "harbor", "customers",
         "2023", "supply", "zeppelin", "the", "growth", "engineers", "Lantern", "outlook"]
ACTIONS = ["intent", "collect", "refine", "verify", "focus", "full", "scout"]


def request_strategy() -> st.SearchStrategy[VirtualRequest]:
    words = st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join)
    anchor = st.integers(1, 200).flatmap(lambda a: st.integers(a, a + 60).map(lambda b: f"L{a}-{b}"))

    def build(action: str, text: str, focus: str, budget: int | None) -> VirtualRequest:
        if action in ("full", "scout"):
            return VirtualRequest(action)
        argument = focus if action == "focus" else text
        slots = () if action == "focus" else split_slots(argument)
        return VirtualRequest(action, argument, slots, budget=budget)

    budgets = st.one_of(st.none(), st.integers(100, 20_000))
    return st.builds(build, st.sampled_from(ACTIONS), words, anchor, budgets)


@pytest.fixture(scope="module")
def protocol_factory(tmp_path_factory: pytest.TempPathFactory) -> object:
    src = tmp_path_factory.mktemp("bound") / "src"
    shutil.copytree(DEMO, src)
    root = SourceRoot.open(str(src))
    cache = ArtifactCache(root)
    return lambda: Protocol(cache)


COUNTED = ("sparse", "exact", "native-fit", "full", "fallback")
AFTER_CLOSE_MAX_CHARS = 1_000


def delivered(served: Served) -> int:
    """What the served text costs the episode; a pack about a closed episode must hold no artifact text."""
    if served.pack.decision in COUNTED:
        return served.exposed_chars
    assert served.pack.full_view is None and not served.pack.evidence, served.text[:300]
    assert served.exposed_chars <= AFTER_CLOSE_MAX_CHARS, served.text
    return 0


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(requests=st.lists(request_strategy(), min_size=1, max_size=25))
def test_no_episode_ever_delivers_more_than_2l(protocol_factory: object, requests: list[VirtualRequest]) -> None:
    protocol = protocol_factory()  # type: ignore[operator]
    totals: dict[str, int] = defaultdict(int)
    lengths: dict[str, int] = {}
    spans: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for request in requests:
        served = protocol.serve("annual-report.md", request)
        pack = served.pack
        if pack.episode is None:
            continue
        totals[pack.episode] += delivered(served)
        lengths[pack.episode] = pack.exposure.full_view_chars
        assert pack.exposure.episode_exposed <= pack.exposure.full_view_chars
        if pack.decision == "sparse":
            assert pack.exposure.pack_chars == served.exposed_chars == len(served.text)
            new = [item.span for item in pack.evidence if item.span]
            if request.action == "refine":
                assert not any(a < d and c < b for a, b in new for c, d in spans[pack.episode])
            spans[pack.episode].extend(new)
    for episode, total in totals.items():
        assert total <= 2 * lengths[episode], (episode, total, lengths[episode])


def test_no_suggested_step_delivers_more_than_the_episode_has_left(tmp_path: Path) -> None:
    """A focus fits the budget left; a refine near the end carries &budget= so it cannot trigger the fallback."""
    text = "".join(f"Harbor report {i}: the harbor handled {i * 37} ships and {i * 11} cranes in year {2000 + i}.\n"
                   for i in range(70))
    (tmp_path / "ports.txt").write_text(text)
    root = SourceRoot.open(str(tmp_path))
    protocol = Protocol(ArtifactCache(root))
    seen_budget = False
    for round_ in range(8):
        action = "intent" if round_ == 0 else "refine"
        pack = protocol.serve("ports.txt", VirtualRequest(action, "harbor ships cranes", ("harbor ships cranes",))).pack
        if pack.decision != "sparse":
            break
        left = pack.exposure.budget_left
        for step in pack.next_steps:
            if step.startswith("@refine=") and "&budget=" in step:
                seen_budget = True
                assert int(step.rsplit("&budget=", 1)[1]) < left
            if step.startswith("@focus="):
                focused = protocol.artifacts.load("ports.txt")
                size = sum(len(i.text) for i in focused.reader.focus(focused.parsed, step[len("@focus="):]).items)
                assert size <= left
    assert seen_budget
    root.close()
