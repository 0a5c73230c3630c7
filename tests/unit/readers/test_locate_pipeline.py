"""The locate pipeline the ranking Readers share (readers/retrieval/locate.py).

What the conformance suite cannot see from outside: a Reader that indexes a scope on its own still
caches dense vectors under the artifact's unit ids, a Reader's own score adjustment (the Code
Reader's symbol boosts) applies whatever the method, and "matched" is the calibrated judge's in
every Reader, not a shared word.
"""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import readers.retrieval.methods as lm
from readers.base import Parsed, Reader, ReadIntent, SlotCoverage
from readers.code.reader import CodeReader
from readers.jsondata.jsonl import JsonlReader
from readers.jsondata.reader import JsonReader
from readers.kit.source import MemorySource
from readers.retrieval.bm25index import UnitIndex
from readers.retrieval.confidence import vouches
from readers.retrieval.locate import Found, Stages, UnitView, closest_labels
from readers.retrieval.methods import Adjust, Ranking
from readers.table.reader import TableReader
from readers.text import TextReader


@pytest.fixture
def fake_dense(monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[int], list[str]]]:
    """A dense module that records the ids it is asked about and the texts it is given for them."""
    calls: list[tuple[list[int], list[str]]] = []

    def unit_similarities(parsed: Parsed, key: str, ids: Any, texts_of: Any, query: str) -> np.ndarray:
        texts = texts_of(np.asarray(ids))
        calls.append(([int(i) for i in ids], texts))
        return np.array([0.9 if "harbour" in t else 0.0 for t in texts], dtype=np.float32)

    monkeypatch.setattr(lm, "dense_module", lambda: SimpleNamespace(unit_similarities=unit_similarities))
    return calls


def _parse(reader: Reader, name: str, data: str) -> Parsed:
    return reader.parse(MemorySource(name, data.encode()))


def _records(n: int) -> str:
    places = ("harbour", "station", "market", "bridge")
    return "".join(json.dumps({"id": i, "note": f"ferry delayed at the {places[i % 4]} gate {i}"}) + "\n"
                   for i in range(n))


def test_a_scoped_record_read_keeps_the_artifacts_dense_ids(fake_dense: list[tuple[list[int], list[str]]]) -> None:
    reader = JsonlReader()
    parsed = _parse(reader, "trips.jsonl", _records(200))
    whole = reader.locate(parsed, ReadIntent("ferry harbour gate", ("ferry harbour gate",), method="hybrid"), 400)
    scoped = reader.locate(
        parsed, ReadIntent("ferry harbour gate", ("ferry harbour gate",), scope="L101-150", method="hybrid"), 400
    )
    assert whole.scope.method.startswith("hybrid") and scoped.scope.method.startswith("hybrid")
    ids, texts = fake_dense[-1]
    assert ids and all(100 <= i < 150 for i in ids)  # line units: unit i is line i + 1
    assert texts == [parsed.full_view.split("\n")[i] for i in ids]
    assert all(101 <= (item.anchor.line_start or 0) <= 150 for item in scoped.items)


def test_a_json_scope_of_several_matches_embeds_the_units_it_names(
    fake_dense: list[tuple[list[int], list[str]]],
) -> None:
    pad = "x" * 150  # a unit per item
    doc = {"a": [{"text": f"ferry {i} at the {'harbour' if i % 3 else 'bridge'} {pad}"} for i in range(30)],
           "b": {"text": "unrelated harbour"}}
    reader = JsonReader()
    parsed = _parse(reader, "doc.json", json.dumps(doc))
    batch = reader.locate(parsed, ReadIntent("ferry harbour", ("ferry harbour",), scope="$.a[0,5,9]", method="hybrid"),
                          300)
    assert batch.scope.units_scanned == 3 and batch.scope.method.startswith("hybrid")
    assert batch.items and {item.anchor.label for item in batch.items} <= {"$.a[0]", "$.a[5]", "$.a[9]"}
    assert fake_dense and {i for ids, _ in fake_dense for i in ids} <= {0, 5, 9}
    for ids, texts in fake_dense:
        for i, text in zip(ids, texts, strict=True):
            assert text == parsed.full_view[int(parsed.data["units"][1][i]) : int(parsed.data["units"][2][i])]


