#!/usr/bin/env python3
"""What "saved" says, before and after issue 25.5: the same reads through a mount of each revision.

Two sessions, each mounted fresh per revision (a snapshot of the revision's committed packages, imported ahead
of the editable install, so the daemon runs exactly that code):

* ``example``: docs/SEMANTICS.md's worked example (tests/mount/test_mount_savings.py builds the same files);
* ``mixed``: a run of mixed reads over real data (``/work/shared/data``: the 3M 10-K, a COVID CSV, an Apache
  log, a JSON fixture and a folder of papers): intents with refines and other objectives, exact operations,
  previews, focus, a folder intent, an error, and a log that grows between reads.

Per revision and session: packs served, characters exposed, the full-read characters of the baseline, the
characters "saved" and the exposure ratio, from ``.sparsefs/stats.json`` (and ``sparsefs stats --json`` for
the whole log). Exposure differs a little between revisions where packs changed; the baseline is the point.

    .venv/bin/python scripts/bench_savings.py --revs 6d5ab4e,HEAD --backend kernel
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO))
from bench_fuse import snapshot_dir  # noqa: E402

from tests.mount.test_mount_savings import EXAMPLE, grow_log, write_example  # noqa: E402

DATA = REPO.parent / "shared" / "data"
if not DATA.exists():
    DATA = Path("/work/shared/data")
VENV_PY = REPO / ".venv" / "bin" / "python"


def mixed_workspace(src: Path) -> None:
    """Real files, copied into a temporary workspace."""
    (src / "papers").mkdir(parents=True)
    shutil.copy(DATA / "pdf" / "filings" / "3M_2022_10K.pdf", src / "3m-10k.pdf")
    shutil.copy(DATA / "csv" / "datasets-covid-19" / "reference.csv", src / "reference.csv")
    shutil.copy(DATA / "logs" / "elastic-examples" / "apache_logs", src / "access.log")
    shutil.copy(next(iter(sorted((DATA / "json" / "octokit-fixtures").glob("*.json")))), src / "session.json")
    for paper in sorted((DATA / "pdf" / "papers").glob("*.pdf")):
        shutil.copy(paper, src / "papers" / paper.name)


MIXED: list[str] = [
    "3m-10k.pdf@intent=total revenue 2022; research and development expenses",
    "3m-10k.pdf@refine=number of employees",
    "3m-10k.pdf@intent=Combat Arms earplug litigation",
    "3m-10k.pdf@scout",
    "3m-10k.pdf@focus=p40",
    "reference.csv@sum=Population",
    "reference.csv@count=Country_Region",
    "reference.csv@intent=population of Italy",
    "access.log@intent=404 errors from crawlers",
    "GROW access.log",
    "access.log@intent=404 errors from crawlers",
    "GROW access.log",
    "access.log@intent=404 errors from crawlers",
    "session.json@scout",
    "session.json@intent=rate limit remaining",
    "papers@intent=evaluation datasets and metrics",
    "papers@scout",
    "3m-10k.pdf@focus=p99999",
]


def _grow(path: Path) -> None:
    lines = [f'66.249.73.135 - - [20/May/2015:21:05:{n:02d} +0000] "GET /missing-{n} HTTP/1.1" 404 209 "-" '
             f'"Googlebot/2.1"' for n in range(40)]
    with path.open("a") as log:
        log.write("\n".join(lines) + "\n")


def run(rev: str, backend: str, build: Callable[[Path], None], reads: list[str], work: Path) -> dict[str, Any]:
    """Mount ``rev``'s snapshot over a fresh workspace, do ``reads``, return its stats."""
    _, code = snapshot_dir(rev)
    env = os.environ | {"PYTHONPATH": str(code)}
    src, mnt, state = work / "src", work / "mnt", work / "state"
    src.mkdir()
    mnt.mkdir()
    build(src)
    mount = [str(VENV_PY), "-m", "sparsefs", "mount", str(src), str(mnt), "--state-dir", str(state),
             "--backend", backend]
    subprocess.run(mount, env=env, check=True, timeout=120, capture_output=True, cwd="/")
    try:
        for name in reads:
            if name.startswith("GROW"):
                target = mnt / name.split(" ", 1)[1] if " " in name else mnt / "app.log"
                (grow_log if target.name == "app.log" else _grow)(target)
                continue
            (mnt / name).read_bytes()
        stats = json.loads((mnt / ".sparsefs" / "stats.json").read_bytes())
        whole = json.loads(subprocess.run([str(VENV_PY), "-m", "sparsefs", "stats", str(mnt), "--json"], env=env,
                                          capture_output=True, text=True, timeout=120, check=True, cwd="/").stdout)
    finally:
        subprocess.run([str(VENV_PY), "-m", "sparsefs", "umount", str(mnt)], env=env, timeout=60,
                       capture_output=True, check=False, cwd="/")
    return {"stats": stats, "log": whole}


def row(rev: str, session: str, result: dict[str, Any]) -> str:
    s = result["stats"]
    ratio = s.get("exposure_ratio")
    return (f"| {session} | {rev} | {s['packs_served']} | {s['chars_exposed']:,} | {s['full_read_chars']:,} | "
            f"{s['chars_saved_vs_full_reads']:,} | {ratio if ratio is not None else '-'} | "
            f"{result['log']['full_read_chars']:,} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--revs", default="6d5ab4e,HEAD")
    parser.add_argument("--backend", default="kernel")
    parser.add_argument("--sessions", default="example,mixed")
    args = parser.parse_args()
    sessions: dict[str, tuple[Callable[[Path], None], list[str]]] = {
        "example": (write_example, [name if name != "GROW" else "GROW app.log" for name, _ in EXAMPLE]),
        "mixed": (mixed_workspace, MIXED),
    }
    rows = []
    for session in args.sessions.split(","):
        build, reads = sessions[session]
        for rev in args.revs.split(","):
            with tempfile.TemporaryDirectory(prefix="sparsefs-savings-") as tmp:
                rows.append(row(rev, session, run(rev, args.backend, build, reads, Path(tmp))))
    print(f"backend {args.backend}; stats.json of one mount per revision and session (last column: sparsefs stats)\n")
    print("| session | revision | packs | exposed | full reads | saved | ratio | full reads (log) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
