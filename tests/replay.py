"""Scripted multi-question replay over the shared QA sets (used by tests and scripts/bench_episodes.py).

One *task* is one document with its questions asked in order, the way an
agent works through a question set. Two agents are replayed side by side:

* ``record``: the first question is ``@intent``, every later one ``@refine``:
  the episode's evidence record keeps delivered spans out of later packs;
* ``no-record``: every question is a fresh ``@intent`` (a new objective, so a
  new episode with an empty record), as an agent without the protocol's
  record would ask.

Each read goes through the same path a mounted ``cat 'doc.txt@...'`` takes
(grammar, protocol, Gate, Reader), minus FUSE. Repeated characters are
characters of the document a read exposes that an earlier read of the same
task already exposed; hit means the annotated evidence is >= 80% covered by
everything the task has exposed so far (what the agent holds after the read).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from sparsefs.protocol.access import Protocol, Served
from sparsefs.protocol.grammar import parse_suffix
from sparsefs.protocol.steps import encode_anchor

QA = Path(__file__).resolve().parents[2] / "shared" / "data" / "qa"
HIT_SHARE = 0.8
Span = tuple[int, int]


@dataclass(frozen=True)
class Task:
    doc_id: str
    text: str
    questions: tuple[str, ...]
    evidence: tuple[tuple[Span, ...], ...]


@dataclass
class Read:
    action: str
    served: Served
    spans: list[Span]
    repeated_chars: int
    hit: bool


@dataclass
class TaskResult:
    mode: str
    reads: list[Read] = field(default_factory=list)

    @property
    def exposed(self) -> int:
        return sum(r.served.exposed_chars for r in self.reads)

    @property
    def repeated(self) -> int:
        return sum(r.repeated_chars for r in self.reads)

    @property
    def hits(self) -> int:
        return sum(r.hit for r in self.reads)


def load_tasks(name: str, limit: int | None = None, min_questions: int = 2) -> list[Task]:
    """Documents of ``qa/<name>`` with their questions, in file order."""
    docs = {d["doc_id"]: d for d in map(orjson.loads, (QA / f"{name}.docs.jsonl").read_bytes().splitlines())}
    questions: dict[str, list[dict[str, object]]] = {}
    for q in map(orjson.loads, (QA / f"{name}.questions.jsonl").read_bytes().splitlines()):
        if q["evidence"] and not q.get("unlocated"):
            questions.setdefault(q["doc_id"], []).append(q)
    tasks = [_task(docs[doc_id], qs) for doc_id, qs in questions.items() if len(qs) >= min_questions]
    return tasks[:limit]


def _task(doc: dict[str, str], qs: Sequence[dict[str, object]]) -> Task:
    evidence = tuple(tuple((int(a), int(b)) for a, b in q["evidence"]) for q in qs)  # type: ignore[attr-defined]
    return Task(doc["doc_id"], doc["text"], tuple(str(q["question"]) for q in qs), evidence)


def replay(protocol: Protocol, rel: str, task: Task, mode: str) -> TaskResult:
    """Ask the task's questions in order; see the module docstring for the two modes."""
    result = TaskResult(mode)
    delivered: list[Span] = []
    for n, (question, evidence) in enumerate(zip(task.questions, task.evidence, strict=True)):
        action = "intent" if n == 0 or mode == "no-record" else "refine"
        served = protocol.serve(rel, parse_suffix(f"{action}={encode_anchor(_one_line(question))}"))
        spans = exposed_spans(served)
        repeated = overlap(spans, delivered)
        delivered = merge([*delivered, *spans])
        result.reads.append(Read(action, served, spans, repeated, covered(evidence, delivered) >= HIT_SHARE))
    return result


def exposed_spans(served: Served) -> list[Span]:
    """The document characters a pack exposes: its passages, or the whole full view."""
    pack = served.pack
    if pack.full_view is not None and served.exposed_chars:
        return [(0, len(pack.full_view))]
    return [item.span for item in pack.evidence if item.span is not None]


def merge(spans: Sequence[Span]) -> list[Span]:
    out: list[Span] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def overlap(spans: Sequence[Span], held: Sequence[Span]) -> int:
    """Characters of ``spans`` inside ``held`` (both as sets of characters)."""
    return sum(max(0, min(e, he) - max(s, hs)) for (s, e), (hs, he) in itertools.product(merge(spans), held))


def covered(evidence: Sequence[Span], held: Sequence[Span]) -> float:
    total = sum(e - s for s, e in merge(evidence))
    return overlap(evidence, held) / total if total else 0.0


def _one_line(text: str) -> str:
    return " ".join(text.split())


def write_workspace(root: Path, tasks: Sequence[Task]) -> Iterator[tuple[str, Task]]:
    """One ``<doc>.txt`` per task under ``root``; yields (relative path, task)."""
    for n, task in enumerate(tasks):
        rel = f"doc{n:03d}.txt"
        (root / rel).write_text(task.text, encoding="utf-8")
        yield rel, task
