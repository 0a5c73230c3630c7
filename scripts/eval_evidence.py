#!/usr/bin/env python3
"""The evidence benchmark (issue 6): location methods side by side, and the replay.

Part 1, methods. On the same questions of each QA set (``../shared/data/qa``:
covidqa-dev, qmsum), in one run: the baseline (BM25's top-1 fixed 1,500-char
window, stride 750: scripts/bench_intent.py's), and the Text Reader's
``locate`` with each location method (readers/retrieval/methods.py) at the same
budget; ``hybrid`` only when the dense extra is installed; ``adaptive`` when a
selector is given (``--adaptive-config PATH``, a JSON object mapping the size
bands ``<=8K``, ``8K-32K``, ``>32K`` (or ``default``) to a method or ``full``;
or ``--adaptive-selector``: readers/selection.py's choice per request group;
or the :data:`ADAPTIVE` hook). Hit (Fig. 8b): the returned spans cover >= 80%
of the annotated evidence characters; COVID-QA's short answer spans also
widened to their sentence, as bench_intent does. Recall: the mean covered
share of the evidence characters (the QMSum number at equal exposure: every
method gets the same budget). Exposure: characters of passage text (the
window's text for the baseline); latency: one locate with the document
parsed and indexed (embeddings are cached per document, as in the product).

Part 2, replay. Per document, its questions asked in order through the real
protocol (sparsefs.protocol.access.Protocol over an ArtifactCache on a temporary
workspace: grammar, selector, Gate, Reader, EvidencePack; first ``@intent``,
then ``@refine``, tests/replay.py): once as served (the protocol's own
selector), then with each location method forced (a chooser that always picks it). Native =
an agent reading the full view once per question (n x L); packs = the
characters the protocol exposed, Gate fallbacks and native fits included. Per
episode the exposure ratio (E + L) / L counts everything the episode exposed
(sparse packs E, plus L when the Gate fell back) over L; the Gate's bound says
it never exceeds 2.

On the evaluation split every method (and the baseline, its window = the
budget) also runs at the ``--sweep`` budgets: a table, and the plot
(``--plot``, default docs/evidence.png: hit rate and recall vs median exposure,
one curve per method), which needs matplotlib, a benchmark-only dependency.

Documents are split by the project's rule (xxh64 of the doc id even:
calibration, odd: evaluation); every table says which split it comes from.

    .venv/bin/python scripts/eval_evidence.py [--budget 1500] [--limit N]
        [--adaptive-config PATH] [--plot docs/evidence.png] [--no-calibration]
        [--hybrid-every 5] [--replay-hybrid] [--sweep 500,1000,1500,2000]

Hybrid embeds each question's BM25 shortlist on first sight (~0.3-0.8 s cold on
this machine), so by default it runs on every 5th question, with bm25 on the
same sample printed next to it, and the replay leaves it out.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import xxhash

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from bench_intent import Window, coverage, widen  # noqa: E402

from readers.base import Parsed, Reader, ReadIntent  # noqa: E402
from readers.kit.source import MemorySource  # noqa: E402
from readers.registry import group_of  # noqa: E402
from readers.retrieval.methods import dense_module  # noqa: E402
from readers.selection import SNIPPETS, Choice  # noqa: E402
from readers.text import TextReader  # noqa: E402
from sparsefs.artifacts.cache import ArtifactCache  # noqa: E402
from sparsefs.protocol.access import DEFAULT_PACK_CHARS, Protocol  # noqa: E402
from sparsefs.protocol.selecting import ConfigurationChooser, Selection  # noqa: E402
from sparsefs.source.rootfs import SourceRoot  # noqa: E402
from tests.replay import Task, TaskResult, replay  # noqa: E402

QA = ROOT.parent / "shared" / "data" / "qa"
SETS = ("covidqa-dev", "qmsum")
SPLITS = ("evaluation", "calibration")
METHODS = ("lexical", "bm25", "hybrid", "region")
HIT = 0.8
Span = tuple[int, int]
Selector = Callable[[Parsed, str], str]
"""(parsed document, question) -> a location method, or "full" for the full view."""

ADAPTIVE: Selector | None = None
"""Hook for the adaptive selector (the lead wires it); ``--adaptive-config`` overrides it."""


def split_of(doc_id: str) -> str:
    """The project's held-out rule: calibration when xxh64(doc_id) is even."""
    return "calibration" if int(xxhash.xxh64_hexdigest(doc_id.encode("utf-8")), 16) % 2 == 0 else "evaluation"


