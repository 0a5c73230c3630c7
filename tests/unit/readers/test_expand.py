"""Query expansion from a document's own abbreviations (readers.retrieval.expand): pure logic."""

from __future__ import annotations

import numpy as np

from readers.retrieval.bm25index import UnitIndex
from readers.retrieval.expand import (
    EMPTY,
    GLOSSARY_KEY,
    adjust_for,
    expanded_scores,
    expansion,
    glossary,
    glossary_of,
)

PAPER = (
    "Patients underwent high resolution computed tomography (HRCT) on admission. "
    "The Middle East respiratory syndrome coronavirus (MERS-CoV) was first isolated in 2012. "
    "Earnings before interest, taxes, depreciation and amortization (EBITDA) rose. "
    "HRCT (high resolution CT) showed ground-glass opacities in most patients. "
    "Cases rose sharply (Smith et al., 2019) and then fell (2020). "
    "This happened (as expected) in the winter (see Table 2)."
)


def test_long_form_then_short_form() -> None:
    words = glossary(PAPER)
    assert words.long_of["HRCT"] == "high resolution computed tomography"
    assert words.long_of["MERS-CoV"] == "Middle East respiratory syndrome coronavirus"
    assert words.long_of["EBITDA"] == "Earnings before interest taxes depreciation and amortization"


def test_first_definition_wins_and_remarks_are_not_definitions() -> None:
    words = glossary(PAPER)
    assert set(words.long_of) == {"HRCT", "MERS-CoV", "EBITDA"}  # not "as expected", "2020", "Table 2"


def test_short_form_then_long_form() -> None:
    words = glossary("The HRCT (high resolution CT) images were read twice.")
    assert words.long_of == {"HRCT": "high resolution CT"}


def test_letters_must_spell_the_short_form() -> None:
    assert not glossary("We measured the viral load in blood (XYZ) daily.")


def test_expansion_both_ways() -> None:
    words = glossary(PAPER)
    assert expansion("What did the HRCT show?", words) == "high resolution computed tomography"
    assert expansion("When was middle east respiratory syndrome coronavirus isolated?", words) == "MERS-CoV"
    assert expansion("What did the CT show?", words) == ""
    assert expansion("anything", EMPTY) == ""


def test_short_forms_match_as_written() -> None:
    words = glossary("Results for respiratory syncytial virus (RSV) follow.")
    assert expansion("Is rsv seasonal?", words) == ""  # a lowercase word is not the short form
    assert expansion("Is RSV seasonal?", words) == "respiratory syncytial virus"


def test_expansion_lifts_the_unit_with_the_other_form() -> None:
    units = ["Scans by high resolution computed tomography found opacities.", "The HRCT device was new.",
             "Nothing here."]
    index = UnitIndex(units)
    words = glossary(PAPER)
    raw = index.scores("What did HRCT find?")
    assert raw[0] == 0.0
    lifted = expanded_scores(index, raw, expansion("What did HRCT find?", words), slice(0, 3))
    assert lifted[0] > 0.0 and lifted[2] == 0.0 and lifted[1] >= raw[1]


def test_adjust_for_only_when_a_slot_names_a_defined_form() -> None:
    index = UnitIndex(["a b c", "HRCT scans"])
    words = glossary(PAPER)
    assert adjust_for(index, words, {0: "what is a CT"}, slice(0, 2)) is None
    adjust = adjust_for(index, words, {0: "what is a CT", 1: "HRCT"}, slice(0, 2))
    assert adjust is not None
    raw = np.array([0.0, 1.0])
    assert np.array_equal(adjust(0, raw), raw)


def test_glossary_of_caches_plain_data() -> None:
    data: dict[str, object] = {}
    first = glossary_of(data, PAPER)
    assert data[GLOSSARY_KEY] == dict(first.long_of)  # a plain dict: the parsed store can save it
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in first.long_of.items())
    assert glossary_of(data, "other text").long_of == first.long_of
    assert first.short_of["high resolution computed tomography"] == "HRCT"
