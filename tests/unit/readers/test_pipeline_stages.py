"""The stages every ranking Reader runs (readers.retrieval.locate.PIPELINE, issue 27): query expansion from the
document's own vocabulary and whole sentences, through a Reader's real locate; where a Reader's units are not
sentences (rows, values, lines) the extension leaves them as they are."""

from __future__ import annotations

import json

import pytest

import readers.retrieval.locate as locate
from readers.base import Parsed, Reader, ReadIntent
from readers.jsondata.reader import JsonReader
from readers.kit.source import MemorySource
from readers.retrieval.bm25index import UnitIndex
from readers.retrieval.extend import GROUPS_KEY
from readers.retrieval.locate import PIPELINE, Stages, own_vocabulary, whole_sentences
from readers.table.reader import TableReader
from readers.text import TextReader

FILLER = "".join(f"Paragraph {i} is about the weather in town number {i} and nothing else.\n\n" for i in range(30))
DEFINED = ("Patients underwent high resolution computed tomography (HRCT) on admission to the ward.\n\n" + FILLER
           + "The HRCT showed ground-glass opacities in both lower lobes.\n\n" + FILLER)
LONG = ("The models suggested that without a vaccine, school closures would be unlikely to affect the pandemic, "
        "an estimated 35,000 to 60,000 ventilators would be needed, up to an estimated 7.3 billion surgical masks "
        "or respirators would be required, and perhaps most important, if vaccine development did not start "
        "before the virus was introduced, it was unlikely that a significant number of hospitalizations and "
        "deaths could be averted by vaccination in the first wave of the pandemic in the United States.")


def _parse(reader: Reader, name: str, text: str) -> Parsed:
    return reader.parse(MemorySource(name, text.encode()))


def _read(parsed: Parsed, question: str, chars: int, exclude: tuple[tuple[int, int], ...] = ()) -> list[str]:
    batch = TextReader().locate(parsed, ReadIntent(question, (question,)), chars, exclude)
    return [item.text for item in batch.items]


def test_the_shipped_pipeline_runs_both_stages() -> None:
    assert PIPELINE.expand is own_vocabulary and PIPELINE.extend is whole_sentences and PIPELINE.rerank is None


def test_a_slot_in_one_form_finds_the_other_form_the_document_defines(monkeypatch: pytest.MonkeyPatch) -> None:
    """A refine after the definition was shown: only the other form can find the scan's own sentence."""
    parsed = _parse(TextReader(), "paper.md", DEFINED)
    question = "What was seen on high resolution computed tomography?"
    shown = ((0, DEFINED.index("Paragraph 1")),)  # the definition and its neighbour (which its score smooths into)
    assert any("ground-glass" in t for t in _read(parsed, question, 300, shown))
    monkeypatch.setattr(locate, "PIPELINE", Stages())
    assert not any("ground-glass" in t for t in _read(parsed, question, 300, shown))


def test_the_lexical_method_is_not_expanded() -> None:
    """Its scores promise the slot's words as written: the other form would break that promise."""
    parsed = _parse(TextReader(), "paper.md", DEFINED)
    index = parsed.data["index"]
    assert isinstance(index, UnitIndex)
    view = TextReader().units(parsed, None)
    intent = ReadIntent("HRCT findings", ("HRCT findings",), method="lexical")
    assert own_vocabulary(parsed, view, intent, index) is None
    assert own_vocabulary(parsed, view, ReadIntent("HRCT findings", ("HRCT findings",)), index) is not None


def test_a_long_sentence_comes_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    text = FILLER + f"Short opening sentence about the study design here. {LONG} Another one follows.\n\n" + FILLER
    parsed = _parse(TextReader(), "paper.md", text)
    question = "Could vaccination avert hospitalizations and deaths in the first wave?"  # in its second piece
    assert any(LONG in t for t in _read(parsed, question, 1_000))
    monkeypatch.setattr(locate, "PIPELINE", Stages())
    assert not any(LONG in t for t in _read(parsed, question, 1_000))  # a piece of it, cut mid-sentence


def test_rows_and_values_are_whole_units_already() -> None:
    table = TableReader()
    csv = "country,population\n" + "".join(f"Land {i},{1000 + i}\n" for i in range(50))
    parsed = _parse(table, "people.csv", csv)
    assert whole_sentences(parsed, table.units(parsed, None)) is None
    reader = JsonReader()
    parsed = _parse(reader, "items.json", json.dumps([{"name": f"item {i}", "note": "a b c " * 20} for i in range(30)]))
    assert whole_sentences(parsed, reader.units(parsed, None)) is None
    assert GROUPS_KEY not in parsed.data
