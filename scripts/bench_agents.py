#!/usr/bin/env python3
"""The benchmark that decides (issue 17): what an agent reads with and without SparseFS, side by side.

Every number counts EVERY character the agent reads. Sets (``../shared/data/qa``): covidqa (covidqa-dev
papers), oneline (the same papers with every newline replaced by a space: long one-line articles; same
length, so the evidence offsets hold), qmsum (meeting transcripts), financebench (financebench-dev, the
filings' PDFs). Questions with unlocated or no evidence (FinanceBench: no evidence page) are skipped.
Documents are split by the project's rule (scripts/eval_evidence.py ``split_of``: xxh64(doc_id) even =
calibration, odd = evaluation); every table says which split it is.

Methods, per question:

1. full read: the whole document text (FinanceBench: docs.jsonl's page texts joined by form feeds).
2. bm25 window: BM25's top-1 fixed 1,500-char window, stride 750 (scripts/bench_evidence.py).
3. grep agent: ``grep -n -i -E 'w1|w2|...'`` with the question's lowercase [a-z0-9]+ words minus stopwords,
   question words and one-letter words (numbers kept), lines ranked by distinct words contained (substring
   match, as grep; ties in file order), each cut at 500 chars, printed ``N:text``, 1,500-char pages (whole
   lines); page 1 here.
4. the whole SparseFS pack of ``@intent=<question>``: ``render(pack, "text")`` of what
   ``sparsefs.protocol.access.Protocol`` serves over an ``ArtifactCache`` on a temporary workspace (the
   path a mounted ``cat 'doc.txt@intent=...'`` takes, minus FUSE); the dense warm-up is off, the hybrid
   method runs whenever the selector picks it.
5. multi-step agents with an oracle stop (reads until the evidence is in view, counting the union of
   everything read so far): grep pages 1, 2, 3, then the full text; SparseFS ``@intent=q``, ``@refine=q``,
   the first pack's suggested ``@focus`` (taken from ``pack.next_steps``; skipped when none), then
   ``@full``. Success = the evidence came into view before the final full read (a first pack that is a
   native fit or the full view counts as success); cost = characters read until then, all of them on
   failure. All four SparseFS reads are always made (the jsonl keeps them); the @full also closes the
   episode, so each question opens a fresh one.
6. "matched" precision over the one-slot @intent packs that carry a coverage line: P(hit | matched) and
   P(matched | hit); any status other than "matched" is not matched. Multi-slot packs are reported apart
   (matched = every slot matched).

Hit: text sets, the spans shown cover >= 80% of the annotated evidence characters (covidqa/oneline
evidence widened to its sentences on the original text); grep lines are spans (line start .. at most
500 chars), the window is one span, a pack's spans are its items' ``span`` (a pack delivering the full view
covers everything; a preview or error covers nothing). The text Reader's full view is checked against the
file text per document; where it differs, item spans are located by their text (reported). FinanceBench,
a page hit: a pack's anchors (``pN``, ``pN-M``, 1-based) cite an evidence page; a grep line or the window
overlaps one (pages from docs.jsonl ``page_starts``). Overhead = whole pack chars minus its passage text.

    .venv/bin/python scripts/bench_agents.py [--split calibration|evaluation|both]
        [--sets covidqa,oneline,qmsum,financebench] [--limit N] [--jsonl PATH] [--from-jsonl PATH]
"""

from __future__ import annotations

import os

os.environ["SPARSEFS_DENSE_WARMUP"] = "0"

import argparse
import json
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from agent_sims import (  # noqa: E402
    FULL_DECISIONS,
    HIT,
    WINDOW,
    Doc,
    Grep,
    Question,
    Read,
    SparseAgent,
    full_read,
    grep_words,
    in_view,
    load_set,
    oracle_stop,
    share,
    window_read,
    write_workspace,
)
from bench_evidence import WindowBaseline  # noqa: E402
from eval_evidence import split_of  # noqa: E402

from readers.retrieval.methods import dense_module  # noqa: E402
from sparsefs.artifacts.cache import ArtifactCache  # noqa: E402
from sparsefs.protocol.access import Protocol  # noqa: E402
from sparsefs.source.rootfs import SourceRoot  # noqa: E402

