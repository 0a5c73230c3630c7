"""The simulated agents of scripts/bench_agents.py: what each reads (in characters) and what came into view.

Data: the QA sets of ``../shared/data/qa`` as four sets (covidqa, oneline = covidqa with every newline
replaced by a space, qmsum, financebench). What a read brings into view is a :class:`Seen`: character
spans of the document text, pages (FinanceBench, 0-based) and whether it was the whole document.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import os
import re
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench_evidence import WindowBaseline, coverage
from bench_intent import widen

from sparsefs.protocol.access import Protocol
from sparsefs.protocol.grammar import GrammarError, parse_suffix
from sparsefs.protocol.pack import EvidencePack
from sparsefs.protocol.steps import encode_anchor

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
QA = DATA / "qa"
PDF_DIRS = (DATA / "pdf" / "financebench", DATA / "pdf" / "filings")
SOURCES = {"covidqa": "covidqa-dev", "oneline": "covidqa-dev", "qmsum": "qmsum", "financebench": "financebench-dev"}
HIT = 0.8
PAGE_CHARS = 1_500
LINE_CHARS = 500
WINDOW = 1_500
FULL_DECISIONS = frozenset({"full", "native-fit", "fallback", "reuse-full-view"})
Span = tuple[int, int]

_STOPWORD_TEXT = """
a about above after again against all also am an and any are as at be because been before being below between both
but by can could did do does doing down during each either few for from further had has have having he her here
hers him his i if in into is it its itself just me more most my no nor not now of off on once only or other our out
over own same she should so some such than that the their them then there these they this those through to too under
until up very was we were what when where which while who whom whose why will with would you your yours how many much
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())
"""English stopwords and question words the grep agent leaves out of its pattern (numbers are kept)."""


@dataclass(frozen=True)
class Doc:
    doc_id: str
    text: str
    file: str  # its name in the workspace
    page_starts: tuple[int, ...] | None = None  # FinanceBench: offsets of the pages in ``text``
    pdf: Path | None = None  # FinanceBench: the PDF the workspace holds


@dataclass(frozen=True)
class Question:
    qid: str
    doc_id: str
    text: str
    evidence: tuple[Span, ...]  # scored spans (covidqa/oneline: widened to their sentences)
    pages: frozenset[int] | None = None  # FinanceBench: evidence pages, 0-based


@dataclass
class Seen:
    """What a read (or everything read so far) brought into view."""

    spans: list[Span] = field(default_factory=list)
    pages: set[int] = field(default_factory=set)
    everything: bool = False

    def add(self, other: Seen) -> None:
        self.spans += other.spans
        self.pages |= other.pages
        self.everything |= other.everything


@dataclass(frozen=True)
class Read:
    """One read of an agent: what it was, the characters it cost, what it showed."""

    what: str
    chars: int
    seen: Seen
    pack: EvidencePack | None = None


# -- data ------------------------------------------------------------------------------


def _jsonl(path: Path) -> Iterator[dict[str, object]]:
    with path.open(encoding="utf-8") as f:
        yield from (json.loads(line) for line in f if line.strip())


def load_set(name: str) -> tuple[dict[str, Doc], list[Question]]:
    """Documents and the questions with located evidence (FinanceBench: with evidence pages)."""
    source, pdf = SOURCES[name], name == "financebench"
    raw = {str(d["doc_id"]): d for d in _jsonl(QA / f"{source}.docs.jsonl")}
    docs = {doc_id: _doc(name, doc_id, d) for doc_id, d in raw.items()}
    questions = []
    for q in _jsonl(QA / f"{source}.questions.jsonl"):
        if q["unlocated"] or not q["evidence"] or (pdf and not q.get("evidence_pages")):
            continue
        doc_id = str(q["doc_id"])
        spans = tuple((int(s), int(e)) for s, e in q["evidence"])  # type: ignore[attr-defined]
        if source == "covidqa-dev":  # widened on the original text, so oneline scores the same characters
            spans = tuple(widen(str(raw[doc_id]["text"]), span) for span in spans)
        pages = frozenset(int(p) for p in q["evidence_pages"]) if pdf else None  # type: ignore[attr-defined]
        questions.append(Question(str(q["qid"]), doc_id, " ".join(str(q["question"]).split()), spans, pages))
    return docs, questions


