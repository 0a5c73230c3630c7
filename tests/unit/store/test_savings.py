"""The savings definition (sparsefs.store.savings; docs/SEMANTICS.md, "Savings"): full reads a person would
have made, each artifact version at most once per read window, a grown log only for what it added, a folder
pack for its listing and the members it carries, nothing for an error."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsefs.store.savings import WINDOW_IDLE_S, FullRead, Logged, ReadUnits


def line(artifact: str, version: str, length: int, *, at: float = 0.0, episode: str | None = "e1",
         exposed: int = 10, decision: str = "sparse", reads: list[Any] | None = None) -> Logged:
    entry: dict[str, Any] = {"time": at, "artifact": artifact, "fingerprint": version, "episode": episode,
                             "exposed": exposed, "L": length, "decision": decision}
    if reads is not None:
        entry["reads"] = reads
    return Logged.of(entry)


def total(*lines: Logged) -> int:
    units = ReadUnits()
    for logged in lines:
        units.add(logged)
    return units.full_read_chars


def test_exact_operations_on_one_version_are_one_full_read() -> None:
    """Three operations on an unchanged 403K-char CSV added 1.21M to the baseline: each was its own episode."""
    ops = [line("s.csv", "f1", 403_000, episode=f"e{n}", decision="exact") for n in range(1, 4)]
    assert total(*ops) == 403_000
    assert total(*ops, line("s.csv", "f1", 403_000, episode="e9", decision="sparse")) == 403_000  # nor an intent


def test_a_new_objective_on_a_version_read_in_the_window_is_free() -> None:
    assert total(line("a.md", "v1", 1000, episode="e1"), line("a.md", "v1", 1000, episode="e2", at=60)) == 1000
    assert total(line("a.md", "v1", 1000), line("a.md", "v2", 1200, at=60)) == 2200  # a rewrite: read again


def test_a_window_closes_after_the_idle_time() -> None:
    assert total(line("a.md", "v1", 1000), line("a.md", "v1", 1000, at=WINDOW_IDLE_S - 1)) == 1000
    assert total(line("a.md", "v1", 1000), line("a.md", "v1", 1000, at=WINDOW_IDLE_S + 1)) == 2000
    steady = [line("a.md", "v1", 1000, at=n * (WINDOW_IDLE_S - 1)) for n in range(5)]
    assert total(*steady) == 1000  # still being read: the window stays open


def test_a_grown_log_costs_only_what_it_added() -> None:
    versions = [line("app.log", "v1", 1000, reads=[["app.log", "v1", 1000]])]
    versions += [line("app.log", f"v{n}", 1000 * n, at=n, reads=[["app.log", f"v{n}", 1000 * n, f"v{n - 1}",
                                                                   1000 * (n - 1)]]) for n in range(2, 6)]
    assert total(*versions) == 5000  # not 1000 + 2000 + ... + 5000
    assert total(versions[-1]) == 5000  # the version it extends was not read in this window: read whole


def test_a_folder_pack_costs_its_listing_and_the_members_it_carries() -> None:
    folder = line("docs", "d1", 900_000, decision="sparse", reads=[["docs", "d1", 40], ["docs/a.pdf", "p1", 30_000],
                                                                   ["docs/b.md", "m1", 2_000]])
    assert total(folder) == 32_040  # not the 900,000 of every member
    member = line("docs/a.pdf", "p1", 30_000, episode="e2", at=5)
    assert total(folder, member) == 32_040  # read again directly in the same window: already read
    scout = line("docs", "d1", 900_000, episode=None, decision="preview", reads=[["docs", "d1", 40]])
    assert total(scout) == 40


def test_errors_and_lines_without_a_full_read_cost_nothing() -> None:
    assert total(line("a.md", "-", 0, decision="error"), line("a.md", "v1", 500, decision="error")) == 0
    assert total(line("a.md", "v1", 500, reads=[])) == 0
    with pytest.raises((TypeError, ValueError)):
        line("a.md", "v1", 500, reads=[["a.md", "v1", -1]])
    with pytest.raises((TypeError, ValueError)):
        line("a.md", "v1", 500, reads=[["a.md", 3, 5]])
    logged = FullRead("x", "v" * 40, 5, "w" * 40, 3).as_log()  # versions as packs show them: 12 characters
    assert FullRead.from_log(logged) == FullRead("x", "v" * 12, 5, "w" * 12, 3)


LINES = st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.sampled_from(["v1", "v2"]),
                           st.sampled_from([None, "e1", "e2"]), st.integers(0, 50),
                           st.sampled_from(["sparse", "exact", "preview", "error"])), max_size=30)


@settings(max_examples=200, deadline=None)
@given(LINES)
def test_within_one_window_each_version_counts_once_whatever_the_order(
    lines: list[tuple[str, str, str | None, int, str]],
) -> None:
    def length(artifact: str, version: str) -> int:  # one version has one full view
        return 100 * (ord(artifact) - ord("a") + 1) + (7 if version == "v2" else 0)

    logged = [line(a, v, length(a, v), episode=e, exposed=x, decision=d) for a, v, e, x, d in lines]
    read = {(a, v) for a, v, _, _, d in lines if d != "error"}
    expected = sum(length(a, v) for a, v in read)
    for order in (logged, logged[::-1]):
        units = ReadUnits()
        costs = [units.add(one)[1] for one in order]
        assert units.full_read_chars == expected == sum(costs) and units.full_reads == len(read)
        assert units.exposed == sum(x for _, _, _, x, _ in lines) and units.saved == expected - units.exposed