SETS = ("covidqa", "oneline", "qmsum", "financebench")
SPLITS = ("calibration", "evaluation")
LABELS = {
    "full": "1. full read",
    "window": f"2. bm25 top-1 window ({WINDOW:,} chars)",
    "grep": "3. grep agent (page 1)",
    "pack": "4. SparseFS @intent pack (whole)",
    "multi-grep": "5a. multi-step grep (3 pages, then full text)",
    "multi-sparsefs": "5b. multi-step SparseFS (@intent, @refine, @focus, @full)",
}
Record = dict[str, Any]


# -- one question ---------------------------------------------------------------------------


def single(method: str, q: Question, doc: Doc, read: Read, **extra: Any) -> Record:
    got = share(q, doc, read.seen)
    return {"method": method, "chars": read.chars, "share": round(got, 4), "hit": got >= HIT, **extra}


def multi(method: str, q: Question, doc: Doc, reads: Sequence[Read]) -> Record:
    """The oracle stop; ``steps`` keep every read made, with the evidence share in view after it."""
    shares = in_view(q, doc, reads)
    success, chars, used = oracle_stop(reads, shares)
    steps = [{"read": r.what, "chars": r.chars, "decision": r.pack.decision if r.pack else None,
              "in_view": round(got, 4)} for r, got in zip(reads, shares, strict=True)]
    return {"method": method, "chars": chars, "hit": success, "reads_until_stop": used, "steps": steps}


def pack_record(q: Question, doc: Doc, read: Read, ms: float) -> Record:
    pack = read.pack
    assert pack is not None
    passages = sum(len(item.text) for item in pack.evidence)
    return single(
        "pack", q, doc, read, decision=pack.decision, slots=len(pack.slots),
        statuses=[c.status for c in pack.coverage], anchors=[item.anchor for item in pack.evidence],
        spans=[item.span for item in pack.evidence], passage_chars=passages, overhead=read.chars - passages,
        full_view_chars=len(pack.full_view) if pack.full_view is not None else None,
        cited_pages=sorted(read.seen.pages), ms=round(ms, 1),
    )


def run_question(q: Question, doc: Doc, grep: Grep, window: WindowBaseline, agent: SparseAgent) -> list[Record]:
    words = grep_words(q.text)
    pages = grep.pages(words, 3)
    t0 = time.perf_counter()
    packs = agent.reads(doc, q.text)
    ms = (time.perf_counter() - t0) * 1000.0
    return [
        single("full", q, doc, full_read(doc)),
        single("window", q, doc, window_read(window, q.text)),
        single("grep", q, doc, pages[0], words=words, lines=len(pages[0].seen.spans)),
        pack_record(q, doc, packs[0], ms),
        multi("multi-grep", q, doc, [*pages, full_read(doc)]),
        {**multi("multi-sparsefs", q, doc, packs), "ms_all_reads": round(ms, 1)},
    ]


# -- one set -----------------------------------------------------------------------------------


def chosen(questions: Sequence[Question], splits: Sequence[str], limit: int | None) -> list[Question]:
    """The questions of the splits asked for, the first ``limit`` of each split."""
    out: list[Question] = []
    for split in splits:
        out += [q for q in questions if split_of(q.doc_id) == split][:limit]
    return out


def inexact_views(cache: ArtifactCache, docs: Sequence[Doc]) -> frozenset[str]:
    """Text documents whose parsed full view is not the file text (their item spans are then located)."""
    return frozenset(d.doc_id for d in docs if d.pdf is None and cache.load(d.file).parsed.full_view != d.text)


def run_set(name: str, args: argparse.Namespace, sink: IO[str] | None) -> tuple[list[Record], str]:
    """One ArtifactCache per set (each document parsed once); one Protocol per split (since issue 27 a pack
    does not depend on what was asked before it, so this only keeps each split's episodes apart)."""
    docs, questions = load_set(name)
    asked = chosen(questions, args.splits, args.limit)
    used = [docs[d] for d in dict.fromkeys(q.doc_id for q in asked)]
    tmp = Path(tempfile.mkdtemp(prefix=f"sparsefs-bench-agents-{name}-"))
    root, records = None, []
    try:
        write_workspace(tmp, used)
        root = SourceRoot.open(str(tmp))
        cache = ArtifactCache(root)
        inexact = inexact_views(cache, used)
        for split in args.splits:
            protocol = Protocol(cache)
            mine = [q for q in asked if split_of(q.doc_id) == split]
            records += run_questions(name, mine, docs, SparseAgent(protocol, inexact), sink)
            protocol.chooser.close()
    finally:
        if root is not None:
            root.close()
        shutil.rmtree(tmp, ignore_errors=True)
    note = f"{len(inexact)} of {sum(d.pdf is None for d in used)} text documents have a full view that differs"
    return records, note + (f" ({', '.join(sorted(inexact))}): spans located by text" if inexact else "")


