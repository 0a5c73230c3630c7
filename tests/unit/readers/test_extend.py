"""Choosing whole sentences (readers.retrieval.extend): pure logic over segmented text."""

from __future__ import annotations

import numpy as np

from readers.retrieval.bm25index import Selection, UnitIndex
from readers.retrieval.extend import GROUPS_KEY, MAX_GROUP_CHARS, choose_sentences, grouped, groups_of, sentence_groups
from readers.retrieval.methods import LABELS, Ranking
from readers.retrieval.segment import UNIT_CAP, segment

LONG = ("The models suggested that without a vaccine, school closures would be unlikely to affect the pandemic, "
        "an estimated 35,000 to 60,000 ventilators would be needed, up to an estimated 7.3 billion surgical masks "
        "or respirators would be required, and perhaps most important, if vaccine development did not start "
        "before the virus was introduced, it was unlikely that a significant number of hospitalizations and "
        "deaths could be averted by vaccination in the first wave of the pandemic in the United States.")
TEXT = f"Short opening sentence about the study design here. {LONG} Another sentence follows it here.\n\nNew para."


def units_of(text: str) -> tuple[np.ndarray, np.ndarray]:
    seg = segment(text, prose=True, markdown=False)
    return np.array([s for s, _ in seg.units]), np.array([e for _, e in seg.units])


def test_pieces_of_one_long_sentence_share_a_group() -> None:
    starts, ends = units_of(TEXT)
    assert len(LONG) > UNIT_CAP  # the segmenter cuts it into pieces
    group = sentence_groups(TEXT, starts, ends)
    at = TEXT.index(LONG)
    pieces = [u for u in range(len(starts)) if starts[u] < at + len(LONG) and ends[u] > at]  # units holding it
    assert len(pieces) >= 2
    assert len({int(group[u]) for u in pieces}) == 1
    assert len(set(group.tolist())) == len(starts) - len(pieces) + 1


def test_line_breaks_and_sentence_ends_split_groups() -> None:
    text = "Net sales 120 135\nCost of sales 80 90\nGross profit 40 45"
    starts = np.array([0, 18, 38])
    ends = np.array([17, 37, len(text)])
    assert sentence_groups(text, starts, ends).tolist() == [0, 1, 2]  # table rows stay whole units
    prose = "One sentence ends here. Two"
    assert sentence_groups(prose, np.array([0, 24]), np.array([23, 27])).tolist() == [0, 1]


def test_groups_never_exceed_the_cap() -> None:
    words = " ".join(["word"] * 600)  # a run-on 'sentence' of ~3,000 chars without an end
    starts, ends = units_of(words)
    group = sentence_groups(words, starts, ends)
    for g in set(group.tolist()):
        members = np.flatnonzero(group == g)
        assert ends[members[-1]] - starts[members[0]] <= MAX_GROUP_CHARS


def test_grouped_scores_are_the_best_piece() -> None:
    starts, ends = np.array([0, 10, 20, 30]), np.array([9, 19, 29, 39])
    ranked = {0: np.array([1.0, 3.0, 0.0, 2.0])}
    ranking = Ranking(ranked, ranked, LABELS["bm25"])
    by, g_starts, g_ends, g_blocked = grouped(ranking, starts, ends, np.array([False, False, True, False]),
                                              np.array([0, 0, 1, 1]))
    assert by.ranked[0].tolist() == [3.0, 2.0]
    assert g_starts.tolist() == [0, 20] and g_ends.tolist() == [19, 39]
    assert g_blocked.tolist() == [False, True]
    assert by.raw is ranking.raw  # coverage still sees the units' own scores


def chosen(query: str, max_chars: int) -> Selection:
    """choose_sentences over TEXT for one BM25-ranked query."""
    starts, ends = units_of(TEXT)
    index = UnitIndex([TEXT[s:e] for s, e in zip(starts, ends, strict=True)])
    raw = index.scores(query)
    ranking = Ranking({0: raw}, {0: raw}, LABELS["bm25"])
    blocked = np.zeros(len(starts), dtype=np.bool_)
    return choose_sentences(ranking, index, (starts, ends, 0), blocked, max_chars, None,
                            sentence_groups(TEXT, starts, ends))


def test_choose_sentences_takes_whole_sentences_within_the_budget() -> None:
    sel = chosen("ventilators", 1_000)
    shown = [(int(sel.starts[r[0]]), int(sel.ends[r[-1]])) for r in sel.passages()]
    at = TEXT.index(LONG)
    assert any(s <= at and at + len(LONG) <= e for s, e in shown)  # the whole sentence, not its piece
    assert sel.cost <= 1_000


def test_groups_of_caches_one_array() -> None:
    starts, ends = units_of(TEXT)
    data: dict[str, object] = {}
    group = groups_of(data, TEXT, starts, ends)
    assert data[GROUPS_KEY] is group
    assert groups_of(data, TEXT, starts, ends) is group


def test_a_small_budget_chooses_pieces_again() -> None:
    sel = chosen("ventilators masks", 300)
    assert 0 < sel.cost <= UNIT_CAP  # a first piece alone, not its whole 500-char sentence