@dataclass(frozen=True)
class Question:
    doc_id: str
    text: str
    evidence: tuple[Span, ...]
    widened: tuple[Span, ...]


@dataclass
class Tally:
    """One method's results on one QA set and split."""

    hits: int = 0
    widened_hits: int = 0
    recall: list[float] = field(default_factory=list)
    exposed: list[int] = field(default_factory=list)
    ms: list[float] = field(default_factory=list)
    chosen: dict[str, int] = field(default_factory=dict)  # adaptive: methods the selector picked

    def add(self, q: Question, spans: Sequence[Span], exposed: int, ms: float, size: int) -> None:
        share = coverage(q.evidence, spans, size)
        self.hits += share >= HIT
        self.widened_hits += coverage(q.widened, spans, size) >= HIT
        self.recall.append(share)
        self.exposed.append(exposed)
        self.ms.append(ms)

    def hit_rate(self) -> float:
        return 100.0 * self.hits / max(1, len(self.exposed))

    def mean_recall(self) -> float:
        return 100.0 * float(np.mean(self.recall)) if self.recall else 0.0

    def row(self, name: str, widened: bool) -> str:
        n = max(1, len(self.exposed))
        cells = [name, str(len(self.exposed)), f"{self.hit_rate():.1f}%"]
        cells += [f"{100.0 * self.widened_hits / n:.1f}%"] if widened else []
        cells += [f"{self.mean_recall():.1f}%"]
        cells += [*_mp90(self.exposed, "{:,.0f}"), *_mp90(self.ms, "{:.2f}")]
        return "| " + " | ".join(cells) + " |"


def _mp90(values: Sequence[float], fmt: str) -> list[str]:
    return [fmt.format(float(np.median(values))), fmt.format(float(np.percentile(values, 90)))]


# -- data ---------------------------------------------------------------------------


