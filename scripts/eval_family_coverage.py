#!/usr/bin/env python3
""""matched" per Reader family on structured data: does the promise hold for tables, JSON and logs?

The QA sets (scripts/calibrate_coverage.py) are prose and PDFs. The structured families have no annotated
questions, so this script makes them from the shared data (``../shared/data``), the way an agent asks
about a record it knows something of, and checks whether the one-slot ``@intent`` answer holds the record:

* table (CSV and XLSX, ``TableReader``): a row named by a cell that is unique in its column, asked for
  another column: "What is the Population for Albania?"; evidence: the row;
* json (``JsonReader``, the octokit fixtures): an object named by a member whose string value is unique
  in the document, asked for another scalar member: "What is the status of tmp-scenario-labels-...?";
  evidence: that member (``"status":201``);
* log (``LogReader``; apache access log, kafka logs): an access line asked by its request and client
  ("What status did the GET request for /x.png from 83.149.9.216 get?"), a kafka line by its message
  without the logger ("When did: Controller 0 incremented epoch to 36?"); evidence: the line;
* jsonl (``JsonlReader``, nginx status snapshots): a snapshot's counter asked by its timestamp;
  evidence: the line.

Requests are drawn with a fixed seed per file; each is put in a split by the project's rule applied to its
own id (xxh64 of ``file#n`` even: calibration, odd: evaluation: there are too few files here to split by
document). Each is answered by the family's Reader directly (``locate``, 1,340 characters of passages:
what a default 1,500-character pack asks of a Reader, the method the Reader takes by default), so the
numbers measure the judge and the pipeline, not the selector or the Gate. Hit: the passages cover >= 80%
of the evidence span. Printed per family and split: requests, hits, "matched", P(hit | matched),
P(matched | hit).

    .venv/bin/python scripts/eval_family_coverage.py [--per-file N] [--jsonl PATH]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import xxhash

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from readers import registry  # noqa: E402
from readers.base import Parsed, Reader, ReadIntent  # noqa: E402
from readers.kit.source import MemorySource  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
PASSAGE_CHARS = 1_340
HIT = 0.8
FILES = {
    "table": [*sorted((DATA / "csv").glob("*/*.csv")), *sorted((DATA / "xlsx" / "sheetcopilot").glob("*.xlsx"))],
    "json": sorted((DATA / "json" / "octokit-fixtures").glob("*.json")),
    "log": [DATA / "logs" / "elastic-examples" / n for n in
            ("apache_logs", "kafka0_controller.log.2016-12-19-16", "kafka0_state-change.log.2016-12-19-16")],
    "jsonl": [DATA / "logs" / "elastic-examples" / "nginxplus_json_logs.jsonl"],
}
_ACCESS = re.compile(r'^(\S+) \S+ \S+ \[[^\]]+\] "(\w+) (\S+)[^"]*" (\d{3})')
_KAFKA = re.compile(r"^\[[^\]]+\] \w+ (.*?)(?: \([\w.$]+\))?$")
Made = tuple[str, tuple[int, int]]  # a question and its evidence span
_IDENTIFYING = re.compile(r"^[\w .,'&/-]{3,60}$")


class Request(NamedTuple):
    """One question about a record of ``file`` (the ``n``-th drawn there), and where the record is."""

    family: str
    file: str
    n: int
    question: str
    evidence: tuple[int, int]  # span in the Reader's full view

    @property
    def split(self) -> str:
        return "calibration" if xxhash.xxh64_intdigest(f"{self.file}#{self.n}".encode()) % 2 == 0 else "evaluation"


# -- requests ---------------------------------------------------------------------------------


def table_requests(path: Path, parsed: Parsed, rng: random.Random, per_file: int) -> Iterator[Made]:
    """A row named by a unique text cell, asked for another non-empty column."""
    view = parsed.full_view
    starts, ends = parsed.data["unit_starts"], parsed.data["unit_ends"]
    base = 0
    for sheet in parsed.data["sheets"]:
        columns = [str(c) for c in sheet.columns]
        rows = [view[int(starts[base + i]):int(ends[base + i])].split("\t") for i in range(sheet.n_rows)]
        counts: dict[tuple[int, str], int] = {}
        for row in rows:
            for c, cell in enumerate(row):
                counts[(c, cell)] = counts.get((c, cell), 0) + 1
        order = list(range(len(rows)))
        rng.shuffle(order)
        made = 0
        for i in order:
            asked = _table_question(rows[i], columns, counts, rng)
            if asked is not None and made < per_file:
                made += 1
                yield asked, (int(starts[base + i]), int(ends[base + i]))
        base += sheet.n_rows


def _table_question(row: list[str], columns: list[str], counts: dict[tuple[int, str], int],
                    rng: random.Random) -> str | None:
    keys = [c for c, cell in enumerate(row) if counts[(c, cell)] == 1 and _IDENTIFYING.match(cell)
            and not _numeric(cell)]
    if not keys or len(columns) < 2:
        return None
    key = keys[0]
    targets = [c for c, cell in enumerate(row) if c != key and cell.strip() and c < len(columns)
               and columns[c].strip() and not columns[c].startswith("column ")]
    if not targets:
        return None
    return f"What is the {columns[rng.choice(targets)]} for {row[key]}?"


def _numeric(cell: str) -> bool:
    return re.fullmatch(r"[-+$]?[\d,.]+%?", cell.strip()) is not None


def json_requests(reader: Reader, parsed: Parsed, rng: random.Random, per_file: int) -> Iterator[Made]:
    """An object named by a unique string member, asked for another scalar member."""
    tree = parsed.data["tree"].value
    strings: dict[str, int] = {}
    objects: list[tuple[str, dict[str, Any]]] = []
    for path, value in _walk(tree, "$"):
        if isinstance(value, str):
            strings[value] = strings.get(value, 0) + 1
        if isinstance(value, dict):
            objects.append((path, value))
    rng.shuffle(objects)
    made = 0
    for path, obj in objects:
        keys = [k for k, v in obj.items() if isinstance(v, str) and strings[v] == 1 and _IDENTIFYING.match(v)
                and "/" not in v]
        targets = [k for k, v in obj.items() if keys and k != keys[0] and _scalar(v) and _IDENTIFYING.match(k)]
        if not keys or not targets or made >= per_file:
            continue
        target = rng.choice(targets)
        try:
            batch = reader.focus(parsed, f"{path}[{json.dumps(target)}]")
        except Exception:  # noqa: BLE001 - a path the JSONPath grammar does not take: skip the object
            continue
        if batch.items:
            made += 1
            a = batch.items[0].anchor
            yield f"What is the {target.replace('_', ' ')} of {obj[keys[0]]}?", (a.char_start, a.char_end)


def _scalar(value: Any) -> bool:
    """A value worth asking for: a number, a boolean or a short string that is not a URL."""
    if isinstance(value, str):
        return 0 < len(value) <= 80 and not value.startswith("http")
    return isinstance(value, (int, float, bool))


def _walk(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    yield path, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(v, f"{path}[{json.dumps(k)}]")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _walk(v, f"{path}[{i}]")


def log_requests(parsed: Parsed, rng: random.Random, per_file: int) -> Iterator[Made]:
    """Access lines by request and client; other lines by their message (logger left out)."""
    view = parsed.full_view
    offsets = [0, *(m.end() for m in re.finditer("\n", view))]
    order = list(range(len(offsets) - 1))
    rng.shuffle(order)
    made = 0
    for i in order:
        start, end = offsets[i], offsets[i + 1] - 1
        line = view[start:end]
        question = _log_question(line)
        if question is not None and made < per_file:
            made += 1
            yield question, (start, end)


def _log_question(line: str) -> str | None:
    access = _ACCESS.match(line)
    if access:
        ip, method, path, _ = access.groups()
        return f"What status did the {method} request for {path} from {ip} get?"
    kafka = _KAFKA.match(line)
    if kafka and len(kafka.group(1)) > 20:
        return f"When did: {kafka.group(1)[:120]}?"
    return None


def jsonl_requests(parsed: Parsed, rng: random.Random, per_file: int) -> Iterator[Made]:
    """A snapshot's counter (a numeric member two levels down) by the snapshot's timestamp."""
    view = parsed.full_view
    offsets = [0, *(m.end() for m in re.finditer("\n", view))]
    order = list(range(len(offsets) - 1))
    rng.shuffle(order)
    for i in order[:per_file]:
        start, end = offsets[i], offsets[i + 1] - 1
        record = json.loads(view[start:end])
        group = rng.choice([k for k, v in record.items() if isinstance(v, dict) and v])
        member = rng.choice(list(record[group]))
        yield f"What was the {group} {member} at timestamp {record['timestamp']}?", (start, end)


def requests_of(family: str, path: Path, per_file: int) -> tuple[Reader, Parsed, list[Request]]:
    data = path.read_bytes()
    reader = registry.select(path.name, data[:8192])
    parsed = reader.parse(MemorySource(path.name, data))
    rng = random.Random(xxhash.xxh64_intdigest(path.name.encode()))
    made: Iterator[Made]
    if family == "table":
        made = table_requests(path, parsed, rng, per_file)
    elif family == "json":
        made = json_requests(reader, parsed, rng, per_file)
    elif family == "log":
        made = log_requests(parsed, rng, per_file)
    else:
        made = jsonl_requests(parsed, rng, per_file)
    rel = str(path.relative_to(DATA))
    return reader, parsed, [Request(family, rel, n, q, span) for n, (q, span) in enumerate(made)]


# -- scoring ----------------------------------------------------------------------------------


def covered(evidence: tuple[int, int], spans: Sequence[tuple[int, int]]) -> float:
    start, end = evidence
    marks = bytearray(end - start)
    for s, e in spans:
        for i in range(max(s, start), min(e, end)):
            marks[i - start] = 1
    return sum(marks) / max(1, end - start)


def answer(reader: Reader, parsed: Parsed, request: Request) -> dict[str, Any]:
    batch = reader.locate(parsed, ReadIntent(request.question, (request.question,)), PASSAGE_CHARS)
    spans = [(i.anchor.char_start, i.anchor.char_end) for i in batch.items if i.anchor.char_end > i.anchor.char_start]
    got = covered(request.evidence, spans)
    status = batch.coverage[0].status if batch.coverage else "unresolved"
    return {**request._asdict(), "split": request.split, "reader": reader.name, "hit": got >= HIT,
            "share": round(got, 3), "status": status, "confidence": batch.coverage[0].confidence if batch.coverage
            else None, "method": batch.scope.method, "passages": len(batch.items)}


def table_lines(records: Sequence[dict[str, Any]]) -> list[str]:
    out = ["| family | split | requests | hits | said matched | precision of matched | of the hits, say matched |",
           "|---|---|---|---|---|---|---|"]
    for family in FILES:
        for split in ("calibration", "evaluation"):
            mine = [r for r in records if r["family"] == family and r["split"] == split]
            hits = [r for r in mine if r["hit"]]
            said = [r for r in mine if r["status"] == "matched"]
            good = [r for r in said if r["hit"]]
            precision = f"{len(good) / len(said):.1%} ({len(good)}/{len(said)})" if said else "—"
            recall = f"{len(good) / len(hits):.1%} ({len(good)}/{len(hits)})" if hits else "—"
            out.append(f"| {family} | {split} | {len(mine)} | {len(hits)} | {len(said)} | {precision} | {recall} |")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--per-file", type=int, default=25, help="requests drawn per file (per sheet for tables)")
    parser.add_argument("--jsonl", type=Path, help="one record per request")
    args = parser.parse_args(argv)
    records: list[dict[str, Any]] = []
    for family, paths in FILES.items():
        for path in paths:
            try:
                reader, parsed, requests = requests_of(family, path, args.per_file)
            except Exception as err:  # noqa: BLE001 - a file its Reader refuses is reported, not fatal
                print(f"skipped {path.name}: {type(err).__name__}: {err}", file=sys.stderr)
                continue
            records += [answer(reader, parsed, r) for r in requests]
    if args.jsonl:
        args.jsonl.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    print("\n".join(table_lines(records)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
