"""Soak: concurrent agent processes on one mount while the sources change underneath.

Each agent process loops until the deadline, mixing
  plain    reads of shared documents (each version carries its own checksum: a read must be one whole version),
  write    appends to its own file, fsync, and reads it back (must be exactly what it wrote),
  evidence intent/scout/focus/refine packs of the shared documents and of the folder (must be a pack,
           never an error pack; size from stat equals the bytes read while the file is unchanged).
Meanwhile an editor replaces shared documents in the source (atomic rename, outside the mount) and appends
to a log file in place. The parent samples the daemon's RSS (itself plus parse children) and, at the end,
checks the episode state: every episode within the 2L exposure bound, budgets never negative, stats.json
counting exactly the packs in log.jsonl. A hang is an agent that made no progress for --hang-s seconds.

Usage:
  .venv/bin/python scripts/bench_soak.py [--agents 8] [--seconds 600] [--backend kernel] [--json out.json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests import mountutil  # noqa: E402

DOCS = 6
WORDS = [
    "revenue",
    "margin",
    "harbor",
    "robots",
    "fleet",
    "outlook",
    "risk",
    "cash",
    "board",
    "staff",
    "engineers",
    "growth",
    "supply",
    "customers",
]


def document(index: int, version: int) -> bytes:
    """A markdown document whose first line checksums the rest."""
    rng = random.Random(index * 100_003 + version)
    sections = []
    for s in range(rng.randint(5, 40)):
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(40, 200)))
        sections.append(f"## Section {s} {rng.choice(WORDS)}\n\n{words} in {2000 + s}.\n")
    body = f"# Document {index} version {version}\n\n" + "\n".join(sections)
    return f"sha {hashlib.sha256(body.encode()).hexdigest()}\n{body}".encode()


def whole(data: bytes) -> bool:
    head, _, body = data.partition(b"\n")
    return head == b"sha " + hashlib.sha256(body).hexdigest().encode()


# ---- one agent process ----


@dataclass
class AgentReport:
    ops: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    max_latency_s: float = 0.0


Note = Callable[[str], None]


def agent(ident: int, mnt: Path, until: float, progress: Path) -> AgentReport:
    rng, report = random.Random(ident), AgentReport()
    mine, written = mnt / f"agent{ident}.log", bytearray()

    def note(what: str) -> None:  # the parent reads this to name what a hung agent was doing
        progress.write_text(f"{time.time()}\t{what}\n")

    while time.time() < until:  # one wall-clock deadline for all agents, however long each took to start
        kind = rng.choice(["plain", "plain", "write", "evidence", "evidence", "evidence"])
        started = time.monotonic()
        try:
            ops = {"plain": _plain, "write": _write, "evidence": _evidence}
            problem = ops[kind](rng, mnt, mine, written, note)
        except OSError as err:
            problem = f"{type(err).__name__}: {err}"
        elapsed = time.monotonic() - started
        report.ops[kind] = report.ops.get(kind, 0) + 1
        report.max_latency_s = max(report.max_latency_s, elapsed)
        if problem:
            report.errors.append(f"{kind}: {problem}"[:300])
        note("idle")
    return report


def _plain(rng: random.Random, mnt: Path, mine: Path, written: bytearray, note: Note) -> str:
    path = mnt / f"doc{rng.randrange(DOCS)}.md"
    note(f"plain read {path.name}")
    data = path.read_bytes()
    return "" if whole(data) else f"torn read of a shared document ({len(data)} bytes)"


def _write(rng: random.Random, mnt: Path, mine: Path, written: bytearray, note: Note) -> str:
    note(f"append to {mine.name}")
    record = f"{len(written):012d} {rng.random()}\n".encode() * rng.randint(1, 50)
    with open(mine, "ab") as f:
        f.write(record)
        if rng.random() < 0.3:
            f.flush()
            os.fsync(f.fileno())
    written += record
    return "" if mine.read_bytes() == bytes(written) else "own file differs from what was written"


def _evidence(rng: random.Random, mnt: Path, mine: Path, written: bytearray, note: Note) -> str:
    base = rng.choice([f"doc{rng.randrange(DOCS)}.md"] * 4 + ["edits.log", "docs"])
    words = " ".join(rng.sample(WORDS, rng.randint(1, 3)))
    suffix = rng.choice([f"intent={words}", f"intent={words}", "scout", "focus=L1-5", f"refine={words}"])
    if base == "docs":
        suffix = rng.choice(["scout", f"intent={words}"])
    path = mnt / f"{base}@{suffix}"
    note(f"evidence read {path.name}")
    data = path.read_bytes()
    head = data.split(b"\n", 1)[0]
    if not head.startswith(f"{base}@".encode()) or b": error: " in head:
        if b"no open episode" in data or b"needs an open episode" in data:
            return ""  # a refine with nothing to refine is the agent's mistake, answered as such
        return f"{path.name}: {data[:240]!r}"
    return ""


# ---- the parent: mount, editor, sampling, checks ----


def populate(src: Path) -> None:
    (src / "docs").mkdir(parents=True)
    for i in range(DOCS):
        (src / f"doc{i}.md").write_bytes(document(i, 0))
        (src / "docs" / f"part{i}.md").write_bytes(document(i + 100, 0))
    (src / "edits.log").write_text("2024-03-14T10:00:00Z INFO start\n")


def editor(src: Path, stop: threading.Event, counts: dict[str, int]) -> None:
    rng, version = random.Random(7), 1
    while not stop.is_set():
        i = rng.randrange(DOCS)
        tmp = src / f".doc{i}.tmp"
        tmp.write_bytes(document(i, version))
        os.rename(tmp, src / f"doc{i}.md")
        with open(src / "edits.log", "a") as log:
            log.write(f"2024-03-14T10:{version % 60:02d}:00Z {rng.choice(['INFO', 'ERROR'])} edit {version}\n")
        version += 1
        counts["edits"] = version - 1
        stop.wait(rng.uniform(0.05, 0.2))


def rss_kib(pid: int) -> int:
    """Resident memory of ``pid`` plus its children (parse children, whose shared pages count again)."""
    return sum(_status_kib(p, "VmRSS:") for p in [pid, *_children(pid)])


def _status_kib(pid: int, key: str) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in status.splitlines() if line.startswith(key)), 0)


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def check_episodes(mnt: Path) -> list[str]:
    """The episode state the mount reports must satisfy the protocol's invariants."""
    problems, control = [], mnt / ".sparsefs"
    for name in os.listdir(control / "episodes"):
        try:
            e = json.loads((control / "episodes" / name).read_text())
        except (OSError, ValueError):
            continue  # evicted between listing and reading
        full = e["full_view_chars"] if e["full_view_delivered"] else 0
        if e["exposed_sparse"] + full > 2 * e["full_view_chars"]:
            problems.append(f"{name}: exposure {e['exposed_sparse']}+{full} over 2L={2 * e['full_view_chars']}")
        if e["budget_left"] < 0:
            problems.append(f"{name}: negative budget {e['budget_left']}")
    stats = json.loads((control / "stats.json").read_text())
    logged = len((control / "log.jsonl").read_text().splitlines())
    if stats["packs_served"] != logged:
        problems.append(f"stats count {stats['packs_served']} packs, the log holds {logged}")
    return problems


