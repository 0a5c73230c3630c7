#!/usr/bin/env python3
"""The one-read part of scripts/bench_agents.py, fast enough to compare evidence ideas (issue 27 item 3).

Per question, only the whole SparseFS ``@intent=<question>`` pack (method 4 of bench_agents: the same
Protocol over an ArtifactCache, the same hit rule and character count), plus the grep agent's page 1
and the BM25 window for reference, on one split. Two runs' jsonl compare question by question
(``--compare A B``: hits gained and lost, McNemar's exact p), so an idea is kept on the calibration split
and the evaluation split is run once, at the end.

    .venv/bin/python scripts/bench_packs.py [--split calibration|evaluation] [--sets covidqa,oneline,financebench]
        [--limit N] [--jsonl PATH]
    .venv/bin/python scripts/bench_packs.py --compare BEFORE.jsonl AFTER.jsonl
"""

from __future__ import annotations

import os

os.environ["SPARSEFS_DENSE_WARMUP"] = "0"

import argparse
import json
import math
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

import agent_sims as sims  # noqa: E402
from bench_agents import _commit, chosen, inexact_views  # noqa: E402
from bench_evidence import WindowBaseline  # noqa: E402

from sparsefs.artifacts.cache import ArtifactCache  # noqa: E402
from sparsefs.protocol.access import Protocol  # noqa: E402
from sparsefs.protocol.steps import encode_anchor  # noqa: E402
from sparsefs.source.rootfs import SourceRoot  # noqa: E402

SETS = ("covidqa", "oneline", "qmsum", "financebench")
HIT = 0.8
Record = dict[str, Any]


def pack_record(agent: sims.SparseAgent, q: sims.Question, doc: sims.Doc) -> Record:
    t0 = time.perf_counter()
    read = agent.read(doc, f"intent={encode_anchor(q.text)}")
    ms = (time.perf_counter() - t0) * 1000.0
    pack = read.pack
    assert pack is not None
    got = sims.share(q, doc, read.seen)
    return {
        "chars": read.chars, "share": round(got, 4), "hit": got >= HIT, "decision": pack.decision,
        "method": pack.scope.method if pack.scope else None, "statuses": [c.status for c in pack.coverage],
        "slots": len(pack.slots), "anchors": [item.anchor for item in pack.evidence],
        "spans": [item.span for item in pack.evidence], "passage_chars": sum(len(i.text) for i in pack.evidence),
        "cited_pages": sorted(read.seen.pages), "ms": round(ms, 1),
    }


def run_set(name: str, split: str, limit: int | None, sink: IO[str] | None) -> list[Record]:
    docs, questions = sims.load_set(name)
    asked = chosen(questions, (split,), limit)
    used = [docs[d] for d in dict.fromkeys(q.doc_id for q in asked)]
    tmp = Path(tempfile.mkdtemp(prefix=f"sparsefs-bench-packs-{name}-"))
    root, records = None, []
    try:
        sims.write_workspace(tmp, used)
        root = SourceRoot.open(str(tmp))
        cache = ArtifactCache(root)
        protocol = Protocol(cache)
        agent = sims.SparseAgent(protocol, inexact_views(cache, used))
        greps: dict[str, sims.Grep] = {}
        windows: dict[str, WindowBaseline] = {}
        for q in asked:
            doc = docs[q.doc_id]
            grep = greps.setdefault(q.doc_id, sims.Grep(doc.text))
            window = windows.get(q.doc_id) or windows.setdefault(q.doc_id, WindowBaseline(doc.text, sims.WINDOW))
            page = grep.pages(sims.grep_words(q.text), 1)[0]
            win = sims.window_read(window, q.text)
            record = {"set": name, "split": split, "qid": q.qid, "doc_id": q.doc_id, **pack_record(agent, q, doc),
                      "grep_chars": page.chars, "grep_hit": sims.share(q, doc, page.seen) >= HIT,
                      "window_chars": win.chars, "window_hit": sims.share(q, doc, win.seen) >= HIT}
            records.append(record)
            if sink is not None:
                sink.write(json.dumps(record) + "\n")
        protocol.chooser.close()
    finally:
        if root is not None:
            root.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return records