def run_questions(
    name: str, asked: Sequence[Question], docs: dict[str, Doc], agent: SparseAgent, sink: IO[str] | None
) -> list[Record]:
    greps: dict[str, Grep] = {}
    windows: dict[str, WindowBaseline] = {}
    records: list[Record] = []
    for q in asked:
        doc = docs[q.doc_id]
        grep = greps.setdefault(q.doc_id, Grep(doc.text))
        if q.doc_id not in windows:
            windows[q.doc_id] = WindowBaseline(doc.text, WINDOW)
        for record in run_question(q, doc, grep, windows[q.doc_id], agent):
            record = {"set": name, "split": split_of(q.doc_id), "qid": q.qid, "doc_id": q.doc_id, **record}
            records.append(record)
            if sink is not None:
                sink.write(json.dumps(record) + "\n")
    return records


# -- report ----------------------------------------------------------------------------------------


def _pct(k: int, n: int) -> str:
    return f"{k}/{n} ({100.0 * k / n:.1f}%)" if n else "0/0"


def _median(values: Sequence[float]) -> str:
    return f"{statistics.median(values):,.0f}" if values else "-"


def table(records: Sequence[Record]) -> list[str]:
    by = {m: [r for r in records if r["method"] == m] for m in LABELS}
    full_total = sum(r["chars"] for r in by["full"]) or 1
    lines = ["| method | hit (multi-step: success) | median chars | mean chars | total chars vs full reads |",
             "|---|---|---|---|---|"]
    for method, label in LABELS.items():
        rows = by[method]
        chars = [r["chars"] for r in rows]
        total = 100.0 * sum(chars) / full_total
        mean = f"{statistics.fmean(chars):,.0f}" if chars else "-"
        lines.append(f"| {label} | {_pct(sum(r['hit'] for r in rows), len(rows))} | {_median(chars)} | {mean} "
                     f"| {total:.1f}% (reads {100.0 - total:.1f}% less) |")
    return lines


def matched_lines(packs: Sequence[Record]) -> list[str]:
    one = [r for r in packs if r["slots"] <= 1 and r["statuses"]]
    matched = [r for r in one if r["statuses"][0] == "matched"]
    hits = [r for r in one if r["hit"]]
    misses = len(one) - len(hits)
    many = [r for r in packs if r["slots"] > 1 and r["statuses"]]
    all_matched = [r for r in many if all(s == "matched" for s in r["statuses"])]
    return [
        f"- \"matched\", one-slot @intent packs with a coverage line ({len(one)} of {len(packs)} packs; the rest "
        f"have no coverage line (native fit, full view, preview, error) or several slots):",
        f"  precision P(hit | matched) = {_pct(sum(r['hit'] for r in matched), len(matched))}; "
        f"recall P(matched | hit) = {_pct(sum(r in matched for r in hits), len(hits))}; "
        f"\"matched\" on misses: {_pct(len(matched) - sum(r['hit'] for r in matched), misses)}",
        f"- multi-slot @intent packs: {len(many)}; every slot matched in {len(all_matched)}, of which hits: "
        f"{_pct(sum(r['hit'] for r in all_matched), len(all_matched))}",
    ]


def overhead_cells(packs: Sequence[Record]) -> list[str]:
    sparse = [r for r in packs if r["decision"] == "sparse"]
    one = [r for r in sparse if r["slots"] <= 1]
    whole = [r["chars"] - r["full_view_chars"] for r in packs if r["full_view_chars"] is not None]
    return [str(len(packs)), _median([r["chars"] for r in packs]), str(len(sparse)),
            _median([r["chars"] for r in sparse]), _median([r["passage_chars"] for r in sparse]),
            _median([r["overhead"] for r in sparse]), f"{_median([r['overhead'] for r in one])} ({len(one)})",
            f"{_median(whole)} ({len(whole)})"]


