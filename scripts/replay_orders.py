#!/usr/bin/env python3
"""Deterministic packs (issue 27): replay a question set in two orders on two fresh mounts, and compare.

A pack must be a function of the artifact version, the request and the episode state, never of what
other questions came first or of timing. Each order runs on its own fresh ``ArtifactCache`` and
``Protocol`` (what a fresh mount builds: nothing parsed, nothing embedded, a fresh cost book), over the
same workspace. Every question is read the way the scripted multi-step agent reads it
(``scripts/agent_sims.SparseAgent``: ``@intent``, ``@refine``, the suggested ``@focus``, ``@full``, which
closes the episode so the next question opens a fresh one); order B is order A reversed, so every
question has other questions before it (other documents, and other questions of its own document).

Two packs are the same when their JSON is equal but for the episode id (``e12``): ids are numbered per
mount, so they are naming, not content. With ``--warmup`` the background dense warm-up runs, so its
progress differs between the two orders (timing); without it the warm-up is off, as in bench_agents.

    .venv/bin/python scripts/replay_orders.py [--sets covidqa,financebench] [--split calibration]
        [--limit N] [--warmup]

Prints, per set, how many questions had any read differ, and which pack fields differed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]


def _args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sets", default="covidqa,financebench")
    parser.add_argument("--split", choices=("calibration", "evaluation", "both"), default="calibration")
    parser.add_argument("--limit", type=int, default=None, help="first N questions of the split(s) per set")
    parser.add_argument("--warmup", action="store_true", help="run the background dense warm-up (timing varies)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _args(argv)
    os.environ["SPARSEFS_DENSE_WARMUP"] = "1" if args.warmup else "0"
    from agent_sims import load_set

    splits = ("calibration", "evaluation") if args.split == "both" else (args.split,)
    print(f"# Two orders, two fresh mounts (warm-up {'on' if args.warmup else 'off'})\n")
    total_q = total_diff = 0
    for name in [s.strip() for s in args.sets.split(",") if s.strip()]:
        docs, questions = load_set(name)
        asked = chosen(questions, splits, args.limit)
        t0 = time.perf_counter()
        first, second = replay(docs, asked), replay(docs, list(reversed(asked)))
        differing, fields = compare(first, second)
        total_q, total_diff = total_q + len(asked), total_diff + len(differing)
        print(f"- {name}: {len(differing)} of {len(asked)} questions differ "
              f"({time.perf_counter() - t0:.0f} s); fields: {dict(fields.most_common())}")
        for qid in differing[:10]:
            print(f"  - {qid}")
    print(f"\nall sets: {total_diff} of {total_q} questions differ")
    return 1 if total_diff else 0


def chosen(questions: Sequence[Any], splits: Sequence[str], limit: int | None) -> list[Any]:
    """The questions of the splits asked for, the first ``limit`` of each (bench_agents' choice; not imported
    from there, which switches the warm-up off on import)."""
    from eval_evidence import split_of

    return [q for split in splits for q in [q for q in questions if split_of(q.doc_id) == split][:limit]]


def replay(docs: dict[str, Any], questions: Sequence[Any]) -> dict[str, list[dict[str, Any]]]:
    """Each question's reads on one fresh cache and protocol, in the order given: qid -> packs as JSON."""
    from agent_sims import SparseAgent, write_workspace

    from sparsefs.artifacts.cache import ArtifactCache
    from sparsefs.protocol.access import Protocol
    from sparsefs.source.rootfs import SourceRoot

    used = [docs[d] for d in dict.fromkeys(q.doc_id for q in questions)]
    with tempfile.TemporaryDirectory(prefix="sparsefs-replay-") as tmp:
        write_workspace(Path(tmp), used)
        root = SourceRoot.open(tmp)
        protocol = Protocol(ArtifactCache(root))
        try:
            agent = SparseAgent(protocol)
            return {q.qid: [_normal(r.pack) for r in agent.reads(docs[q.doc_id], q.text)] for q in questions}
        finally:
            protocol.chooser.close()
            root.close()


def _normal(pack: Any) -> dict[str, Any]:
    """The pack as JSON without its episode id (numbered per mount)."""
    data: dict[str, Any] = pack.model_dump(mode="json") if pack is not None else {}
    data.pop("episode", None)
    return data


def compare(a: dict[str, list[dict[str, Any]]], b: dict[str, list[dict[str, Any]]]) -> tuple[list[str], Counter[str]]:
    """Questions whose reads differ between the two replays, and a count of the fields that differed."""
    differing: list[str] = []
    fields: Counter[str] = Counter()
    for qid, reads in a.items():
        other = b[qid]
        if reads == other:
            continue
        differing.append(qid)
        if len(reads) != len(other):
            fields["number of reads"] += 1
        for x, y in zip(reads, other, strict=False):
            fields.update(key for key in x.keys() | y.keys() if x.get(key) != y.get(key))
    return differing, fields


if __name__ == "__main__":
    sys.exit(main())