def soak(agents: int, seconds: float, backend: str, hang_s: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-soak-") as base_name:
        base = Path(base_name)
        src, mnt = base / "src", base / "mnt"
        populate(src)
        mnt.mkdir()
        mount = mountutil.start(src, mnt, base / "state", backend=backend)
        try:
            return {"backend": backend, **_run(mount, agents, seconds, hang_s, base)}
        finally:
            mountutil.stop(mount)


def _run(mount: mountutil.Mount, agents: int, seconds: float, hang_s: float, base: Path) -> dict[str, Any]:
    stop, counts = threading.Event(), {"edits": 0}
    edits = threading.Thread(target=editor, args=(mount.source, stop, counts), daemon=True)
    edits.start()
    progress = [base / f"progress{i}" for i in range(agents)]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--agent",
                str(i),
                "--mnt",
                str(mount.mountpoint),
                "--until",
                str(time.time() + seconds),
                "--progress",
                str(progress[i]),
            ],
            stdout=subprocess.PIPE,
        )
        for i in range(agents)
    ]
    peak, hangs, stacks = 0, list[str](), ""
    timeline, begun = list[tuple[int, float]](), time.monotonic()
    while any(p.poll() is None for p in procs):
        now_kib = rss_kib(mount.process.pid)
        peak = max(peak, now_kib)
        if not timeline or time.monotonic() - begun >= timeline[-1][0] + 30:
            timeline.append((int(time.monotonic() - begun), round(now_kib / 1024, 1)))
        hangs = [
            f"agent {i}: {what}"
            for i, p in enumerate(progress)
            if procs[i].poll() is None and (what := _stalled(p, hang_s))
        ]
        if hangs:
            stacks = _stacks(mount.process.pid)
            break
        time.sleep(0.5)
    stop.set()
    edits.join()
    daemon_peak = _status_kib(mount.process.pid, "VmHWM:")
    reports = _collect(procs, hangs, mount)
    summary = {
        "agents": agents,
        "seconds": seconds,
        "edits": counts["edits"],
        "hangs": hangs,
        "daemon_stacks_at_hang": stacks,
        "rss_mib_every_30s": timeline,
        "daemon_peak_rss_mib": round(daemon_peak / 1024, 1),
        "peak_rss_with_parse_children_mib": round(peak / 1024, 1),
        "ops": _sum_ops(reports),
        "errors": [e for r in reports for e in r.errors],
        "max_latency_s": round(max((r.max_latency_s for r in reports), default=0.0), 2),
    }
    summary["episode_problems"] = check_episodes(mount.mountpoint) if not hangs else ["not checked: hang"]
    return summary


