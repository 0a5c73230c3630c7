"""Calibration requests beyond the QA sets: facts over the PDFs, and verbatim and cross-file
requests made from COVID-QA's calibration questions.

* PDF facts (:data:`PDF_REQUESTS`): a question and a snippet copied from the
  PDF that answers it (all four PDFs are calibration documents).

* verbatim: the question prefixed with :data:`VERBATIM_PREFIX` (what an agent
  writes when it must quote the source); it reads as the ``verbatim`` intent
  type, and succeeds only when the passages hold *all* the annotated evidence
  characters (a quote cut short is not a quote).
* cross-file: folders of :data:`FOLDER_SIZE` calibration documents (a short
  last one joins the one before; :class:`MemoryFolder`, in memory, through the
  real FolderReader). One-file requests ask a question of the folder that holds
  its document; two-file requests (:func:`pairs`) ask two questions about two
  different documents of one folder as two slots ("Q1; Q2"). Either succeeds
  when the passages cover >= 80% of all the evidence as it sits in the folder's
  full view. With 8-10 members and at most 5 files read, the file ranking is
  part of what is measured.

Every :data:`EVERY`-th question is used for each, to keep the run short.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from readers.base import Parsed, Reader
from readers.folder import FolderReader, Member, MemberView
from readers.kit.source import MemorySource
from readers.text import TextReader

PDF_REQUESTS: tuple[tuple[str, str, str], ...] = (
    ("pdf/filings/3M_2022_10K.pdf", "How many people did 3M employ at the end of 2022?",
     "the Company employed approximately 92,000 people"),
    ("pdf/filings/3M_2022_10K.pdf", "When and where was 3M incorporated?",
     "3M Company was incorporated in 1929 under the laws of the State of Delaware"),
    ("pdf/filings/3M_2022_10K.pdf", "What are 3M's reportable business segments?",
     "The reportable segments are Safety and Industrial, Transportation and Electronics, Health Care, and Consumer"),
    ("pdf/filings/3M_2022_10K.pdf", "How many manufacturing facilities does 3M operate in the United States?",
     "The Company operates 61 manufacturing"),
    ("pdf/filings/3M_2022_10K.pdf", "How many shareholders of record did 3M have in January 2023?",
     "there were 62,488 shareholders of record"),
    ("pdf/filings/3M_2022_10K.pdf", "When will 3M exit PFAS manufacturing?",
     "exiting all PFAS manufacturing by the end of 2025"),
    ("pdf/filings/3M_2022_10K.pdf", "When did the Aearo Entities initiate chapter 11 proceedings?",
     "On July 26, 2022, Aearo Technologies and certain of its related entities"),
    ("pdf/filings/3M_2022_10K.pdf", "How much did 3M spend on research and development in 2022?",
     "Research, development and related expenses totaled $1.9 billion, $2.0 billion and $1.9 billion"),
    ("pdf/filings/3M_2022_10K.pdf", "Who audited 3M's internal control over financial reporting?",
     "has been audited by PricewaterhouseCoopers LLP"),
    ("pdf/filings/3M_2022_10K.pdf", "Where are 3M's principal executive offices?",
     "3M Center, St. Paul, Minnesota 55144"),
    ("pdf/filings/PEPSICO_2023Q1_EARNINGS.pdf", "What full-year 2023 organic revenue growth does PepsiCo now expect?",
     "deliver 8 percent organic revenue growth (previously 6"),
    ("pdf/filings/PEPSICO_2023Q1_EARNINGS.pdf", "What core effective tax rate does PepsiCo expect for 2023?",
     "A core annual effective tax rate of 20 percent"),
    ("pdf/filings/PEPSICO_2023Q1_EARNINGS.pdf", "How much cash will PepsiCo return to shareholders in 2023?",
     "Total cash returns to shareholders of approximately $7.7 billion"),
    ("pdf/filings/PEPSICO_2023Q1_EARNINGS.pdf", "What 2023 core EPS does the PepsiCo guidance imply?",
     "imply 2023 core EPS of $7.27 (previously $7.20)"),
    ("pdf/filings/PEPSICO_2023Q1_EARNINGS.pdf", "When did PepsiCo report its first-quarter 2023 results?",
     "April 25, 2023 - PepsiCo, Inc. (NASDAQ: PEP) today reported results"),
    ("pdf/filings/PEPSICO_2023Q1_EARNINGS.pdf", "How large is the expected foreign exchange translation headwind?",
     "an approximate 2-percentage-point foreign exchange"),
    ("pdf/papers/2020.acl-main.447.pdf", "Which tools process the PDFs in S2ORC?",
     "using SCIENCEPARSE v3.0.09 and GROBID"),
    ("pdf/papers/2020.acl-main.447.pdf", "How many PDFs were selected for processing?",
     "30.5M PDFs are selected for"),
    ("pdf/papers/2020.acl-main.447.pdf", "What is used to extract title and authors from each PDF?",
     "We use SCIENCEPARSE to extract title and authors from each PDF"),
    ("pdf/papers/2020.acl-main.447.pdf", "How many papers come from LaTeX source derived from arXiv?",
     "We process 1.5M papers from LATEX source derived from arXiv"),
    ("pdf/papers/2020.acl-main.447.pdf", "How many PDFs are associated with the initial paper clusters?",
     "There are around 31.3M PDFs associated with approximately 200M initial paper clusters"),
    ("pdf/papers/2020.acl-main.447.pdf", "How accurate is citation span detection from LaTeX source?",
     "and equation detection is near-perfect"),
    ("pdf/papers/2304.02623v1.pdf", "What are the three components of AI support for expository writing?",
     "we argue that there are three components: 1) supporting the reading and evidence-seeking"),
    ("pdf/papers/2304.02623v1.pdf", "How many patients find a mistake in their clinical notes?",
     "reports that 1 in 5 patients find a mistake in their clinical notes"),
    ("pdf/papers/2304.02623v1.pdf", "What do instruction-tuned models behave like when summarizing?",
     "recent instruction-tuned models are merely"),
    ("pdf/papers/2304.02623v1.pdf", "How do the authors characterize expository writing?",
     "We characterize expository writing as evidence-based and knowledge-generating"),
)
"""(PDF under ../shared/data, question, a snippet copied from the PDF's text that answers it)."""

VERBATIM_PREFIX = "Quote verbatim the passage that answers: "
FOLDER_SIZE = 8
MIN_FOLDER = 5
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
    starts = list(range(0, len(ids), FOLDER_SIZE))
    if len(starts) > 1 and len(ids) - starts[-1] < MIN_FOLDER:
        starts.pop()  # a short last folder joins the one before it (8, 8, 10 rather than 8, 8, 8, 2)
    for i, start in enumerate(starts):
        chunk = ids[start : starts[i + 1] if i + 1 < len(starts) else len(ids)]
        parsed = FolderReader().parse_collection(MemoryFolder({d: docs[d] for d in chunk}), time_budget_s=600)
        by_doc.update(dict.fromkeys(chunk, parsed))
    return by_doc


def pairs(questions: Sequence[tuple[str, str]], folders: dict[str, Parsed]) -> list[tuple[int, int]]:
    """Two-file requests: each (doc_id, question) with the next one from another document of its folder."""
    found: list[tuple[int, int]] = []
    for i, (doc, _) in enumerate(questions):
        later = (j for j in range(i + 1, len(questions)) if questions[j][0] != doc)
        partner = next((j for j in later if folders[questions[j][0]] is folders[doc]), None)
        if partner is not None and all(i not in p and partner not in p for p in found):
            found.append((i, partner))
    return found


def in_folder(folder: Parsed, doc_id: str, spans: Sequence[Span]) -> tuple[Span, ...]:
    """The evidence spans of ``doc_id`` shifted to where that member sits in the folder's full view."""
    views: list[MemberView] = folder.data["collection"].views
    view = next(v for v in views if v.rel == f"{doc_id}.txt")
    return tuple((view.start + s, view.start + e) for s, e in spans)
