"""Location methods of the Text Reader (readers/retrieval/methods.py, ``ReadIntent.method``).

Every method keeps the Reader contract (exact slices, budget, exclude, one
coverage entry per slot); each also does what it is for: lexical finds a
verbatim number BM25 cannot, region returns one contiguous region, hybrid
re-ranks BM25's shortlist by the dense similarity and falls back to BM25 with
a flag without the dense extra. The whole conformance suite also runs with
lexical and region forced.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import readers.retrieval.methods as lm
import tests.unit.readers.test_reader_conformance_text as text_conformance
from readers.base import Batch, Parsed, ReadIntent
from readers.retrieval.bm25index import tokenize
from readers.text import TextReader
from tests.reader_conformance import MemorySource, Sample

_FILLER = [
    "The committee met on a Tuesday to review the harbour budget.",
    "Several members asked for more time to read the annex.",
    "The chair summarised the previous minutes without comment.",
    "Weather delayed the ferry schedule for most of the spring.",
    "A survey of local shops reported steady footfall in the old town.",
    "The library extended its opening hours during the exam period.",
]
NUMBER_SENTENCE = "Inspectors counted 1,234 damaged mooring posts along the north quay."
READER = TextReader()


def document() -> str:
    """Paragraphs of filler with one sentence holding a number, and a long discussion of tides."""
    paragraphs = [" ".join(_FILLER[(n + k) % len(_FILLER)] for k in range(4)) for n in range(12)]
    paragraphs[7] = f"{_FILLER[0]} {NUMBER_SENTENCE} {_FILLER[1]}"
    tides = " ".join(
        f"Tide gauge reading {n} showed the spring tide rising over the quay wall." for n in range(8)
    )
    paragraphs[3] = tides
    return "\n\n".join(paragraphs) + "\n"


@pytest.fixture(scope="module")
def parsed() -> Parsed:
    return READER.parse(MemorySource("minutes.txt", document().encode()))


def locate(parsed: Parsed, method: str, text: str, max_chars: int = 600, **kwargs: Any) -> Batch:
    slots = kwargs.pop("slots", (text,))
    return READER.locate(parsed, ReadIntent(text, slots, method=method), max_chars, **kwargs)


def spans(batch: Batch) -> list[tuple[int, int]]:
    return [(item.anchor.char_start, item.anchor.char_end) for item in batch.items]


@pytest.fixture
def no_dense(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lm, "dense_module", lambda: None)


@pytest.fixture
def fake_dense(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list[int]]]:
    """A dense module whose cosine is 0.9 for units about mooring posts, 0 for the others."""
    calls: list[tuple[str, list[int]]] = []

    def unit_similarities(parsed: Parsed, key: str, ids: Any, texts_of: Any, query: str) -> np.ndarray:
        texts = texts_of(np.asarray(ids))
        calls.append((key, [int(i) for i in ids]))
        return np.array([0.9 if "mooring" in t.lower() else 0.0 for t in texts], dtype=np.float32)

    monkeypatch.setattr(lm, "dense_module", lambda: SimpleNamespace(unit_similarities=unit_similarities))
    return calls


@pytest.mark.parametrize("method", ["lexical", "bm25", "hybrid", "region"])
@pytest.mark.parametrize("budget", [150, 600])
def test_every_method_returns_exact_slices_within_budget(
    parsed: Parsed, method: str, budget: int, no_dense: None
) -> None:
    batch = locate(parsed, method, "spring tide over the quay wall", budget)
    assert batch.items
    for item in batch.items:
        assert parsed.full_view[item.anchor.char_start : item.anchor.char_end] == item.text
    total = sum(len(item.text) for item in batch.items)
    assert total <= max(budget, max(len(item.text) for item in batch.items))
    assert batch.scope.method.startswith("bm25" if method == "hybrid" else method)


@pytest.mark.parametrize("method", ["lexical", "bm25", "hybrid", "region"])
def test_every_method_honours_exclude_and_covers_each_slot(parsed: Parsed, method: str, no_dense: None) -> None:
    slots = ("spring tide", "damaged mooring posts", "zebra crossing")
    first = locate(parsed, method, "tides and posts", slots=slots)
    assert [c.slot for c in first.coverage] == list(slots)
    assert first.coverage[2].status == "unresolved"
    assert first.coverage[0].status in ("matched", "candidate")
    again = locate(parsed, method, "tides and posts", slots=slots, exclude=tuple(spans(first)))
    assert [c.slot for c in again.coverage] == list(slots)
    for s, e in spans(again):
        assert all(e <= xs or s >= xe for xs, xe in spans(first)), (method, (s, e))


def test_lexical_finds_a_verbatim_number_written_without_its_comma(parsed: Parsed) -> None:
    lexical = locate(parsed, "lexical", "how many were 1234?", 200)
    assert lexical.items and NUMBER_SENTENCE in lexical.items[0].text
    assert lexical.coverage[0].status in ("matched", "candidate")
    assert not any("1,234" in item.text for item in locate(parsed, "bm25", "how many were 1234?", 200).items)


def test_lexical_terms_are_whole_words_and_numbers_with_a_rarity_weight() -> None:
    text = "The posts stand. We counted 1,250 posts. Outposts: 12500 of them."
    starts, ends = np.array([0, 17, 41]), np.array([16, 40, 65])
    scores = lm.lexical_scores(text, starts, ends, "POSTS 1250")
    assert scores[2] == 0.0  # neither "outposts" nor 12500 is a verbatim match
    assert scores[0] == pytest.approx(np.log(1 + 3 / 2))  # "posts" is in two of three units
    assert scores[1] == pytest.approx(np.log(1 + 3 / 2) + np.log(1 + 3 / 1))  # and 1,250 in one


def test_region_is_one_contiguous_run_grown_to_the_budget(parsed: Parsed) -> None:
    batch = locate(parsed, "region", "spring tide gauge reading", 700)
    assert len(batch.items) == 1
    (item,) = batch.items
    assert "Tide gauge reading" in item.text
    assert 500 <= len(item.text) <= 700  # grown until one more sentence would not fit
    assert batch.scope.method.startswith("region")


def test_region_terms_leave_out_question_phrasing() -> None:
    assert lm.region_terms("Summarize the discussion about the tide gauges") == tokenize("tide gauges")
    assert lm.region_terms("What did the group think of the ferry when discussing weather?") == tokenize(
        "ferry weather"
    )
    assert lm.region_terms("What was discussed?") == tokenize("What was discussed?")  # nothing else: all of it


def test_region_grows_to_the_run_that_uses_the_most_of_the_budget() -> None:
    bounds = [0, 200, 350, 450, 650, 750]
    starts, ends = np.array(bounds[:-1]), np.array(bounds[1:])
    free = np.zeros(5, dtype=np.bool_)
    # a unit a side in turn would stop at units 1-2 (250 chars): unit 3 no longer fits after unit 1
    assert lm._grow(starts, ends, free, 400, 2, 2) == (2, 4)
    blocked = free.copy()
    blocked[4] = True
    assert lm._grow(starts, ends, blocked, 400, 2, 2) == (2, 3)
    assert lm._grow(starts, ends, free, 100, 2, 2) == (2, 2)  # the core alone already fills it


def test_region_stays_inside_the_discussion_rather_than_a_stray_mention(monkeypatch: pytest.MonkeyPatch) -> None:
    n = 60
    starts = np.arange(n) * 100
    ends = starts + 100
    presence = np.zeros((3, n))
    presence[:, 5] = 1.0  # one unit naming all three terms, far from where they are discussed
    for term, units in enumerate(([30, 32, 34, 36], [31, 35], [33])):
        presence[term, units] = 1.0
    free = np.zeros(n, dtype=np.bool_)
    lo, hi = lm._best_window(starts, ends, free, presence, 300)
    assert 30 <= lo <= hi <= 36
    monkeypatch.setattr(lm, "REGION_CONTEXT", 1.0)  # no wider window: the budget-sized peak wins
    assert lm._best_window(starts, ends, free, presence, 300) == (5, 5)


def test_hybrid_without_the_dense_extra_is_bm25_with_a_flag(parsed: Parsed, no_dense: None) -> None:
    hybrid = locate(parsed, "hybrid", "damaged posts on the quay")
    bm25 = locate(parsed, "bm25", "damaged posts on the quay")
    assert "hybrid-unavailable" in hybrid.flags
    assert spans(hybrid) == spans(bm25)
    assert hybrid.scope == bm25.scope


def test_hybrid_reranks_the_bm25_shortlist_by_dense_similarity(fake_dense: list[tuple[str, list[int]]]) -> None:
    paragraphs = [*_FILLER[:2], "The old quay was painted white again.", *_FILLER[2:4],
                  "Mooring posts at the quay were broken.", *_FILLER[4:]]
    parsed = READER.parse(MemorySource("harbour.txt", "\n\n".join(paragraphs).encode()))
    bm25 = locate(parsed, "bm25", "the quay", 60)  # both quay sentences match about alike
    hybrid = locate(parsed, "hybrid", "the quay", 60)  # room for one of them
    assert [item.text for item in bm25.items] == ["The old quay was painted white again."]
    assert [item.text for item in hybrid.items] == ["Mooring posts at the quay were broken."]
    assert hybrid.scope.method.startswith("hybrid") and not hybrid.flags
    key, ids = fake_dense[0]
    assert key == lm.DENSE_KEY and 0 < len(ids) <= lm.HYBRID_SHORTLIST


def test_hybrid_fusion_weights_bm25_and_cosine_and_never_lifts_unscored_units() -> None:
    scores = np.array([2.0, 1.0, 0.0, 1.6])
    blocked = np.array([False, False, False, True])
    asked: list[list[int]] = []

    def cosine(ids: list[int]) -> np.ndarray:
        asked.append(ids)
        return np.array([-0.2, 0.9])[: len(ids)]

    fused = lm.hybrid_scores(scores, blocked, cosine)
    w = lm.HYBRID_DENSE_WEIGHT
    assert asked == [[0, 1]]  # the shortlist: scored, unblocked units, best first
    assert fused == pytest.approx([(1 - w), (1 - w) * 0.5 + w * 0.9, 0.0, (1 - w) * 0.8])


def test_hybrid_with_dense_keeps_the_contract(parsed: Parsed, fake_dense: list[tuple[str, list[int]]]) -> None:
    first = locate(parsed, "hybrid", "mooring posts and the quay wall", 300)
    assert first.items and sum(len(item.text) for item in first.items) <= 300
    again = locate(parsed, "hybrid", "mooring posts and the quay wall", 300, exclude=tuple(spans(first)))
    for item in again.items:
        assert parsed.full_view[item.anchor.char_start : item.anchor.char_end] == item.text
        s, e = item.anchor.char_start, item.anchor.char_end
        assert all(e <= xs or s >= xe for xs, xe in spans(first))
    assert len(fake_dense) == 2 and all(len(ids) <= lm.HYBRID_SHORTLIST for _, ids in fake_dense)


def test_hybrid_with_the_real_dense_extra(parsed: Parsed) -> None:
    if lm.dense_module() is None:
        pytest.skip("dense extra not installed")
    batch = locate(parsed, "hybrid", "how many mooring posts were damaged", 300)
    assert batch.scope.method.startswith("hybrid") and "hybrid-unavailable" not in batch.flags
    assert any("mooring" in item.text for item in batch.items)
    assert f"dense:{lm.DENSE_KEY}" in parsed.data


def test_an_unknown_method_is_the_default(parsed: Parsed) -> None:
    assert spans(locate(parsed, "telepathy", "spring tide")) == spans(locate(parsed, "bm25", "spring tide"))


class _Forced(text_conformance.TestTextConformance):
    method = "bm25"

    def locate(
        self, sample: Sample, parsed: Parsed, max_chars: int, exclude: tuple[tuple[int, int], ...] = ()
    ) -> Batch:
        intent = ReadIntent(sample.intent, sample.slots or (sample.intent,), method=self.method)
        return self.reader.locate(parsed, intent, max_chars, exclude)


class TestLexicalConformance(_Forced):
    method = "lexical"


class TestRegionConformance(_Forced):
    method = "region"


def test_forced_method_reaches_the_reader(parsed: Parsed) -> None:
    batch = TestRegionConformance().locate(Sample("x.txt", b"", "spring tide"), parsed, 600)
    assert len(batch.items) == 1 and batch.scope.method.startswith("region")