def _stalled(progress: Path, hang_s: float) -> str:
    """What the agent has been doing for over ``hang_s`` seconds ('' when it is making progress)."""
    try:
        stamp, _, what = progress.read_text().strip().partition("\t")
        since = float(stamp)
    except (OSError, ValueError):
        return ""  # not started yet
    return f"{what} for {time.time() - since:.0f}s" if time.time() - since > hang_s else ""


def _stacks(pid: int) -> str:
    """The daemon's thread stacks (py-spy, when installed) to show where it hangs."""
    spy = Path(sys.executable).with_name("py-spy")
    if not spy.exists():
        return "py-spy not installed"
    result = subprocess.run(
        [str(spy), "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=60, check=False
    )
    return (result.stdout + result.stderr)[-8000:]


def _collect(procs: list[subprocess.Popen[bytes]], hangs: list[str], mount: mountutil.Mount) -> list[AgentReport]:
    if hangs:
        mountutil.stop(mount)  # aborts the connection: the hung agents get ENOTCONN
        for p in procs:
            p.kill()  # unmounted, their writes would land in the bare mountpoint
    reports = []
    for p in procs:
        out, _ = p.communicate(timeout=120)
        try:
            reports.append(AgentReport(**json.loads(out)))
        except ValueError:
            reports.append(AgentReport(errors=[f"agent exited {p.returncode} without a report"]))
    return reports


def _sum_ops(reports: list[AgentReport]) -> dict[str, int]:
    total: dict[str, int] = {}
    for report in reports:
        for kind, n in report.ops.items():
            total[kind] = total.get(kind, 0) + n
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--backend", default="kernel")
    parser.add_argument("--hang-s", type=float, default=30)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--agent", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--mnt", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--until", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--progress", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.agent is not None:
        print(json.dumps(asdict(agent(args.agent, args.mnt, args.until, args.progress))))
        return 0
    summary = soak(args.agents, args.seconds, args.backend, args.hang_s)
    print(json.dumps(summary, indent=1))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))
    failed = summary["errors"] or summary["hangs"] or summary["episode_problems"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
