#!/usr/bin/env python3
"""What issue 27's evidence additions cost per read, in process (no FUSE), on real documents.

Per document, medians of interleaved rounds:

* first read of an artifact (then kept in its parsed data): the abbreviation glossary
  (readers.retrieval.expand.glossary_of), the sentence groups (readers.retrieval.extend.groups_of), and for
  a PDF the page structure (readers.pdf.structure.structure_of: boilerplate pages and primary statements);
* every read: the Reader's whole locate (bm25, 1,290 passage characters) over the document's own
  questions (covidqa, financebench), without the additions (no pipeline stages; for a PDF also no
  structure adjustment and no statement rows) and with them, interleaved.

    .venv/bin/python scripts/bench_quality_costs.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from agent_sims import load_set  # noqa: E402

import readers.pdf.reader as pdf_reader  # noqa: E402
from readers.base import Parsed, ReadIntent  # noqa: E402
from readers.kit.source import MemorySource  # noqa: E402
from readers.pdf.reader import PdfReader  # noqa: E402
from readers.pdf.structure import structure_of  # noqa: E402
from readers.retrieval.expand import glossary_of  # noqa: E402
from readers.retrieval.extend import groups_of  # noqa: E402
from readers.retrieval.locate import RankingReader, Stages  # noqa: E402
from readers.text import TextReader  # noqa: E402

DOCS = (("covidqa", "covidqa-641"), ("covidqa", "covidqa-1588"), ("financebench", "3M_2022_10K"),
        ("financebench", "PEPSICO_2022_10K"))


def ms(step: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1000.0)
    return statistics.median(times)


@contextmanager
def without_additions(reader: RankingReader) -> Iterator[None]:
    """The Reader as before issue 27's additions: no pipeline stages, and for a PDF no structure adjustment
    and no statement rows (patched out for the block)."""
    saved = (reader.stages, pdf_reader._structure, pdf_reader._row_items)
    reader.stages = Stages()
    pdf_reader._structure = lambda *_a: None
    pdf_reader._row_items = lambda *_a: []
    try:
        yield
    finally:
        reader.stages, pdf_reader._structure, pdf_reader._row_items = saved


def locate(reader: RankingReader, parsed: Parsed, question: str) -> None:
    reader.locate(parsed, ReadIntent(question, (question,), method="bm25"), 1290)


def first_read(parsed: Parsed, rounds: int) -> tuple[float, float, str]:
    """Glossary, sentence groups and (PDF) page structure, each built anew as on an artifact's first read."""
    text, starts, ends = parsed.full_view, parsed.data["unit_starts"], parsed.data["unit_ends"]
    structure = "-"
    if "pages" in parsed.data:
        pages = parsed.data["pages"]
        texts = [text[int(a) : int(b)] for a, b in zip(pages.text_starts, pages.text_ends, strict=True)]
        took = ms(lambda: structure_of({}, lambda: texts, parsed.data["statements"]), rounds)
        structure = f"{took:.1f} ms"
    return (ms(lambda: glossary_of({}, text), rounds), ms(lambda: groups_of({}, text, starts, ends), rounds),
            structure)


def row(name: str, doc_id: str, rounds: int) -> str:
    docs, questions = load_set(name)
    doc = docs[doc_id]
    asked = [q.text for q in questions if q.doc_id == doc_id][:10]
    reader: RankingReader = PdfReader() if doc.pdf is not None else TextReader()
    data = doc.pdf.read_bytes() if doc.pdf is not None else doc.text.encode()
    parsed = reader.parse(MemorySource(doc.file, data))
    gloss, groups, structure = first_read(parsed, rounds)
    locate(reader, parsed, asked[0])  # the first-read work, kept in the parsed data
    times: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(rounds):  # interleaved
        for flag in (False, True):
            for q in asked:
                with (without_additions(reader) if not flag else _nothing()):
                    t0 = time.perf_counter()
                    locate(reader, parsed, q)
                    times[flag].append((time.perf_counter() - t0) * 1000.0)
    return (f"| {doc_id} | {len(parsed.full_view):,} | {gloss:.1f} ms | {groups:.1f} ms | {structure} "
            f"| {statistics.median(times[False]):.2f} ms | {statistics.median(times[True]):.2f} ms |")


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print("| document | chars | glossary (first read) | sentence groups (first read) | page structure (first read) "
          "| locate without the additions | locate with them |")
    print("|---|---|---|---|---|---|---|")
    for name, doc_id in DOCS:
        print(row(name, doc_id, args.rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
