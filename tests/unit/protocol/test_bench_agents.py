"""The simulated agents of scripts/bench_agents.py: grep paging, focus extraction, page scoring, oracle stop."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))

from agent_sims import (
    Doc,
    Grep,
    Question,
    Read,
    Seen,
    focus_suffix,
    grep_words,
    in_view,
    oracle_stop,
    pack_pages,
    pages_of,
)

from sparsefs.protocol.pack import EvidenceOut, EvidencePack, ExposureOut


def test_grep_words_drop_stopwords_and_question_words_keep_numbers() -> None:
    words = grep_words("What is the 3 year CAPEX of 3M's FY2022, and how many?")
    assert words == ["3", "year", "capex", "3m", "fy2022"]


def test_grep_ranks_by_distinct_words_then_file_order_and_pages_whole_lines() -> None:
    text = "alpha\nbeta gamma\nnothing\ngamma\n" + "beta " * 200
    grep = Grep(text)
    assert grep.ranked(["beta", "gamma"]) == [1, 3, 4]
    first, second = grep.pages(["beta", "gamma"], 2, page_chars=21)
    assert first.chars == len("2:beta gamma\n") + len("4:gamma\n")
    assert second.chars == 21  # a first line longer than the page is still shown, cut
    assert first.seen.spans == [(6, 16), (25, 30)]


def test_focus_suffix_quoted_unquoted_and_missing() -> None:
    steps = ["cat 'a b.pdf@refine=x y'    # more", "cat a.pdf@focus=p77:L45-46    # around the best passage"]
    assert focus_suffix(steps) == "focus=p77:L45-46"
    assert focus_suffix(["cat 'a b.txt@focus=L1-9%26x'    # around"]) == "focus=L1-9%26x"
    assert focus_suffix(['cat "a.txt@focus=L2-3"']) == "focus=L2-3"
    assert focus_suffix(["cat a.txt@full"]) is None


def test_pages_from_anchors_and_spans() -> None:
    exposure = ExposureOut(pack_chars=0, episode_exposed=0, full_view_chars=0, budget_left=0)
    items = [EvidenceOut(anchor=a, text="x") for a in ("p3:L1-2", "p7-9", "L4-5")]
    pack = EvidencePack(artifact="a.pdf", fingerprint="f", action="intent", episode="e1", decision="sparse",
                        exposure=exposure, evidence=items)
    assert pack_pages(pack) == {2, 6, 7, 8}
    doc = Doc("d", "one\n\ftwo\n\fthree", "d.pdf", page_starts=(0, 5, 10))
    assert pages_of(doc, [(4, 8)]) == {1}  # the line opening with a form feed lies on the page it opens
    assert pages_of(doc, [(0, 6)]) == {0, 1}


def test_oracle_stop_counts_until_in_view_and_fails_on_the_final_full_read() -> None:
    doc = Doc("d", "x" * 100, "d.txt")
    q = Question("q", "d", "x", ((10, 20),))
    reads = [Read("a", 5, Seen([(0, 5)])), Read("b", 7, Seen([(10, 19)])), Read("full", 100, Seen(everything=True))]
    assert oracle_stop(reads, in_view(q, doc, reads)) == (True, 12, 2)
    reads[1] = Read("b", 7, Seen([(10, 17)]))
    assert oracle_stop(reads, in_view(q, doc, reads)) == (False, 112, 3)
