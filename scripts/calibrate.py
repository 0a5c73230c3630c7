#!/usr/bin/env python3
"""Build readers/calibration.json: per request group and configuration, calibrated success.

Calibration requests (paper Appendix E), from CALIBRATION documents only
(``int(xxh64_hexdigest(doc_id.encode()), 16) % 2 == 0``; for files under
../shared/data the doc_id is the path relative to that folder):

- covidqa-dev and qmsum questions with located evidence; success = the
  returned passages cover >= 80% of the annotated evidence characters (as
  scripts/bench_evidence.py), through the real TextReader with
  ``ReadIntent(method=...)``;
- selective-fact requests written over the PDFs (``calibration_sets.PDF_REQUESTS``), each a
  question and a snippet copied from the PDF's text; success = the passages
  (whitespace collapsed) contain the snippet; through the PdfReader;
- verbatim and cross-file requests made from every 2nd covidqa-dev calibration
  question (``scripts/calibration_sets.py``): the question prefixed with
  "Quote verbatim ...", a success only when all evidence characters are
  covered; and cross-file requests over in-memory folders of 8-10
  calibration documents through the FolderReader: each such question asked of
  its folder, and pairs of questions about two documents of one folder asked
  as two slots;
- exact-computation requests over the CSV/XLSX/JSON files; success = the
  Reader's result equals an independent computation (csv, json, openpyxl).

A configuration counts only where the Reader ran it: the batch's
``scope.method`` must start with the requested method (a Reader that falls
back to its default is not measured as the method it was asked for).
Follow-up exposure is measured: after a miss, up to :data:`REFINES` refines of
the same budget (excluding what was returned), then the full view when the
evidence is still missing or the next refine would pass the full view's size.

    .venv/bin/python scripts/calibrate.py [--methods lexical,bm25,hybrid,region] [--limit N] [--dry-run]
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import xxhash

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from readers.base import Batch, Parsed, Reader, ReaderError, ReadIntent  # noqa: E402
from readers.folder import FolderReader  # noqa: E402
from readers.jsondata.reader import JsonReader  # noqa: E402
from readers.kit.source import MemorySource  # noqa: E402
from readers.ops import build_operation  # noqa: E402
from readers.pdf.reader import PdfReader  # noqa: E402
from readers.registry import group_of  # noqa: E402
from readers.selection import (  # noqa: E402
    EXACT,
    MIN_REQUESTS,
    SCHEMA,
    SNIPPETS,
    TAU,
    Configuration,
    RequestGroup,
    Selector,
    table_from_json,
)
from readers.table.reader import TableReader  # noqa: E402
from readers.text import TextReader  # noqa: E402
from scripts import calibration_sets as sets  # noqa: E402
from scripts.bench_evidence import HIT_COVERAGE, coverage  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
OUT = ROOT / "readers" / "calibration.json"
BUDGET = 1_500  # the protocol's DEFAULT_PACK_CHARS for one slot
REFINES = 2
Span = tuple[int, int]


def is_calibration(doc_id: str) -> bool:
    return int(xxhash.xxh64_hexdigest(doc_id.encode("utf-8")), 16) % 2 == 0


# -- requests ----------------------------------------------------------------------

_CSV_AGGREGATES: tuple[tuple[str, str, str | None, dict[str, str]], ...] = (
    ("csv/datasets-covid-19/worldwide-aggregate.csv", "sum", "Deaths", {}),
    ("csv/datasets-covid-19/worldwide-aggregate.csv", "max", "Confirmed", {}),
    ("csv/datasets-covid-19/worldwide-aggregate.csv", "min", "Recovered", {"where": "Date>=2020-06-01"}),
    ("csv/datasets-covid-19/worldwide-aggregate.csv", "mean", "Recovered", {"where": "Date>=2020-06-01"}),
    ("csv/datasets-covid-19/worldwide-aggregate.csv", "count", None, {"where": "Deaths>100000"}),
    ("csv/datasets-covid-19/key-countries-pivoted.csv", "sum", "US", {}),
    ("csv/datasets-covid-19/key-countries-pivoted.csv", "max", "China", {}),
    ("csv/datasets-covid-19/key-countries-pivoted.csv", "mean", "Germany", {}),
    ("csv/datasets-covid-19/key-countries-pivoted.csv", "count", None, {"where": "Italy>100000"}),
    ("csv/datasets-covid-19/key-countries-pivoted.csv", "sum", "Spain", {"where": "Date<2020-07-01"}),
    ("csv/elastic-examples/zip_codes.csv", "count", None, {"where": "#5:NY"}),
    ("csv/elastic-examples/zip_codes.csv", "count", None, {"where": "#5:CA,#7:STANDARD"}),
    ("csv/elastic-examples/zip_codes.csv", "distinct", "#5", {}),
    ("csv/elastic-examples/zip_codes.csv", "max", "#2", {}),
)
_XLSX_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("BoomerangSales.xlsx", "sum", "Quantity"), ("BoomerangSales.xlsx", "max", "Discount"),
    ("EntireShippingCosts.xlsx", "sum", "Seattle"), ("Invoices.xlsx", "sum", "Sales"),
    ("Invoices.xlsx", "max", "Units"), ("NetIncome.xlsx", "sum", "Revenue"), ("SalesRep.xlsx", "sum", "Jan"),
    ("ShippingCosts.xlsx", "mean", "Oakland"), ("StockChange.xlsx", "sum", "Value of Stock on Dec 31"),
    ("WeeklySales.xlsx", "sum", "COGS"), ("Dragging.xlsx", "max", "Acceleration (m/s^2)"),
    ("XYScatterPlot.xlsx", "max", "Range (m)"), ("PeriodRate.xlsx", "mean", "Annual Rate (%)"),
    ("VelocityDisplacement.xlsx", "sum", "Velocity m/s"), ("DemographicProfile.xlsx", "count", "Sex"),
    ("MaturityDate.xlsx", "count", "Loan Issue Date"), ("PricingTable.xlsx", "sum", "Number of Rolls"),
    ("IncomeStatement.xlsx", "sum", "Net Sales"), ("IncomeStatement2.xlsx", "max", "Sales"),
    ("FutureValue.xlsx", "sum", "Present Value"),
)
_JSON_OPS = (("count", "$[*]"), ("sum", "$[*].status"), ("max", "$[*].status"))


@dataclass(frozen=True)
class TextRequest:
    """Locate evidence: hit by annotated spans (``evidence``) or by a verbatim ``snippet``."""

    source: str
    doc_id: str
    question: str
    evidence: tuple[Span, ...] = ()
    snippet: str = ""
    required: float = HIT_COVERAGE  # share of the evidence characters the passages must cover
    slots: tuple[str, ...] = ()  # several needs in one request (two-file requests); default: the question


@dataclass(frozen=True)
class ExactRequest:
    """An exact operation and the value an independent computation gives."""

    doc_id: str
    name: str
    target: str | None
    options: dict[str, str]
    expected: float


def qa_requests(limit: int | None, sources: Sequence[str]) -> Iterator[tuple[TextRequest, str]]:
    """(request, document text) for calibration-split QA questions with located evidence."""
    for name in [s for s in ("covidqa-dev", "qmsum") if s in sources]:
        docs = {str(d["doc_id"]): str(d["text"]) for d in _jsonl(DATA / "qa" / f"{name}.docs.jsonl")}
        questions = [q for q in _jsonl(DATA / "qa" / f"{name}.questions.jsonl")
                     if q["unlocated"] == 0 and is_calibration(str(q["doc_id"]))]
        for q in questions[:limit]:
            spans = tuple((int(s), int(e)) for s, e in q["evidence"])
            yield TextRequest(name, str(q["doc_id"]), str(q["question"]), evidence=spans), docs[str(q["doc_id"])]


def exact_requests() -> Iterator[ExactRequest]:
    for rel, name, target, options in _CSV_AGGREGATES:
        if is_calibration(rel):
            yield ExactRequest(rel, name, target, options, _csv_expected(DATA / rel, name, target, options))
    for base, name, column in _XLSX_COLUMNS:
        rel = f"xlsx/sheetcopilot/{base}"
        if is_calibration(rel):
            yield ExactRequest(rel, name, column, {}, _xlsx_expected(DATA / rel, name, column))
    for path in sorted((DATA / "json" / "octokit-fixtures").glob("*.json")):
        rel = str(path.relative_to(DATA))
        if is_calibration(rel):
            records = json.loads(path.read_text(encoding="utf-8"))
            for name, target in _JSON_OPS:
                values = [1.0] * len(records) if name == "count" else [float(r["status"]) for r in records]
                yield ExactRequest(rel, name, target, {}, _reduce(name, values))


# -- independent computations -------------------------------------------------------


def _reduce(name: str, values: Sequence[float]) -> float:
    if name == "count":
        return float(len(values))
    if name == "sum":
        return math.fsum(values)
    if name == "mean":
        return math.fsum(values) / len(values)
    return max(values) if name == "max" else min(values)


def _csv_expected(path: Path, name: str, target: str | None, options: dict[str, str]) -> float:
    with path.open(encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f))
    headerless = path.name == "zip_codes.csv"
    header = [f"#{i + 1}" for i in range(len(rows[0]))] if headerless else rows[0]
    records = [dict(zip(header, r, strict=False)) for r in (rows if headerless else rows[1:]) if r]
    for condition in filter(None, options.get("where", "").split(",")):
        records = [r for r in records if _holds(r, condition)]
    if name == "distinct":
        return float(len({r[str(target)] for r in records}))
    if name == "count":
        return float(len(records))
    return _reduce(name, [float(r[str(target)]) for r in records if r[str(target)].strip()])


def _holds(record: dict[str, str], condition: str) -> bool:
    column, op, value = re.fullmatch(r"(.+?)(>=|<=|>|<|:)(.+)", condition).groups()  # type: ignore[union-attr]
    cell = record[column]
    if op == ":":
        return cell == value
    left, right = (cell, value) if "-" in value else (float(cell or "nan"), float(value))  # ISO dates compare as text
    return {">": left > right, "<": left < right, ">=": left >= right, "<=": left <= right}[op]  # type: ignore[operator]


def _xlsx_expected(path: Path, name: str, column: str) -> float:
    import openpyxl  # type: ignore[import-untyped]

    sheet = openpyxl.load_workbook(path, data_only=True, read_only=True).worksheets[0]
    rows = list(sheet.iter_rows(values_only=True))
    at = list(rows[0]).index(column)
    cells = [r[at] for r in rows[1:] if at < len(r) and r[at] is not None]
    if name == "count":
        return float(len(cells))
    return _reduce(name, [float(c) for c in cells if isinstance(c, int | float)])


# -- running configurations -------------------------------------------------------------


@dataclass
class Outcome:
    """One request under one configuration."""

    success: bool
    exposed: int
    follow_up: int


@dataclass
class Tally:
    """Per (group, configuration): outcomes; per group: requests."""

    cells: dict[tuple[RequestGroup, Configuration], list[Outcome]] = field(default_factory=dict)
    requests: dict[RequestGroup, int] = field(default_factory=dict)
    sources: dict[str, int] = field(default_factory=dict)
    by_source: dict[tuple[str, str, str], list[bool]] = field(default_factory=dict)

    def add(self, group: RequestGroup, source: str, outcomes: dict[Configuration, Outcome]) -> None:
        if not outcomes:
            return
        self.requests[group] = self.requests.get(group, 0) + 1
        self.sources[source] = self.sources.get(source, 0) + 1
        for config, outcome in outcomes.items():
            self.cells.setdefault((group, config), []).append(outcome)
            self.by_source.setdefault((source, group.key, config.key), []).append(outcome.success)


def honoured(method: str, batch: Batch) -> bool:
    return batch.scope.method.startswith(method)


def run_text(reader: Reader, parsed: Parsed, req: TextRequest, methods: Sequence[str]) -> dict[Configuration, Outcome]:
    found: dict[Configuration, Outcome] = {}
    for method in methods:
        intent = ReadIntent(req.question, req.slots or (req.question,), method=method)
        try:
            batch = reader.locate(parsed, intent, BUDGET)
        except ReaderError:
            continue
        if honoured(method, batch):
            found[SNIPPETS[method]] = _text_outcome(reader, parsed, req, intent, batch)
    return found


def _text_outcome(reader: Reader, parsed: Parsed, req: TextRequest, intent: ReadIntent, first: Batch) -> Outcome:
    full = len(parsed.full_view)
    items = list(first.items)
    exposed = sum(len(it.text) for it in items)
    if _hit(req, items):
        return Outcome(True, exposed, 0)
    follow, total = 0, exposed
    for _ in range(REFINES):
        seen = [(it.anchor.char_start, it.anchor.char_end) for it in items]
        more = list(reader.locate(parsed, intent, BUDGET, exclude=seen).items)
        size = sum(len(it.text) for it in more)
        if not more or total + size > full:
            break
        items, follow, total = items + more, follow + size, total + size
        if _hit(req, items):
            return Outcome(False, exposed, follow)
    return Outcome(False, exposed, follow + full)  # the Gate's full view


def _hit(req: TextRequest, items: Sequence[Any]) -> bool:
    if req.snippet:
        return _squash(req.snippet) in _squash(" ".join(it.text for it in items))
    spans = [(it.anchor.char_start, it.anchor.char_end) for it in items]
    return coverage(list(req.evidence), spans) >= req.required - 1e-9


def _squash(text: str) -> str:
    return " ".join(text.split()).casefold()


def run_exact(reader: Reader, parsed: Parsed, req: ExactRequest) -> Outcome:
    operation = build_operation(req.name, req.target, req.options, None)
    try:
        batch = reader.operate(parsed, operation, BUDGET)
    except ReaderError:
        return Outcome(False, 0, len(parsed.full_view))
    text = "\n".join(it.text for it in batch.items)
    got = result_number(text)
    ok = got is not None and math.isclose(got, req.expected, rel_tol=1e-9, abs_tol=1e-9)
    return Outcome(ok, len(text), 0 if ok else len(parsed.full_view))


def result_number(text: str) -> float | None:
    """The first number after '=' (or a leading 'N matches'), without thousands separators."""
    match = re.search(r"=\s*(-?[\d,]*\.?\d+(?:[eE][-+]?\d+)?)", text) or re.match(r"([\d,]+) matches", text)
    return float(match.group(1).replace(",", "")) if match else None


# -- the run -----------------------------------------------------------------------------


SOURCES = ("covidqa-dev", "qmsum", "pdf", "csv", "xlsx", "json")


def calibrate(methods: Sequence[str], limit: int | None, sources: Sequence[str] = SOURCES) -> Tally:
    tally = Tally()
    text, cache = TextReader(), Cache()
    for req, doc in qa_requests(limit, sources):
        parsed = cache.parse(text, req.doc_id, f"{req.doc_id}.txt", doc.encode)
        group = group_of(parsed.kind, len(parsed.full_view), "intent", req.question)
        if req.source == "qmsum":  # a summarization set: every request is a summary, whatever its wording
            group = dataclasses.replace(group, intent="summary")
        tally.add(group, req.source, run_text(text, parsed, req, methods))
    if "covidqa-dev" in sources:
        _verbatim_and_cross_file(tally, methods, limit, cache)
    pdf = PdfReader()
    for rel, question, snippet in sets.PDF_REQUESTS[:limit] if "pdf" in sources else ():
        if not is_calibration(rel):
            raise SystemExit(f"{rel} is an EVALUATION document")
        parsed = cache.parse(pdf, rel, Path(rel).name, (DATA / rel).read_bytes)
        req = TextRequest("pdf", rel, question, snippet=snippet)
        group = group_of("pdf", len(parsed.full_view), "intent", question)
        tally.add(group, "pdf", run_text(pdf, parsed, req, methods))
    for exact in exact_requests():
        if exact.doc_id.split("/")[0] not in sources:
            continue
        reader: Reader = JsonReader() if exact.doc_id.endswith(".json") else TableReader()
        parsed = cache.parse(reader, exact.doc_id, Path(exact.doc_id).name, (DATA / exact.doc_id).read_bytes)
        group = group_of(reader.name, len(parsed.full_view), exact.name, "")
        tally.add(group, exact.doc_id.split("/")[0], {EXACT: run_exact(reader, parsed, exact)})
    return tally


def _verbatim_and_cross_file(tally: Tally, methods: Sequence[str], limit: int | None, cache: Cache) -> None:
    requests = [(req, doc) for req, doc in qa_requests(limit, ["covidqa-dev"])][:: sets.EVERY]
    folders = sets.folders_of({req.doc_id: doc for req, doc in requests})
    text, folder = TextReader(), FolderReader()
    across: list[TextRequest] = []
    for req, doc in requests:
        parsed = cache.parse(text, req.doc_id, f"{req.doc_id}.txt", doc.encode)
        quote = dataclasses.replace(req, source="verbatim", question=sets.VERBATIM_PREFIX + req.question, required=1.0)
        group = group_of(parsed.kind, len(parsed.full_view), "intent", quote.question)
        tally.add(group, "verbatim", run_text(text, parsed, quote, methods))
        shifted = sets.in_folder(folders[req.doc_id], req.doc_id, req.evidence)
        across.append(dataclasses.replace(req, source="cross-file", evidence=shifted))
    for i, j in sets.pairs([(r.doc_id, r.question) for r in across], folders):
        one, two = across[i], across[j]
        across.append(dataclasses.replace(one, question=f"{one.question}; {two.question}",
                                          slots=(one.question, two.question), evidence=one.evidence + two.evidence))
    for req in across:
        shelf = folders[req.doc_id]
        tally.add(group_of(shelf.kind, len(shelf.full_view), "intent", req.question), "cross-file",
                  run_text(folder, shelf, req, methods))


class Cache:
    """Parsed artifacts by doc_id (one parse each)."""

    def __init__(self) -> None:
        self.parsed: dict[str, Parsed] = {}

    def parse(self, reader: Reader, key: str, name: str, load: Callable[[], bytes]) -> Parsed:
        if key not in self.parsed:
            self.parsed[key] = reader.parse(MemorySource(name, load()))
        return self.parsed[key]


def _jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def table_json(tally: Tally, methods: Sequence[str]) -> dict[str, Any]:
    groups: dict[str, Any] = {}
    for group, n in sorted(tally.requests.items()):
        configs = {}
        for (g, config), outcomes in sorted(tally.cells.items()):
            if g == group:
                configs[config.key] = {
                    "n": len(outcomes),
                    "successes": sum(o.success for o in outcomes),
                    "mean_exposed": round(sum(o.exposed for o in outcomes) / len(outcomes), 1),
                    "mean_follow_up": round(sum(o.follow_up for o in outcomes) / len(outcomes), 1),
                }
        groups[group.key] = {"requests": n, "configs": configs}
    return {
        "schema": SCHEMA,
        "tau": TAU,
        "min_requests": MIN_REQUESTS,
        "split": "CALIBRATION documents only: int(xxh64_hexdigest(doc_id.encode()), 16) % 2 == 0",
        "budget_chars": BUDGET,
        "methods_tried": list(methods),
        "sources": dict(sorted(tally.sources.items())),
        "by_source": {" ".join(key): f"{sum(v)}/{len(v)}" for key, v in sorted(tally.by_source.items())},
        "groups": groups,
    }


def print_table(doc: dict[str, Any]) -> None:
    table = table_from_json(doc)
    selector = Selector(table)
    print("| group | requests | configuration | n | successes | p_valid | mean exposed | mean follow-up | choice |")
    print("|---|---|---|---|---|---|---|---|---|")
    for key, entry in doc["groups"].items():
        group = RequestGroup.parse(key)
        configs = [Configuration.parse(c) for c in entry["configs"]]
        choice = selector.choose(group, configs)
        for config in configs:
            cell = table.cell(group, config)
            assert cell is not None
            mark = "**r***" if config == choice.config else ""
            print(f"| {key} | {entry['requests']} | {config.key} | {cell.n} | {cell.successes} | {cell.p_valid:.3f} "
                  f"| {cell.mean_exposed:,.0f} | {cell.mean_follow_up:,.0f} | {mark} |")
        if choice.config not in configs:
            print(f"| {key} | {entry['requests']} | → {choice.config.key} | | | | | | {choice.reason} |")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--methods", default="lexical,bm25,hybrid,region", help="location methods to calibrate")
    parser.add_argument("--limit", type=int, default=None, help="first N requests per source (smoke runs)")
    parser.add_argument("--sources", default=",".join(SOURCES), help="request sources to include")
    parser.add_argument("--dry-run", action="store_true", help="print the table, do not write it")
    args = parser.parse_args(argv)
    methods = [m for m in args.methods.split(",") if m]
    unknown = set(methods) - set(SNIPPETS)
    if unknown:
        parser.error(f"unknown methods {sorted(unknown)}")
    t0 = time.perf_counter()
    sources = [s for s in args.sources.split(",") if s]
    if set(sources) - set(SOURCES):
        parser.error(f"unknown sources {sorted(set(sources) - set(SOURCES))}")
    doc = table_json(calibrate(methods, args.limit, sources), methods)
    print(f"calibration split only; sources {doc['sources']}; {time.perf_counter() - t0:.1f} s\n")
    print_table(doc)
    print("\nsuccesses by source (calibration split):")
    for key, value in doc["by_source"].items():
        print(f"  {key}: {value}")
    if not args.dry_run:
        OUT.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n", encoding="utf-8")
        print(f"\nwrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
