"""'What is X?' questions lift the sentences that define X (readers.retrieval.definitions): pure logic."""

from __future__ import annotations

import numpy as np

from readers.retrieval.definitions import DEFINITION_LIFT, defining, definition_question, lifted

UNITS = [
    "KATNAL1 mutant mice were studied in a T-maze.",
    "The enzyme KATNAL1 is a microtubule severing protein expressed in neurons.",
    "Microtubule severing enzymes are a family of AAA-ATPase proteins.",
    "Respiratory syncytial virus is a common cause of bronchiolitis.",
]


def test_definition_questions() -> None:
    assert definition_question("What is KATNAL1?") == "KATNAL1"
    assert definition_question("What are microtubule severing enzymes?") == "microtubule severing enzymes"
    assert definition_question("Who was the first patient ?") == "first patient"
    assert definition_question("What is the size of bovine coronavirus genome in kb and how?") is not None
    assert definition_question("How is MAPK activated?") is None


def test_the_defining_sentence_is_lifted() -> None:
    shape = defining(["KATNAL1"])
    assert shape is not None
    raw = np.array([2.0, 1.5, 0.0, 0.0])
    out = lifted(raw, shape, lambda us: [UNITS[u] for u in us])
    assert out[1] == 1.5 + DEFINITION_LIFT * 2.0 and out[0] == 2.0  # 'X mutant mice' is no definition
    assert out[1] > out[0]


def test_other_forms_define_too_and_unscored_units_stay() -> None:
    shape = defining(["RSV", "respiratory syncytial virus"])
    assert shape is not None
    raw = np.array([0.0, 0.0, 0.0, 1.0])
    assert lifted(raw, shape, lambda us: [UNITS[u] for u in us]).tolist() == [0.0, 0.0, 0.0, 1.0 + DEFINITION_LIFT]
    assert defining(["", " "]) is None