def _doc(name: str, doc_id: str, record: dict[str, object]) -> Doc:
    text = str(record["text"])
    if name == "oneline":
        return Doc(doc_id, text.replace("\n", " "), f"{doc_id}.txt")
    if name != "financebench":
        return Doc(doc_id, text, f"{doc_id}.txt")
    pdf = next(p for p in (d / f"{doc_id}.pdf" for d in PDF_DIRS) if p.exists())
    starts = tuple(int(s) for s in record["page_starts"])  # type: ignore[attr-defined]
    return Doc(doc_id, text, f"{doc_id}.pdf", starts, pdf)


def write_workspace(root: Path, docs: Sequence[Doc]) -> None:
    """Each document as ``<doc_id>.txt``, or its PDF as ``<doc_id>.pdf`` (a hard link or a copy: the
    source root refuses symlinks that leave it)."""
    for doc in docs:
        target = root / doc.file
        if doc.pdf is None:
            target.write_text(doc.text, encoding="utf-8")
            continue
        try:
            os.link(doc.pdf, target)
        except OSError:
            shutil.copyfile(doc.pdf, target)


# -- scoring ------------------------------------------------------------------------------


def pages_of(doc: Doc, spans: Sequence[Span]) -> set[int]:
    """0-based pages the spans overlap (a line's leading form feed belongs to the page it opens)."""
    assert doc.page_starts is not None
    pages: set[int] = set()
    for start, end in spans:
        if doc.text.startswith("\f", start) and end - start > 1:
            start += 1
        first = bisect.bisect_right(doc.page_starts, start) - 1
        last = bisect.bisect_right(doc.page_starts, max(start, end - 1)) - 1
        pages.update(range(max(0, first), last + 1))
    return pages


def share(q: Question, doc: Doc, seen: Seen) -> float:
    """Covered share of the evidence characters; FinanceBench: 1.0 when an evidence page is in view."""
    if seen.everything:
        return 1.0
    if q.pages is not None:
        return float(bool((seen.pages | pages_of(doc, seen.spans)) & q.pages))
    return coverage(q.evidence, seen.spans)


def hit(q: Question, doc: Doc, seen: Seen) -> bool:
    return share(q, doc, seen) >= HIT


def in_view(q: Question, doc: Doc, reads: Sequence[Read]) -> list[float]:
    """The evidence share in view after each read (the union of everything read so far)."""
    seen, shares = Seen(), []
    for read in reads:
        seen.add(read.seen)
        shares.append(share(q, doc, seen))
    return shares


def oracle_stop(reads: Sequence[Read], shares: Sequence[float]) -> tuple[bool, int, int]:
    """(success, chars read, reads made): stop once the evidence is in view; success when that
    happened before the last read (the full read)."""
    chars = 0
    for n, (read, got) in enumerate(zip(reads, shares, strict=True), 1):
        chars += read.chars
        if got >= HIT:
            return n < len(reads), chars, n
    return False, chars, len(reads)


# -- baselines: full read, BM25 window, grep ----------------------------------------------


def full_read(doc: Doc) -> Read:
    return Read("full text", len(doc.text), Seen(everything=True))


def window_read(window: WindowBaseline, question: str) -> Read:
    span = window.top1(question)
    return Read(f"bm25 window {span[0]}-{span[1]}", span[1] - span[0], Seen([span]))


def grep_words(question: str) -> list[str]:
    """The question's lowercase [a-z0-9]+ tokens, minus stopwords and one-letter words, numbers kept."""
    tokens = re.findall(r"[a-z0-9]+", question.lower())
    return list(dict.fromkeys(t for t in tokens if t.isdigit() or (t not in STOPWORDS and len(t) > 1)))