def load(name: str, limit: int | None) -> tuple[dict[str, str], list[Question]]:
    docs: dict[str, str] = {}
    for line in (QA / f"{name}.docs.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        docs[str(record["doc_id"])] = str(record["text"])
    questions: list[Question] = []
    for line in (QA / f"{name}.questions.jsonl").read_text(encoding="utf-8").splitlines():
        q = json.loads(line)
        if q["unlocated"] or not q["evidence"]:
            continue
        text, evidence = docs[str(q["doc_id"])], tuple((int(s), int(e)) for s, e in q["evidence"])
        widened = tuple(widen(text, span) for span in evidence)
        questions.append(Question(str(q["doc_id"]), " ".join(str(q["question"]).split()), evidence, widened))
    return docs, questions[:limit]


def load_adaptive(path: Path) -> Selector:
    """A selector from a JSON table: size band (or "default") -> method or "full"."""
    table = json.loads(path.read_text(encoding="utf-8"))

    def choose(parsed: Parsed, question: str) -> str:
        n = len(parsed.full_view)
        band = "<=8K" if n <= 8_000 else "8K-32K" if n <= 32_000 else ">32K"
        return str(table.get(band, table.get("default", "bm25")))

    return choose


def selection_adaptive() -> Selector:
    """The shipped selector (readers/selection.py): the group of each read, the configuration it picks
    among the snippet methods this install offers."""
    from readers import selection

    methods = [m for m in METHODS if m != "hybrid" or dense_module() is not None]
    available = [SNIPPETS[m] for m in methods]

    def choose(parsed: Parsed, question: str) -> str:
        group = group_of(parsed.kind, len(parsed.full_view), "intent", question)
        config = selection.choose(group, available).config
        return "full" if config.exposure == "full-view" else str(config.method)

    return choose


# -- part 1: methods -----------------------------------------------------------------


def locate_spans(reader: TextReader, parsed: Parsed, question: str, method: str, budget: int) -> list[Span]:
    if method == "full":
        return [(0, len(parsed.full_view))]
    batch = reader.locate(parsed, ReadIntent(question, (question,), method=method), budget)
    return [(item.anchor.char_start, item.anchor.char_end) for item in batch.items]


def run_methods(
    docs: dict[str, str],
    questions: Sequence[Question],
    args: argparse.Namespace,
    adaptive: Selector | None,
    budget: int,
    parsed: dict[str, Parsed],
) -> dict[str, Tally]:
    """Every method on every question at ``budget`` (the baseline's window too when sweeping);
    hybrid on every ``args.hybrid_every``-th question only (embedding is slow), with bm25 on
    that same sample next to it. ``parsed`` caches documents (and their embeddings) across calls."""
    reader = TextReader()
    window = args.window if budget == args.budget else budget
    dense = dense_module() is not None
    names = ["baseline", *(m for m in METHODS if m != "hybrid" or dense)] + (["adaptive"] if adaptive else [])
    tallies = {name: Tally() for name in names}
    sample = f"bm25, on hybrid's questions (every {args.hybrid_every})"
    tallies.update({sample: Tally()} if dense and args.hybrid_every > 1 else {})
    windows: dict[str, Window] = {}
    for n, q in enumerate(questions):
        text = docs[q.doc_id]
        if q.doc_id not in parsed:
            parsed[q.doc_id] = reader.parse(MemorySource(f"{q.doc_id}.txt", text.encode()))
        if q.doc_id not in windows:
            windows[q.doc_id] = Window(text, window)
        t0 = time.perf_counter()
        span = windows[q.doc_id].top1(q.text)
        tallies["baseline"].add(q, [span], span[1] - span[0], _ms(t0), len(text))
        for name in names[1:]:
            if name == "hybrid" and n % args.hybrid_every:
                continue
            t0 = time.perf_counter()
            method = adaptive(parsed[q.doc_id], q.text) if name == "adaptive" and adaptive else name
            tallies[name].chosen[method] = tallies[name].chosen.get(method, 0) + (name == "adaptive")
            spans = locate_spans(reader, parsed[q.doc_id], q.text, method, budget)
            result = (q, spans, sum(e - s for s, e in spans), _ms(t0), len(text))
            tallies[name].add(*result)
            if name == "bm25" and sample in tallies and n % args.hybrid_every == 0:
                tallies[sample].add(*result)
    if dense and budget == args.budget:
        tallies["hybrid, warm (same questions again)"] = warm = Tally()
        for q in questions[:: args.hybrid_every]:
            t0 = time.perf_counter()
            spans = locate_spans(reader, parsed[q.doc_id], q.text, "hybrid", budget)
            warm.add(q, spans, sum(e - s for s, e in spans), _ms(t0), len(docs[q.doc_id]))
    return tallies


def _ms(start: float) -> float:
    return (time.perf_counter() - start) * 1000.0


def print_methods(name: str, split: str, n: int, docs: int, tallies: dict[str, Tally], budget: int) -> None:
    widened = name.startswith("covidqa")
    print(f"\n### {name}, {split} split: {n} questions over {docs} documents (budget {budget:,} chars)\n")
    head = ["method", "questions", "hit"] + (["hit (widened)"] if widened else []) + ["recall"]
    head += ["median exposed", "p90 exposed", "median ms", "p90 ms"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for method, tally in tallies.items():
        label = f"top-1 fixed {budget:,}-char BM25 window (baseline)" if method == "baseline" else method
        print(tally.row(label, widened))
    picked = {m: n for m, n in tallies.get("adaptive", Tally()).chosen.items() if n}
    print(f"\nadaptive picked: {picked}" if picked else "")


# -- part 2: replay through the protocol --------------------------------------------


SERVED = "served (the protocol's selector)"
"""Replay row where the protocol picks the configuration itself, as a mount would."""


class ForcedChooser(ConfigurationChooser):
    """Every read that opens an objective gets snippets by ``method`` (refine keeps it)."""

    def __init__(self, method: str) -> None:
        super().__init__()
        self.forced = SNIPPETS[method]

    def choose(self, reader: Reader, kind: str, full_view_chars: int, action: str, text: str) -> Selection:
        group = group_of(kind, full_view_chars, action, text)
        return Selection(group, Choice(self.forced, None, None, "forced by scripts/eval_evidence.py"))


@dataclass
class ReplayTally:
    tasks: int = 0
    reads: int = 0
    native: int = 0
    packs: int = 0
    hits: int = 0
    fallbacks: int = 0
    full_views: int = 0
    ratios: list[float] = field(default_factory=list)

    def add(self, result: TaskResult, length: int) -> None:
        self.tasks += 1
        self.reads += len(result.reads)
        self.native += length * len(result.reads)
        self.packs += result.exposed
        self.hits += result.hits
        self.fallbacks += sum(r.served.pack.decision == "fallback" for r in result.reads)
        self.full_views += sum(r.served.pack.full_view is not None and r.served.exposed_chars > 0 for r in result.reads)
        episodes: dict[str, int] = {}
        for r in result.reads:
            key = r.served.pack.episode or "no-episode"
            episodes[key] = episodes.get(key, 0) + r.served.exposed_chars
        self.ratios += [exposed / length for exposed in episodes.values()]

    def row(self, method: str) -> str:
        saved = 100.0 * (1 - self.packs / max(1, self.native))
        r = np.asarray(self.ratios)
        return (f"| {method} | {self.tasks} | {self.reads} | {self.native:,} | {self.packs:,} | {saved:.1f}% "
                f"| {self.fallbacks} | {self.full_views} | {100.0 * self.hits / max(1, self.reads):.1f}% "
                f"| {np.median(r):.2f} "
                f"| {np.percentile(r, 90):.2f} | {r.max():.4f} | {int((r > 2).sum())} of {len(r)} |")


def run_replay(docs: dict[str, str], questions: Sequence[Question], methods: Sequence[str]) -> dict[str, ReplayTally]:
    by_doc: dict[str, list[Question]] = {}
    for q in questions:
        by_doc.setdefault(q.doc_id, []).append(q)
    tasks = [
        Task(doc_id, docs[doc_id], tuple(q.text for q in qs), tuple(q.evidence for q in qs))
        for doc_id, qs in by_doc.items()
    ]
    tallies = {method: ReplayTally() for method in methods}
    tmp = Path(tempfile.mkdtemp(prefix="sparsefs-eval-evidence-"))
    try:
        for n, task in enumerate(tasks):
            (tmp / f"doc{n:03d}.txt").write_text(task.text, encoding="utf-8")
        root = SourceRoot.open(str(tmp))
        cache = ArtifactCache(root)
        for method in methods:
            chooser = None if method == SERVED else ForcedChooser(method)
            protocol = Protocol(cache, chooser=chooser)  # fresh episodes per method; parsed documents shared
            for n, task in enumerate(tasks):
                tallies[method].add(replay(protocol, f"doc{n:03d}.txt", task, "record"), len(task.text))
        root.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return tallies


def print_replay(name: str, split: str, tallies: dict[str, ReplayTally]) -> None:
    print(f"\n### Replay, {name}, {split} split (one task per document: @intent, then @refine per question)\n")
    print("| method | tasks | reads | native chars (n x L) | pack chars | saved | Gate fallbacks | full views | hit "
          "| (E+L)/L median | p90 | max | episodes > 2 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for method, tally in tallies.items():
        print(tally.row(method))


# -- plot --------------------------------------------------------------------------


def plot(sweeps: dict[str, dict[int, dict[str, Tally]]], path: Path) -> None:
    """Hit rate (top) and recall (bottom) vs median exposure, one curve per method over the budgets."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(sweeps), figsize=(6 * len(sweeps), 8), squeeze=False)
    for col, (name, by_budget) in enumerate(sweeps.items()):
        methods = [m for m in next(iter(by_budget.values())) if "," not in m]  # not bm25 on hybrid's sample
        for row, (what, value) in enumerate((("hit rate", Tally.hit_rate), ("recall", Tally.mean_recall))):
            ax = axes[row][col]
            off: list[str] = []
            for method in methods:
                points = sorted((float(np.median(t[method].exposed)), value(t[method])) for t in by_budget.values())
                if points[0][0] > 2 * max(by_budget):  # e.g. adaptive answering with the full view
                    off.append(f"{method}: {points[-1][1]:.0f}% at {points[0][0]:,.0f} chars (off the chart)")
                    continue
                style = "s--" if method == "baseline" else "o-"
                ax.plot(*zip(*points, strict=True), style, label=method + (" (sample)" if method == "hybrid" else ""))
            ax.set_title(f"{name}: {what} (evaluation split)")
            ax.set_xlabel(f"median exposed characters per read (budgets {', '.join(map(str, by_budget))})")
            ax.set_ylabel(f"{what}, %" + (" (>= 80% of evidence chars)" if row == 0 else ""))
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8, title="; ".join(off) or None, title_fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def print_sweep(name: str, by_budget: dict[int, dict[str, Tally]]) -> None:
    budgets = sorted(by_budget)
    print(f"\n### {name}, evaluation split: hit rate / recall (median exposed chars) per budget\n")
    print("| method | " + " | ".join(f"{b:,}" for b in budgets) + " |")
    print("|---|" + "---|" * len(budgets))
    for method in by_budget[budgets[0]]:
        cells = [by_budget[b][method] for b in budgets]
        print(f"| {method} | " + " | ".join(
            f"{t.hit_rate():.1f}% / {t.mean_recall():.1f}% ({float(np.median(t.exposed)):,.0f})" for t in cells
        ) + " |")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--budget", type=int, default=DEFAULT_PACK_CHARS, help="characters per read (locate)")
    parser.add_argument("--window", type=int, default=1500, help="baseline window size in characters")
    parser.add_argument("--limit", type=int, default=None, help="first N questions of each set only")
    parser.add_argument("--adaptive-config", type=Path, default=None, help="JSON: size band -> method")
    parser.add_argument("--plot", type=Path, default=ROOT / "docs" / "evidence.png")
    parser.add_argument("--no-calibration", action="store_true", help="evaluation split only")
    parser.add_argument("--adaptive-selector", action="store_true", help="adaptive = readers.selection's choice")
    parser.add_argument("--hybrid-every", type=int, default=5, help="hybrid on every N-th question (1: all)")
    parser.add_argument("--replay-hybrid", action="store_true", help="replay hybrid too (slow: embeds again)")
    parser.add_argument("--sweep", type=lambda v: [int(b) for b in v.split(",")], default=[500, 1000, 1500, 2000],
                        help="budgets for the plot and the sweep table (evaluation split; window = budget)")
    args = parser.parse_args(argv)
    adaptive = load_adaptive(args.adaptive_config) if args.adaptive_config else ADAPTIVE
    adaptive = selection_adaptive() if args.adaptive_selector else adaptive
    started = time.perf_counter()
    dense = dense_module() is not None
    print(f"Evidence benchmark. dense extra: {'available' if dense else 'NOT installed: hybrid rows skipped'}; "
          f"adaptive: {'on' if adaptive else 'no selector given (--adaptive-config), row skipped'}")
    splits = SPLITS[:1] if args.no_calibration else SPLITS
    sweeps: dict[str, dict[int, dict[str, Tally]]] = {}
    for name in SETS:
        docs, questions = load(name, args.limit)
        for split in splits:
            mine = [q for q in questions if split_of(q.doc_id) == split]
            parsed: dict[str, Parsed] = {}
            tallies = run_methods(docs, mine, args, adaptive, args.budget, parsed)
            print_methods(name, split, len(mine), len({q.doc_id for q in mine}), tallies, args.budget)
            if split == "evaluation":
                sweeps[name] = {args.budget: tallies}
                for budget in sorted(set(args.sweep) - {args.budget}):
                    sweeps[name][budget] = run_methods(docs, mine, args, adaptive, budget, parsed)
                sweeps[name] = dict(sorted(sweeps[name].items()))
            replayed = [SERVED, *(m for m in METHODS if m != "hybrid" or (dense and args.replay_hybrid))]
            print_replay(name, split, run_replay(docs, mine, replayed))
    for name, by_budget in sweeps.items():
        print_sweep(name, by_budget)
    plot(sweeps, args.plot)
    print(f"\nplot: {args.plot}; run time {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
