"""The Gate's bound, as a property: no episode ever exposes more than 2L."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gate import Budget, Decision, GateConfig, admit_batch, choose_mode, deliver_full_view, total_exposure

Op = tuple[str, int]
ops_strategy = st.lists(
    st.one_of(
        st.tuples(st.just("batch"), st.integers(min_value=0, max_value=60_000)),
        st.tuples(st.just("full"), st.just(0)),
    ),
    max_size=40,
)


def run_episode(full_view_chars: int, ops: list[Op]) -> tuple[Budget, int, list[int]]:
    """Drive a budget like the protocol does; return it, delivered chars and E after each admit."""
    budget = Budget(full_view_chars)
    delivered = 0
    exposed_after_admits: list[int] = []
    for kind, size in ops:
        if budget.closed:
            break
        verdict = deliver_full_view(budget) if kind == "full" else admit_batch(budget, size)
        if verdict.decision is Decision.ADMIT:
            exposed_after_admits.append(verdict.budget.sparse_exposed)
        delivered += verdict.delivered_chars
        budget = verdict.budget
    return budget, delivered, exposed_after_admits


@settings(max_examples=10_000, deadline=None, database=None)
@given(full_view_chars=st.integers(min_value=0, max_value=200_000), ops=ops_strategy)
def test_total_exposure_never_exceeds_twice_the_full_view(full_view_chars: int, ops: list[Op]) -> None:
    budget, delivered, exposed_after_admits = run_episode(full_view_chars, ops)
    assert delivered == total_exposure(budget)
    assert delivered <= 2 * full_view_chars
    assert all(exposed <= full_view_chars for exposed in exposed_after_admits)


def test_batch_that_fits_exactly_is_admitted() -> None:
    verdict = admit_batch(Budget(1000, sparse_exposed=400), 600)
    assert verdict.decision is Decision.ADMIT
    assert verdict.budget.sparse_exposed == 1000
    assert verdict.budget.remaining == 0


def test_batch_one_char_over_falls_back_to_full_view_and_closes() -> None:
    verdict = admit_batch(Budget(1000, sparse_exposed=400), 601)
    assert verdict.decision is Decision.FALLBACK
    assert verdict.delivered_chars == 1000
    assert verdict.budget.closed and verdict.budget.full_view_delivered
    assert verdict.budget.sparse_exposed == 400


def test_bound_is_tight_just_under_2l() -> None:
    budget, delivered, _ = run_episode(1000, [("batch", 999), ("batch", 2)])
    assert budget.closed
    assert delivered == 1999


def test_closed_episode_admits_nothing() -> None:
    closed = Budget(1000, closed=True)
    verdict = admit_batch(closed, 1)
    assert verdict.decision is Decision.CLOSED
    assert verdict.delivered_chars == 0


def test_full_view_already_delivered_is_reused_not_reexposed() -> None:
    verdict = deliver_full_view(Budget(1000, full_view_delivered=True))
    assert verdict.decision is Decision.REUSE_FULL_VIEW
    assert verdict.delivered_chars == 0


@pytest.mark.parametrize(
    ("length", "needs_full", "expected"),
    [
        (4_000, False, Decision.NATIVE_FIT),
        (4_001, False, Decision.SPARSE),
        (0, False, Decision.NATIVE_FIT),
        (900_000, True, Decision.NATIVE_FIT),
    ],
)
def test_native_fit_threshold(length: int, needs_full: bool, expected: Decision) -> None:
    assert choose_mode(length, GateConfig(), needs_full) is expected


def test_negative_sizes_are_rejected() -> None:
    with pytest.raises(ValueError):
        admit_batch(Budget(10), -1)
    with pytest.raises(ValueError):
        Budget(-1)
    with pytest.raises(ValueError):
        GateConfig(native_fit_chars=-5)


@settings(max_examples=2_000, deadline=None, database=None)
@given(
    full_view_chars=st.integers(min_value=0, max_value=200_000),
    reserve_share=st.floats(min_value=0.0, max_value=1.0),
    full_share=st.floats(min_value=0.0, max_value=1.0),
    ops=ops_strategy,
)
def test_whole_packs_with_their_own_lines_stay_within_twice_the_full_view(
    full_view_chars: int, reserve_share: float, full_share: float, ops: list[Op]
) -> None:
    """Exposure counts whole packs: a full-view pack is L plus up to ``reserve`` chars of its own lines."""
    reserve = int(full_view_chars * reserve_share)
    full_pack = full_view_chars + int(reserve * full_share)
    budget, delivered = Budget(full_view_chars, reserve=reserve), 0
    for kind, size in ops:
        if budget.closed:
            break
        verdict = deliver_full_view(budget, full_pack) if kind == "full" else admit_batch(budget, size, full_pack)
        delivered += verdict.delivered_chars
        budget = verdict.budget
        assert budget.sparse_exposed <= full_view_chars - reserve
    assert delivered == total_exposure(budget) <= 2 * full_view_chars


def test_a_full_view_pack_outside_l_and_its_reserve_is_refused() -> None:
    with pytest.raises(ValueError):
        deliver_full_view(Budget(1000, reserve=50), 1051)
    with pytest.raises(ValueError):
        deliver_full_view(Budget(1000, reserve=50), 999)
    with pytest.raises(ValueError):
        Budget(10, reserve=11)
    assert deliver_full_view(Budget(1000, reserve=50), 1050).delivered_chars == 1050


def test_the_reserve_comes_out_of_the_sparse_budget() -> None:
    budget = Budget(1000, reserve=100)
    assert budget.remaining == 900
    assert admit_batch(budget, 900).decision is Decision.ADMIT
    assert admit_batch(budget, 901, 1080).decision is Decision.FALLBACK


@pytest.mark.parametrize(
    ("length", "pack", "expected"),
    [
        (3_700, 1_500, Decision.NATIVE_FIT),  # a 1,500-char pack is 41% of L: not clearly cheaper
        (3_800, 1_500, Decision.SPARSE),
        (7_400, 3_000, Decision.NATIVE_FIT),  # two slots ask for twice the pack
        (50_000, 3_000, Decision.SPARSE),
        (100_000, 0, Decision.SPARSE),  # focus and exact operations ask for no pack size
    ],
)
def test_a_full_view_not_clearly_dearer_than_the_pack_is_read_whole(length: int, pack: int, expected: Decision) -> None:
    config = GateConfig(native_fit_chars=0)
    assert choose_mode(length, config, pack_chars=pack) is expected