def section(name: str, split: str, records: Sequence[Record]) -> list[str]:
    packs = [r for r in records if r["method"] == "pack"]
    docs = len({r["doc_id"] for r in packs})
    role = "the project calibrates on it" if split == "calibration" else "held out from calibration"
    agents = [r for r in records if r["method"] == "multi-sparsefs"]
    focus = sum(any(s["read"].startswith("@focus=") for s in r["steps"]) for r in agents)
    stops = Counter(r["steps"][r["reads_until_stop"] - 1]["read"].split("=")[0] for r in agents if r["hit"])
    whole = sum(r["steps"][r["reads_until_stop"] - 1]["decision"] in FULL_DECISIONS for r in agents if r["hit"])
    decisions = Counter(r["decision"] for r in packs)
    return [
        f"\n### {name} — {split} split ({role}): {len(packs)} questions over {docs} documents\n",
        *table(records),
        "",
        *matched_lines(packs),
        f"- @intent decisions: {dict(decisions.most_common())}; a suggested @focus in {_pct(focus, len(packs))} "
        f"first packs; median time for the four SparseFS reads "
        f"{_median([r['ms_all_reads'] for r in records if r['method'] == 'multi-sparsefs'])} ms",
        "- multi-step SparseFS successes by the read that brought the evidence into view: "
        f"{dict(stops.most_common())}; "
        f"{whole} of them were reads that delivered the whole full view (native fit, fallback, selected full "
        "view: counted as success, since they came before the final @full)",
        "- pack overhead (whole pack minus passage text), sparse packs: median "
        + _median([r["overhead"] for r in packs if r["decision"] == "sparse"]) + " chars",
    ]


def report(results: dict[str, list[Record]], notes: dict[str, str]) -> list[str]:
    out: list[str] = []
    overhead = ["| set | split | @intent packs | median whole pack | sparse packs | median sparse pack "
                "| median passage text | median overhead | median overhead, one slot (n) "
                "| full-view packs: median pack minus full view (n) |",
                "|---|---|---|---|---|---|---|---|---|---|"]
    for name, records in results.items():
        out.append(f"\n## {name}\n\n{notes[name]}")
        for split in SPLITS:
            mine = [r for r in records if r["split"] == split]
            if mine:
                out += section(name, split, mine)
                packs = [r for r in mine if r["method"] == "pack"]
                overhead.append(f"| {name} | {split} | " + " | ".join(overhead_cells(packs)) + " |")
    out += ["\n## Pack overhead per set (issue 17 target: median <= 150 chars for a one-slot intent)\n", *overhead]
    return out


def _commit() -> str:
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=False).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return "unknown"
    return head + (" (uncommitted changes)" if dirty else "")


def reprint(path: Path) -> int:
    """The report of an earlier run's records, without running anything."""
    results: dict[str, list[Record]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        results.setdefault(record["set"], []).append(record)
    print(f"# Agents side by side (issue 17), from {path}")
    print("\n".join(report(results, dict.fromkeys(results, f"records of {path}"))))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--split", choices=("calibration", "evaluation", "both"), default="both")
    parser.add_argument("--sets", default=",".join(SETS), help="comma-separated, of " + ", ".join(SETS))
    parser.add_argument("--limit", type=int, default=None, help="first N questions of each split of each set")
    parser.add_argument("--jsonl", type=Path, default=None, help="one record per question per method")
    parser.add_argument("--from-jsonl", type=Path, default=None, help="print the report of an earlier --jsonl")
    args = parser.parse_args(argv)
    if args.from_jsonl:
        return reprint(args.from_jsonl)
    args.splits = SPLITS if args.split == "both" else (args.split,)
    names = [s.strip() for s in args.sets.split(",") if s.strip()]
    if unknown := sorted(set(names) - set(SETS)):
        parser.error(f"unknown sets: {', '.join(unknown)}")
    started = time.perf_counter()
    print(f"# Agents side by side (issue 17)\n\n`{shlex.join([sys.executable, *sys.argv])}`\n")
    print(f"code: {ROOT} at {_commit()}; dense extra: {'yes' if dense_module() else 'no'}; "
          f"SPARSEFS_DENSE_WARMUP=0; {os.cpu_count()} CPUs")
    sink = args.jsonl.open("w", encoding="utf-8") if args.jsonl else None
    results, notes = {}, {}
    try:
        for name in names:
            t0 = time.perf_counter()
            results[name], note = run_set(name, args, sink)
            notes[name] = f"{note}; {time.perf_counter() - t0:.0f} s"
    finally:
        if sink is not None:
            sink.close()
    print("\n".join(report(results, notes)))
    print(f"\nrun time {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
