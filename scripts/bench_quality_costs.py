#!/usr/bin/env python3
"""What issue 27's evidence additions cost per read, in process (no FUSE), on real documents.

Per document, medians of interleaved rounds:

* first read of an artifact (then kept in its parsed data): the abbreviation glossary
  (readers.retrieval.expand.glossary), the sentence groups (readers.retrieval.extend.sentence_groups), and
  for a PDF the page structure (readers.pdf.structure: boilerplate pages and primary statements);
* every read: ranking and choosing all units with the BM25 method, before (rank_units + choose_units)
  and with the additions (the Reader's score adjustments; whole sentences for text), interleaved, over
  the document's own questions (covidqa, financebench); and the Reader's whole locate now (coverage
  judged, passages anchored) for scale.

    .venv/bin/python scripts/bench_quality_costs.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

import numpy as np  # noqa: E402
from agent_sims import load_set  # noqa: E402

from readers.base import Parsed, ReadIntent  # noqa: E402
from readers.kit.source import MemorySource  # noqa: E402
from readers.pdf.reader import PdfReader  # noqa: E402
from readers.pdf.reader import _structure as pdf_structure  # noqa: E402
from readers.pdf.reader import _view as pdf_view  # noqa: E402
from readers.pdf.structure import boilerplate_pages, primary_statements  # noqa: E402
from readers.retrieval.expand import glossary  # noqa: E402
from readers.retrieval.extend import choose_sentences, groups_of, sentence_groups  # noqa: E402
from readers.retrieval.methods import choose_units, rank_units  # noqa: E402
from readers.text import TextReader, scoped_view  # noqa: E402
from readers.text import _adjust as text_adjust  # noqa: E402

DOCS = (("covidqa", "covidqa-641"), ("covidqa", "covidqa-1588"), ("financebench", "3M_2022_10K"),
        ("financebench", "PEPSICO_2022_10K"))


def ms(step: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1000.0)
    return statistics.median(times)


def ranked_and_chosen(reader: TextReader | PdfReader, parsed: Parsed, question: str, additions: bool) -> None:
    """Ranking and choosing over all units with the BM25 method, with issue 27's additions (the Reader's
    score adjustments, whole sentences for text) or without them (as before)."""
    starts, ends = parsed.data["unit_starts"], parsed.data["unit_ends"]
    markers = parsed.data.get("markers")
    blocked = np.asarray(markers) if markers is not None else np.zeros(len(starts), dtype=np.bool_)
    intent = ReadIntent(question, (question,), method="bm25")
    index = parsed.data["index"]
    adjust = None
    if additions and isinstance(reader, TextReader):
        adjust = text_adjust(parsed, index, scoped_view(parsed, None), {0: question})
    elif additions:
        adjust = pdf_structure(parsed, pdf_view(parsed, None), question)
    ranking = rank_units(parsed, index, (starts, ends, 0), intent, {0: question}, blocked, silent=markers,
                         adjust=adjust)
    if additions and isinstance(reader, TextReader):
        group = groups_of(parsed.data, parsed.full_view, starts, ends)
        choose_sentences(ranking, index, (starts, ends, 0), blocked, 1290, None, group)
    else:
        choose_units(ranking, index, (starts, ends, 0), blocked, 1290, None)


def first_read(parsed: Parsed, rounds: int) -> tuple[float, float, str]:
    """Glossary, sentence groups and (PDF) page structure: each built once per artifact."""
    text, starts, ends = parsed.full_view, parsed.data["unit_starts"], parsed.data["unit_ends"]
    structure = "-"
    if "pages" in parsed.data:
        pages = parsed.data["pages"]
        texts = [text[int(a) : int(b)] for a, b in zip(pages.text_starts, pages.text_ends, strict=True)]
        took = ms(lambda: (boilerplate_pages(texts), primary_statements(texts, parsed.data["statements"])), rounds)
        structure = f"{took:.1f} ms"
    return ms(lambda: glossary(text), rounds), ms(lambda: sentence_groups(text, starts, ends), rounds), structure


def row(name: str, doc_id: str, rounds: int) -> str:
    docs, questions = load_set(name)
    doc = docs[doc_id]
    asked = [q.text for q in questions if q.doc_id == doc_id][:10]
    reader: TextReader | PdfReader = PdfReader() if doc.pdf is not None else TextReader()
    data = doc.pdf.read_bytes() if doc.pdf is not None else doc.text.encode()
    parsed = reader.parse(MemorySource(doc.file, data))
    gloss, groups, structure = first_read(parsed, rounds)
    reader.locate(parsed, ReadIntent(asked[0], (asked[0],), method="bm25"), 1290)  # first-read work done
    times = {flag: [] for flag in (False, True)}
    for _ in range(rounds):  # interleaved
        for flag in (False, True):
            for q in asked:
                t0 = time.perf_counter()
                ranked_and_chosen(reader, parsed, q, flag)
                times[flag].append((time.perf_counter() - t0) * 1000.0)
    locate = statistics.median(ms(lambda q=q: reader.locate(parsed, ReadIntent(q, (q,), method="bm25"), 1290), rounds)
                               for q in asked)
    return (f"| {doc_id} | {len(parsed.full_view):,} | {gloss:.1f} ms | {groups:.1f} ms | {structure} "
            f"| {statistics.median(times[False]):.2f} ms | {statistics.median(times[True]):.2f} ms | {locate:.1f} ms |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print("| document | chars | glossary (first read) | sentence groups (first read) | page structure (first read) "
          "| rank + choose, before | rank + choose, with the additions | whole locate now |")
    print("|---|---|---|---|---|---|---|---|")
    for name, doc_id in DOCS:
        print(row(name, doc_id, args.rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
