"""The configuration selector: Wilson bound, the tau and <20 rules, argmin, fallbacks, the shipped table."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from readers import selection
from readers.registry import group_of
from readers.selection import (
    EXACT,
    FULL_VIEW,
    MIN_REQUESTS,
    SNIPPETS,
    TAU,
    CalibrationTable,
    Cell,
    Configuration,
    CostBook,
    RequestGroup,
    Selector,
    intent_type,
    load_table,
    parse_table,
    size_band,
    wilson_lower,
)

BM25, LEXICAL, REGION = SNIPPETS["bm25"], SNIPPETS["lexical"], SNIPPETS["region"]
GROUP = RequestGroup("text", "8K-32K", "selective-fact")


def table(requests: int, cells: dict[Configuration, tuple[int, int, float, float]],
          group: RequestGroup = GROUP) -> CalibrationTable:
    return CalibrationTable(
        {group.key: requests},
        {(group.key, c.key): Cell(n, s, exposed, follow) for c, (n, s, exposed, follow) in cells.items()},
    )


def document(groups: dict[str, Any]) -> dict[str, Any]:
    return {"schema": selection.SCHEMA, "groups": groups}


# -- Wilson ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("successes", "trials", "expected"),
    [
        (18, 20, 0.6990),  # published 4-digit values of the 95% Wilson score interval
        (20, 20, 0.8389),  # n / (n + z^2)
        (10, 20, 0.2993),
        (1, 10, 0.0179),
        (0, 0, 0.0),
        (0, 20, 0.0),
    ],
)
def test_wilson_lower_known_values(successes: int, trials: int, expected: float) -> None:
    assert wilson_lower(successes, trials) == pytest.approx(expected, abs=1e-4)


def test_wilson_lower_grows_with_evidence_at_equal_rate() -> None:
    assert wilson_lower(9, 10) < wilson_lower(90, 100) < wilson_lower(900, 1000) < 0.9


# -- groups ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "text", "folder", "expected"),
    [
        ("sum", "", False, "exact-computation"),
        ("filter", "timeout", True, "exact-computation"),
        ("intent", "revenue by region", True, "cross-file"),
        ("intent", "quote the indemnification clause", False, "verbatim"),
        ("intent", "the exact wording of the warranty", False, "verbatim"),
        ("intent", "what did they say, word for word", False, "verbatim"),
        ("intent", 'where does it say "net sales increased"', False, "selective-fact"),
        ("intent", "verbatim text of section 2", False, "verbatim"),
        ("intent", "net sales in 2022", False, "selective-fact"),
        ("intent", "exactly how many employees", False, "selective-fact"),
        ("refine", "the quotient of the two", False, "selective-fact"),
    ],
)
def test_intent_type_cues(action: str, text: str, folder: bool, expected: str) -> None:
    assert intent_type(action, text, folder) == expected


def test_size_bands_and_groups() -> None:
    assert [size_band(n) for n in (0, 8192, 8193, 32768, 32769)] == ["<=8K", "<=8K", "8K-32K", "8K-32K", ">32K"]
    assert group_of("pdf", 50_000, "intent", "R&D 2023") == RequestGroup("text", ">32K", "selective-fact")
    assert group_of("table", 100, "sum", "") == RequestGroup("structured", "<=8K", "exact-computation")
    assert group_of("folder", 9000, "intent", "who calls foo") == RequestGroup("collection", "8K-32K", "cross-file")


# -- adaptive choice ----------------------------------------------------------------


def test_argmin_cost_among_configurations_meeting_tau() -> None:
    sel = Selector(table(40, {BM25: (40, 36, 1200, 100), LEXICAL: (40, 35, 600, 200), REGION: (40, 10, 100, 0)}))
    choice = sel.choose(GROUP, [BM25, LEXICAL, REGION])
    assert choice.config == LEXICAL  # region is cheapest but unreliable
    assert choice.est_cost == pytest.approx(600 + selection.PER_CALL_CHARS + 200)
    assert choice.p_valid == pytest.approx(wilson_lower(35, 40))


def test_only_available_configurations_compete() -> None:
    sel = Selector(table(40, {BM25: (40, 36, 1200, 100), LEXICAL: (40, 35, 600, 200)}))
    assert sel.choose(GROUP, [BM25]).config == BM25


def test_tie_goes_to_default_then_reliability_then_name() -> None:
    same = (40, 34, 500, 0)
    assert Selector(table(40, {BM25: same, LEXICAL: same})).choose(GROUP, [LEXICAL, BM25]).config == BM25
    better = (40, 38, 500, 0)
    assert Selector(table(40, {REGION: same, LEXICAL: better})).choose(GROUP, [REGION, LEXICAL]).config == LEXICAL
    assert Selector(table(40, {REGION: same, LEXICAL: same})).choose(GROUP, [REGION, LEXICAL]).config == LEXICAL


def test_tau_boundary_is_inclusive_and_never_relaxed() -> None:
    # 18/20 -> 0.699 meets tau; with tau just above it, nothing does and the full view is chosen.
    cells = {BM25: (20, 18, 1000, 0)}
    assert Selector(table(20, cells)).choose(GROUP, [BM25]).config == BM25
    assert Selector(table(20, cells), tau=wilson_lower(18, 20)).choose(GROUP, [BM25]).config == BM25
    choice = Selector(table(20, cells), tau=wilson_lower(18, 20) + 1e-9).choose(GROUP, [BM25])
    assert choice.config == FULL_VIEW and "no configuration" in choice.reason


def test_no_configuration_meets_tau_gives_full_view() -> None:
    sel = Selector(table(100, {BM25: (100, 50, 1000, 0), LEXICAL: (100, 55, 800, 0)}))
    choice = sel.choose(GROUP, [BM25, LEXICAL, FULL_VIEW])
    assert choice.config == FULL_VIEW and choice.p_valid is None


def test_uncalibrated_configuration_is_not_eligible_in_an_adaptive_group() -> None:
    sel = Selector(table(40, {BM25: (40, 36, 1200, 100)}))
    assert sel.choose(GROUP, [BM25, SNIPPETS["hybrid"]]).config == BM25
    assert sel.choose(GROUP, [SNIPPETS["hybrid"]]).config == FULL_VIEW


# -- the <20 rule --------------------------------------------------------------------


def test_small_group_uses_the_default_even_when_another_is_cheaper() -> None:
    cells = {BM25: (19, 19, 1500, 0), LEXICAL: (19, 19, 300, 0)}
    choice = Selector(table(MIN_REQUESTS - 1, cells)).choose(GROUP, [BM25, LEXICAL])
    assert choice.config == BM25 and "not adaptive" in choice.reason
    assert Selector(table(MIN_REQUESTS, cells)).choose(GROUP, [BM25, LEXICAL]).config == LEXICAL


def test_small_group_default_missing_tau_gives_full_view() -> None:
    choice = Selector(table(5, {BM25: (5, 5, 1000, 0)})).choose(GROUP, [BM25])  # 5/5 -> 0.566 < 0.6
    assert choice.config == FULL_VIEW and choice.p_valid == pytest.approx(wilson_lower(5, 5))


def test_small_group_default_without_data_is_used_and_says_so() -> None:
    choice = Selector(CalibrationTable()).choose(GROUP, [LEXICAL, BM25])
    assert choice.config == BM25 and choice.p_valid is None and "no calibration data" in choice.reason


def test_exact_computation_defaults_to_the_exact_result() -> None:
    group = RequestGroup("structured", ">32K", "exact-computation")
    assert Selector(CalibrationTable()).choose(group, [EXACT, BM25]).config == EXACT
    assert Selector(CalibrationTable()).choose(group, [BM25]).config == FULL_VIEW  # default unavailable


# -- table loading ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{not json",
        "[]",
        json.dumps({"schema": 999, "groups": {}}),
        json.dumps(document({"text|8K-32K|selective-fact": {"requests": 3}})),
        json.dumps(document({"text|huge|selective-fact": {"requests": 3, "configs": {}}})),
        json.dumps(document({GROUP.key: {"requests": 3, "configs": {"magic/snippets": {}}}})),
        json.dumps(document({GROUP.key: {"requests": 30, "configs": {
            "bm25/snippets": {"n": 3, "successes": 5, "mean_exposed": 1, "mean_follow_up": 0}}}})),
        json.dumps(document({GROUP.key: {"requests": -1, "configs": {}}})),
        json.dumps(document({GROUP.key: {"requests": 30, "configs": {
            "bm25/snippets": {"n": 30, "successes": 30, "mean_exposed": "many", "mean_follow_up": 0}}}})),
    ],
)
def test_corrupt_table_is_empty_and_not_adaptive(text: str) -> None:
    loaded = parse_table(text)
    assert loaded.error and not loaded.cells and not loaded.requests
    choice = Selector(loaded).choose(GROUP, [BM25, LEXICAL])
    assert choice.config == BM25 and "unusable" in choice.reason


def test_valid_document_round_trips() -> None:
    cell = {"n": 30, "successes": 27, "mean_exposed": 900.5, "mean_follow_up": 12}
    loaded = parse_table(json.dumps(document({GROUP.key: {"requests": 30, "configs": {"lexical/snippets": cell}}})))
    assert not loaded.error
    assert loaded.cell(GROUP, LEXICAL) == Cell(30, 27, 900.5, 12.0)
    assert loaded.requests_in(GROUP) == 30


def test_missing_table_file_is_not_adaptive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(selection, "TABLE_FILE", "no-such-calibration.json")
    load_table.cache_clear()
    try:
        loaded = load_table()
        assert loaded.error and not loaded.cells
    finally:
        load_table.cache_clear()


def test_shipped_table_parses_and_covers_the_main_groups() -> None:
    load_table.cache_clear()
    shipped = load_table()
    assert not shipped.error, shipped.error
    assert shipped.requests_in(RequestGroup("text", ">32K", "selective-fact")) >= MIN_REQUESTS
    assert shipped.requests_in(RequestGroup("structured", ">32K", "exact-computation")) >= MIN_REQUESTS
    for (group_key, _), cell in shipped.cells.items():
        assert 0 < cell.n <= shipped.requests[group_key] and cell.successes <= cell.n
    assert TAU == 0.6 and MIN_REQUESTS == 20


# -- online cost ---------------------------------------------------------------------


def test_costs_and_reliability_are_calibrations() -> None:
    """Neither moves at run time (issue 27): a choice never depends on what was read before."""
    calibrated = table(40, {BM25: (40, 36, 1000, 0), LEXICAL: (40, 35, 1100, 0)})
    sel = Selector(calibrated)
    assert sel.choose(GROUP, [BM25, LEXICAL]).config == BM25
    assert not hasattr(sel.costs, "observe")
    assert sel.costs.estimate(GROUP, BM25) == pytest.approx(1000 + selection.PER_CALL_CHARS)
    assert sel.p_valid(GROUP, BM25) == pytest.approx(wilson_lower(36, 40))


def test_cost_book_estimates_exposure_overhead_and_follow_up() -> None:
    book = CostBook(table(40, {BM25: (40, 36, 1000, 250)}))
    assert book.estimate(GROUP, BM25) == pytest.approx(1000 + book.overhead + 250)
    assert book.estimate(GROUP, LEXICAL) is None


def test_configuration_keys_round_trip() -> None:
    for config in (*SNIPPETS.values(), EXACT, FULL_VIEW):
        assert Configuration.parse(config.key) == config
    with pytest.raises(ValueError):
        Configuration.parse("bm25")
    assert math.isinf(Selector(CalibrationTable())._cost(GROUP, BM25))


def test_default_selector_is_one_per_process_and_uses_the_shipped_table() -> None:
    first = selection.default_selector()
    assert selection.default_selector() is first
    assert first.table.requests == load_table().requests
    group = RequestGroup("structured", ">32K", "exact-computation")
    assert selection.choose(group, [EXACT]).config == EXACT


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Summarize the discussion about the remote control design.", "summary"),
        ("Please summarise the meeting", "summary"),
        ("Give me an overview of the filing", "summary"),
        ("What did Bains say about the arts?", "selective-fact"),  # may be a fact question: words cannot tell
        ("What did management say about PFAS liabilities?", "selective-fact"),
        ('What is the "total debt" at year end?', "selective-fact"),  # quoted terms are not a verbatim request
        ("What is the incubation period of MERS-CoV?", "selective-fact"),
        ("How many patients were enrolled?", "selective-fact"),
        ("What did the study find about mortality?", "selective-fact"),
    ],
)
def test_summary_requests_are_a_group_of_their_own(text: str, expected: str) -> None:
    assert intent_type("intent", text, False) == expected