class Grep:
    """``grep -n -i -E 'w1|w2|...'`` over one document, best lines first, shown in pages."""

    def __init__(self, text: str) -> None:
        self.lines = text.split("\n")
        self.lowered = [line.lower() for line in self.lines]
        self.starts = [0]
        for line in self.lines[:-1]:
            self.starts.append(self.starts[-1] + len(line) + 1)

    def ranked(self, words: Sequence[str]) -> list[int]:
        """Matching line indexes by distinct question words contained (substring, as grep), ties in file order."""
        counts = [(sum(w in low for w in words), n) for n, low in enumerate(self.lowered)] if words else []
        return [n for c, n in sorted((-c, n) for c, n in counts if c)]

    def pages(self, words: Sequence[str], pages: int, page_chars: int = PAGE_CHARS) -> list[Read]:
        """The first ``pages`` pages of output: ``N:line`` cut at LINE_CHARS, whole lines up to page_chars."""
        lines, out = self.ranked(words), []
        for p in range(1, pages + 1):
            chars, spans = 0, []
            while lines:
                n = lines[0]
                shown = self.lines[n][:LINE_CHARS]
                printed = len(f"{n + 1}:{shown}\n")
                if chars + printed > page_chars:
                    if not spans:  # a first line longer than the page is still shown, cut
                        chars, spans = page_chars, [(self.starts[n], self.starts[n] + page_chars)]
                        lines.pop(0)
                    break
                chars += printed
                spans.append((self.starts[n], self.starts[n] + len(shown)))
                lines.pop(0)
            out.append(Read(f"grep page {p}", chars, Seen(spans)))
        return out


# -- SparseFS -------------------------------------------------------------------------------


def pack_pages(pack: EvidencePack) -> set[int]:
    """0-based pages the evidence anchors cite (``p12``, ``p12:L3-9``, ``p12-14``)."""
    pages: set[int] = set()
    for item in pack.evidence:
        m = re.match(r"p(\d+)(?:-p?(\d+))?", item.anchor)
        if m:
            pages.update(range(int(m.group(1)) - 1, int(m.group(2) or m.group(1))))
    return pages


def pack_seen(pack: EvidencePack, doc: Doc, exact_spans: bool = True) -> Seen:
    """Everything for a delivered full view, nothing for a preview or error, else the items' spans
    (text sets; located by their text when the full view is not the file text) and cited pages."""
    if pack.decision in FULL_DECISIONS:
        return Seen(everything=True)
    spans = [item.span if exact_spans else _located(doc.text, item.text, item.span) for item in pack.evidence]
    return Seen([s for s in spans if s is not None], pack_pages(pack) if doc.page_starts else set())


def _located(text: str, passage: str, near: Span | None) -> Span | None:
    start = text.find(passage, max(0, (near or (0, 0))[0] - 2_000))
    start = text.find(passage) if start < 0 else start
    return (start, start + len(passage)) if start >= 0 and passage else None


def focus_suffix(steps: Sequence[str]) -> str | None:
    """The suffix of the first next step that suggests ``@focus=``, as written (percent-encoded):
    after the '@' up to the closing quote, or to the first blank when the path is not quoted."""
    for step in steps:
        at = step.find("@focus=")
        if at < 0:
            continue
        rest = step[at + 1:]
        quote = next((c for c in reversed(step[:at]) if c in "'\""), None)
        end = rest.find(quote) if quote else -1
        return rest[:end] if end >= 0 else rest.split()[0]
    return None


class SparseAgent:
    """``@intent=q``, ``@refine=q``, the first pack's suggested ``@focus``, then ``@full``."""

    def __init__(self, protocol: Protocol, inexact: frozenset[str] = frozenset()) -> None:
        self.protocol = protocol
        self.inexact = inexact  # documents whose full view is not the file text: spans located by text

    def read(self, doc: Doc, suffix: str) -> Read:
        served = self.protocol.serve(doc.file, parse_suffix(suffix))  # its text: exactly what the agent reads
        pack = served.pack
        return Read("@" + suffix, served.exposed_chars, pack_seen(pack, doc, doc.doc_id not in self.inexact), pack)

    def reads(self, doc: Doc, question: str) -> list[Read]:
        """All four reads; the @full at the end also closes the episode, so the next question (even the
        same words) opens a fresh one."""
        asked = encode_anchor(question)
        first = self.read(doc, f"intent={asked}")
        out = [first, self.read(doc, f"refine={asked}")]
        focus = focus_suffix(first.pack.next_steps if first.pack else [])
        if focus:
            with contextlib.suppress(GrammarError):  # a suggestion the grammar refuses is no read
                out.append(self.read(doc, focus))
        return [*out, self.read(doc, "full")]