def _pct(k: int, n: int) -> str:
    return f"{k}/{n} ({100.0 * k / n:.1f}%)" if n else "0/0"


def summary(records: Sequence[Record]) -> list[str]:
    lines = ["| set | split | pack hit | median pack | grep hit (median) | window hit | matched: precision / "
             "recall / share of packs | median ms |", "|---|---|---|---|---|---|---|---|"]
    for name in SETS:
        for split in ("calibration", "evaluation"):
            rs = [r for r in records if r["set"] == name and r["split"] == split]
            if not rs:
                continue
            one = [r for r in rs if r["slots"] <= 1 and r["statuses"]]
            matched = [r for r in one if r["statuses"][0] == "matched"]
            hits = [r for r in one if r["hit"]]
            lines.append(
                f"| {name} | {split} | {_pct(sum(r['hit'] for r in rs), len(rs))} "
                f"| {statistics.median(r['chars'] for r in rs):,.0f} "
                f"| {_pct(sum(r['grep_hit'] for r in rs), len(rs))} "
                f"({statistics.median(r['grep_chars'] for r in rs):,.0f}) "
                f"| {_pct(sum(r['window_hit'] for r in rs), len(rs))} "
                f"| {_pct(sum(r['hit'] for r in matched), len(matched))} / "
                f"{_pct(sum(r in matched for r in hits), len(hits))} / {_pct(len(matched), len(rs))} "
                f"| {statistics.median(r['ms'] for r in rs):.0f} |")
    return lines


def mcnemar(b: int, c: int) -> float:
    """Two-sided exact McNemar p for b gained against c lost."""
    n = b + c
    if not n:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2**n
    return min(1.0, 2 * tail)


def compare(before: Path, after: Path) -> list[str]:
    def load(path: Path) -> dict[tuple[str, str], Record]:
        return {(r["set"], r["qid"]): r for r in map(json.loads, path.read_text().splitlines())}

    a, b = load(before), load(after)
    lines = ["| set | split | questions | before hit (median) | after hit (median) | gained | lost | McNemar p |",
             "|---|---|---|---|---|---|---|---|"]
    for name in SETS:
        for split in ("calibration", "evaluation"):
            keys = [k for k in a if k in b and k[0] == name and a[k]["split"] == split]
            if not keys:
                continue
            gained = sum(b[k]["hit"] and not a[k]["hit"] for k in keys)
            lost = sum(a[k]["hit"] and not b[k]["hit"] for k in keys)
            lines.append(
                f"| {name} | {split} | {len(keys)} | {sum(a[k]['hit'] for k in keys)} "
                f"({statistics.median(a[k]['chars'] for k in keys):,.0f}) | {sum(b[k]['hit'] for k in keys)} "
                f"({statistics.median(b[k]['chars'] for k in keys):,.0f}) | {gained} | {lost} "
                f"| {mcnemar(gained, lost):.3f} |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--split", choices=("calibration", "evaluation"), default="calibration")
    parser.add_argument("--sets", default="covidqa,oneline,financebench")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--jsonl", type=Path, default=None)
    parser.add_argument("--compare", type=Path, nargs=2, default=None, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args(argv)
    if args.compare:
        print("\n".join(compare(*args.compare)))
        return 0
    names = [s.strip() for s in args.sets.split(",") if s.strip()]
    if unknown := sorted(set(names) - set(SETS)):
        parser.error(f"unknown sets: {', '.join(unknown)}")
    print(f"`{shlex.join([sys.executable, *sys.argv])}`\n\ncode: {ROOT} at {_commit()}\n")
    started = time.perf_counter()
    sink = args.jsonl.open("w", encoding="utf-8") if args.jsonl else None
    records: list[Record] = []
    try:
        for name in names:
            records += run_set(name, args.split, args.limit, sink)
    finally:
        if sink is not None:
            sink.close()
    print("\n".join(summary(records)))
    print(f"\nrun time {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