@pytest.mark.parametrize("method", sorted(CodeReader.methods))
def test_a_named_symbol_is_found_first_by_each_ranking_method(method: str, fake_dense: object) -> None:
    """Each method the Code Reader declares (region picks a run by where the slot's terms are, so there the
    boosts would only say which slots a unit serves; lexical's whole words miss compound identifiers)."""
    helpers = [f"def helper_{i}(rows):\n    '''Sum the ledger.'''\n    return sum(rows) + {i}\n" for i in range(40)]
    target = ["def parse_where(text):\n    '''Conditions of a where clause.'''\n    return text.split(',')\n"]
    callers = [f"def caller_{i}():\n    return parse_where('a=1') + helper_{i}([1])\n" for i in range(40)]
    reader = CodeReader()
    parsed = _parse(reader, "ledger.py", "\n\n".join(helpers + target + callers))
    batch = reader.locate(parsed, ReadIntent("parse_where", ("parse_where",), method=method), 200)
    assert batch.scope.method.startswith(method)
    assert any(item.text.startswith("def parse_where") for item in batch.items), [i.text for i in batch.items]


def test_matched_is_the_calibrated_judges_in_the_record_and_table_readers() -> None:
    """One shared word used to make a slot matched; now the judge decides, as for text."""
    rows = "city,note\n" + "".join(f"Town{i},quiet day {i} at the market\n" for i in range(60))
    rows += "Port,the harbour ferry was cancelled by the storm\n"
    table = TableReader()
    parsed = _parse(table, "log.csv", rows)
    asked = "why was the harbour ferry cancelled"
    good = table.locate(parsed, ReadIntent(asked, (asked,)), 300)
    assert good.coverage[0].status == "matched" and good.coverage[0].confidence is not None
    weak = table.locate(parsed, ReadIntent("storm surge barrier maintenance budget", ("storm surge barrier maintenance "
                                                                                       "budget",)), 300)
    assert weak.items and weak.coverage[0].status != "matched"  # "storm" alone is shared


def test_closest_labels_are_distinct_positive_and_skip_exposed_units() -> None:
    raw = np.array([0.0, 3.0, 2.0, 2.0, 1.0, 0.5])
    labels = ["a", "b", "c", "c", "d", "e"]
    assert closest_labels(raw, labels.__getitem__) == ("b", "c", "d")
    blocked = np.array([False, True, False, False, False, False])
    assert closest_labels(raw, labels.__getitem__, blocked) == ("c", "d", "e")
    assert closest_labels(None, labels.__getitem__) == ()


def test_a_ranking_reader_cannot_write_its_own_locate() -> None:
    with pytest.raises(TypeError, match="overrides locate"):
        type("Rogue", (TextReader,), {"locate": lambda self, *a, **k: None})


def test_a_matched_the_judge_did_not_give_does_not_vouch() -> None:
    """What the old template Reader did (write "matched" itself) is what the conformance suite now refuses."""
    assert not vouches(SlotCoverage("keeper", "matched", ("v17",)))
    parsed = _parse(TextReader(), "report.md", "The ferry was cancelled.\n\n" + "Quiet day at the market.\n" * 40)
    cov = TextReader().locate(parsed, ReadIntent("ferry cancelled", ("ferry cancelled",)), 300).coverage[0]
    assert cov.judged_by == "text" and vouches(cov)
    assert not vouches(replace(cov, status="matched" if cov.status != "matched" else "candidate"))


def test_the_pipeline_runs_its_stages_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """Query expansion, a reranker and passage extension plug into the one locate (readers.retrieval.locate)."""
    calls: list[str] = []
    text = "The HRCT scan showed ground glass.\n\nA chest scan is routine.\n\n" + "Filler line.\n" * 30

    def expand(parsed: Parsed, view: UnitView, intent: ReadIntent, index: UnitIndex) -> Adjust | None:
        calls.append("expand")
        return lambda j, raw: raw + index.scores("HRCT")[: len(raw)]

    def rerank(parsed: Parsed, view: UnitView, found: Found) -> Ranking:
        calls.append("rerank")
        return found.ranking

    def extend(parsed: Parsed, view: UnitView) -> np.ndarray | None:
        calls.append("extend")
        return np.arange(len(view.starts)) // 2  # units chosen in pairs

    reader = TextReader()
    monkeypatch.setattr(reader, "stages", Stages(expand, rerank, extend))
    parsed = _parse(reader, "scan.md", text)
    batch = reader.locate(parsed, ReadIntent("high resolution CT", ("high resolution CT",)), 300)
    assert calls == ["expand", "rerank", "extend"]
    assert any("HRCT scan" in item.text for item in batch.items)  # the expanded scores ranked it
    assert batch.coverage[0].slot == "high resolution CT"  # coverage judges the slot as asked
