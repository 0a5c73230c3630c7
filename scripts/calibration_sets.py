"""Verbatim and cross-file calibration requests, made from COVID-QA's calibration questions.

* verbatim: the question prefixed with :data:`VERBATIM_PREFIX` (what an agent
  writes when it must quote the source); it reads as the ``verbatim`` intent
  type, and succeeds only when the passages hold *all* the annotated evidence
  characters (a quote cut short is not a quote).
* cross-file: the question asked of a folder of :data:`FOLDER_SIZE` calibration
  documents (:class:`MemoryFolder`, in memory, through the real FolderReader),
  one of them the question's; it succeeds when the passages cover >= 80% of the
  evidence as it sits in the folder's full view. With 8 members and at most 5
  files read, the file ranking is part of what is measured.

Every :data:`EVERY`-th question is used for each, to keep the run short.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from readers.base import Parsed, Reader
from readers.folder import FolderReader, Member, MemberView
from readers.text import TextReader
from scripts.bench_evidence import MemorySource

VERBATIM_PREFIX = "Quote verbatim the passage that answers: "
FOLDER_SIZE = 8
EVERY = 2
Span = tuple[int, int]


@dataclass
class MemoryFolder:
    """A CollectionSource over documents held in memory (members are ``<doc_id>.txt``)."""

    docs: dict[str, str]
    reader: TextReader = field(default_factory=TextReader)
    parses: dict[str, Parsed] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return "papers"

    def members(self) -> tuple[Sequence[Member], int]:
        return [Member(f"{doc_id}.txt", len(text.encode()), 0) for doc_id, text in self.docs.items()], 0

    def parsed(self, rel: str) -> tuple[Reader, Parsed]:
        if rel not in self.parses:
            text = self.docs[rel.removesuffix(".txt")]
            self.parses[rel] = self.reader.parse(MemorySource(rel, text.encode()))
        return self.reader, self.parses[rel]

    def cached(self, rel: str) -> bool:
        return True


def folders_of(docs: dict[str, str]) -> dict[str, Parsed]:
    """doc_id -> the parsed folder that holds it (documents in id order, FOLDER_SIZE per folder)."""
    ids = sorted(docs)
    by_doc: dict[str, Parsed] = {}
    for i in range(0, len(ids), FOLDER_SIZE):
        chunk = ids[i : i + FOLDER_SIZE]
        parsed = FolderReader().parse_collection(MemoryFolder({d: docs[d] for d in chunk}), time_budget_s=600)
        by_doc.update(dict.fromkeys(chunk, parsed))
    return by_doc


def in_folder(folder: Parsed, doc_id: str, spans: Sequence[Span]) -> tuple[Span, ...]:
    """The evidence spans of ``doc_id`` shifted to where that member sits in the folder's full view."""
    views: list[MemberView] = folder.data["collection"].views
    view = next(v for v in views if v.rel == f"{doc_id}.txt")
    return tuple((view.start + s, view.start + e) for s, e in spans)
