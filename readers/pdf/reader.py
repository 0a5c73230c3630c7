"""The PDF Reader: page-marked text of a PDF, BM25 evidence, tables on demand.

Full view: every page's text as mupdf extracts it, each page introduced by a
``--- p12 ---`` marker line (``readers.pdf.extract``). It is segmented like
prose by ``readers.retrieval.segment`` and indexed with ``readers.retrieval.bm25index``, and
located by the same methods as the Text Reader (``readers.retrieval.methods``:
lexical, bm25, hybrid, region); marker lines are units that never score and can
never be picked, so a passage never crosses a page and is labelled
``p12:L3-9`` (lines of page 12).
Anchors and scopes: ``readers.pdf.anchors``. A page without a text layer is
reported (preview, flags), never OCR'd.

When an intent asks for a table (``table``, ``rows``, ``columns``...),
``find_tables`` runs on the :data:`TABLE_PAGES` best-scoring pages and each
table comes back as TSV, an exact result with an empty span labelled
``p12:table1`` (``readers.pdf.tables``), using at most half the budget.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np

from readers.base import (
    Anchor,
    ArtifactSource,
    ArtifactTooLarge,
    BadAnchor,
    Batch,
    CostProfile,
    EvidenceItem,
    Parsed,
    ReadIntent,
    Scope,
    UnsupportedArtifact,
)
from readers.kit.anchors import widen_lines
from readers.pdf.anchors import PAGE_LINES, TABLE, PageMap, resolve
from readers.pdf.extract import MAX_SECONDS, extract
from readers.pdf.preview import page_ranges, preview
from readers.pdf.statements import asked_kinds, statement_pages
from readers.pdf.structure import (
    ROW_LIFT,
    adjusted,
    needed_rows,
    rows_shown,
    statement_lines,
    statement_needs,
    structure_of,
    unit_adjustment,
)
from readers.pdf.tables import page_tables, wants_tables
from readers.retrieval.bm25index import Mask, Offsets, Scores, UnitIndex, content_tokens
from readers.retrieval.locate import Adjustment, Extras, Found, RankingReader, UnitView
from readers.retrieval.methods import Adjust
from readers.retrieval.segment import segment, strip_span

TABLE_PAGES = 3
_T = TypeVar("_T")
_METHOD = "bm25+neighbours"
NO_TEXT = "no-text-found"
_MAGIC = b"%PDF-"
_HEAD = 1024  # the PDF header may follow some junk within the first 1 KiB


class PdfReader(RankingReader):
    """PDF documents with a text layer (scanned pages are reported, not OCR'd)."""

    name = "pdf"
    extensions = frozenset({".pdf"})
    magic = (_MAGIC,)
    max_bytes = 64 * 1024 * 1024
    max_seconds = MAX_SECONDS
    cost = CostProfile(parse_ms_per_mb=450.0, per_call_chars=140, full_view_ratio=0.3)

    def accepts(self, name: str, head: bytes) -> bool:
        return _MAGIC in head[:_HEAD]

    def parse(self, source: ArtifactSource) -> Parsed:
        if source.size > self.max_bytes:
            raise ArtifactTooLarge(
                f"{source.size:,} bytes is over the PDF Reader's {self.max_bytes:,}-byte bound",
                hint="read the original bytes with @raw (e.g. pdftotext -f 1 -l 20 file.pdf -)",
            )
        data = source.read_bytes(self.max_bytes)
        if _MAGIC not in data[:_HEAD]:
            raise UnsupportedArtifact("not a PDF (no %PDF- header)", hint="read the original bytes with @raw")
        ex = extract(data, self.max_seconds)
        seg = segment(ex.view, prose=True, markdown=False)
        starts = np.fromiter((s for s, _ in seg.units), np.int64, len(seg.units))
        ends = np.fromiter((e for _, e in seg.units), np.int64, len(seg.units))
        marker_starts = np.asarray(ex.marker_starts, dtype=np.int32)
        pages = PageMap(
            ex.view,
            marker_starts,
            np.asarray(ex.text_starts, dtype=np.int32),
            np.asarray(ex.text_ends, dtype=np.int32),
            seg.line_starts,
            ex.headings,
        )
        meta = {"title": ex.title, "outline": ex.outline, "repaired": ex.repaired, "seconds": ex.seconds}
        return Parsed(
            full_view=ex.view,
            kind="pdf",
            data={
                "pages": pages,
                "unit_starts": starts,
                "unit_ends": ends,
                "markers": np.isin(starts, marker_starts),
                "statements": statement_pages([ex.view[s:e] for s, e in zip(ex.text_starts, ex.text_ends,
                                                                             strict=True)]),
                "index": UnitIndex([ex.view[s:e] for s, e in seg.units]),
                "meta": meta,
                "pdf": data,
                "tables": {},
            },
        )

    # -- locate: the pipeline's hooks (readers.retrieval.locate) ---------------

    def units(self, parsed: Parsed, scope: str | None) -> UnitView:
        return _view(parsed, scope)

    def anchor(self, parsed: Parsed, view: UnitView, run: Sequence[int]) -> Anchor:
        return _anchor(parsed, int(view.starts[run[0]]), int(view.ends[run[-1]]))

    def flags(self, parsed: Parsed, view: UnitView) -> tuple[str, ...]:
        return _text_flags(parsed, view)

    def adjustment(self, parsed: Parsed, view: UnitView, intent: ReadIntent) -> Adjustment:
        """A filing's structure (readers.pdf.structure): boilerplate pages the read does not ask for are
        demoted and the statement rows its metrics need lifted, on the raw scores; and a read that names a
        financial statement, or asks for figures one holds, ranks that statement's pages first
        (readers.pdf.statements)."""
        lift = _statement_lift(parsed, view, intent.text)
        return Adjustment(raw=_structure(parsed, view, intent.text), lift=lift,
                          flag="statement-pages" if lift is not None else "")

    def structure(self, parsed: Parsed, slot: str, items: Sequence[EvidenceItem]) -> float:
        """1.0 when the slot's passages show, on each needed statement's own page, the rows its metric is
        computed from (readers.pdf.structure.rows_shown: never for reasons, breakdowns or adjusted measures)."""
        pages = _pages(parsed)
        shown = [(pages.page_of(item.anchor.char_start), item.text) for item in items]
        return float(bool(shown) and rows_shown(slot, _known(parsed), shown))

    def extras(self, parsed: Parsed, view: UnitView, found: Found, budget: int,
               exclude: Sequence[tuple[int, int]]) -> Extras:
        """The statement rows a read's metric is computed from (readers.pdf.structure: a ratio or margin
        question's answer is in its statements' rows, which share few words with it), then the tables of the
        best pages as TSV when the read asks for a table; in at most half the budget."""
        rows = _row_items(parsed, view, found, budget // 2, exclude)
        tables: list[EvidenceItem] = []
        if wants_tables(found.intent.text):
            room = budget // 2 - sum(len(item.text) for item in rows)
            tables = _table_items(parsed, view, found.ranking.raw, list(found.contents), room, exclude)
        flags = (("statement-rows",) if rows else ()) + (
            (("tables",) if tables else ("no-table-found",)) if wants_tables(found.intent.text) else ())
        method = ("+statement_rows" if rows else "") + ("+find_tables" if tables else "")
        return Extras((*rows, *tables), flags, method)

    def leads(self, parsed: Parsed, items: Sequence[EvidenceItem], intent: ReadIntent) -> tuple[str, ...]:
        return tuple(_uncited(parsed, items, intent))

    def widen(self, parsed: Parsed, anchor: str) -> list[str]:
        """A passage's whole page first, then lines of context on that page."""
        match = PAGE_LINES.fullmatch(anchor.strip())
        if not match:
            return []
        page = int(match.group(1))
        lines = widen_lines(f"L{match.group(2)}" + (f"-{match.group(3)}" if match.group(3) else ""),
                            _pages(parsed).page_lines(page), len(parsed.full_view), f"p{page}:")
        return [f"p{page}", *lines]

    # -- focus -----------------------------------------------------------------

    def focus(self, parsed: Parsed, anchor: str) -> Batch:
        pages = _pages(parsed)
        spec = anchor.strip()
        table = TABLE.fullmatch(spec)
        if table:
            return _table_focus(parsed, int(table.group(1)), int(table.group(2)))
        start, end = resolve(pages, spec, "@focus=")
        first, last = pages.line_of(start), pages.line_of(max(start, end - 1))
        heading = pages.heading_above(start)
        item = EvidenceItem(
            Anchor(spec, start, end, first, last, heading.title if heading else None), parsed.full_view[start:end]
        )
        return Batch((item,), Scope(last - first + 1, "lines", "focus", end - start))

    # -- preview ---------------------------------------------------------------

    def preview(self, parsed: Parsed, max_chars: int) -> str:
        meta = parsed.data["meta"]
        return preview(_pages(parsed), str(meta["title"]), str(meta["outline"]), bool(meta["repaired"]), max_chars)


# -- helpers ---------------------------------------------------------------------


def _uncited(parsed: Parsed, items: Sequence[EvidenceItem], intent: ReadIntent) -> list[str]:
    """Pages of the statements the read names or asks figures of that no passage cites (``p48``), most
    wanted first."""
    known: dict[str, list[int]] = parsed.data.get("statements", {})
    cited = {_pages(parsed).page_of(item.anchor.char_start) for item in items}
    ranked = sorted(asked_kinds(intent.text).items(), key=lambda kv: -kv[1])
    pages = [page for kind, _ in ranked for page in known.get(kind, ()) if page not in cited]
    return [f"p{page}" for page in dict.fromkeys(pages)]


def _known(parsed: Parsed) -> dict[str, Any]:
    """The filing's page structure (boilerplate pages, each statement's own page), found on first use."""
    pages = _pages(parsed)

    def page_texts() -> list[str]:
        return [parsed.full_view[int(a) : int(b)] for a, b in zip(pages.text_starts, pages.text_ends, strict=True)]

    return structure_of(parsed.data, page_texts, parsed.data.get("statements", {}))


def _structure(parsed: Parsed, view: UnitView, text: str) -> Adjust | None:
    """Boilerplate units demoted and the needed statement rows lifted, on a slot's raw scores (None: neither
    applies to this read)."""
    page_of = np.searchsorted(_pages(parsed).marker_starts, view.starts, side="right")
    found = unit_adjustment(text, _known(parsed), page_of,
                            lambda u: parsed.full_view[int(view.starts[u]) : int(view.ends[u])])
    if found is None:
        return None
    scale, lift = found
    return lambda _j, raw: adjusted(raw, scale, lift)


def _statement_lift(parsed: Parsed, view: UnitView, text: str) -> Scores | None:
    """Per unit in view: the share of the slot's best score its statement page gains (None: no lift)."""
    known: dict[str, list[int]] = parsed.data.get("statements", {})
    lifts: dict[int, float] = {}
    for kind, share in asked_kinds(text).items():
        for page in known.get(kind, ()):
            lifts[page] = max(share, lifts.get(page, 0.0))
    if not lifts:
        return None
    page_of = np.searchsorted(_pages(parsed).marker_starts, view.starts, side="right")
    lift = np.zeros(len(page_of))
    for page, share in lifts.items():
        lift = np.maximum(lift, share * (page_of == page))
    return lift


def _data(parsed: Parsed, key: str, kind: type[_T]) -> _T:
    value = parsed.data[key]
    assert isinstance(value, kind)
    return value


def _pages(parsed: Parsed) -> PageMap:
    return _data(parsed, "pages", PageMap)


def _view(parsed: Parsed, spec: str | None) -> UnitView:
    """The units a locate may pick from (all, or those inside ``&scope=``); page markers never score."""
    starts: Offsets = parsed.data["unit_starts"]
    ends: Offsets = parsed.data["unit_ends"]
    markers: Mask = parsed.data["markers"]
    index = functools.partial(_data, parsed, "index", UnitIndex)
    if spec is None:
        scope = Scope(int(np.count_nonzero(~markers)), "sentences", _METHOD, len(parsed.full_view))
        return UnitView(starts, ends, 0, scope, index, silent=markers, span=(0, len(parsed.full_view)),
                        empty=NO_TEXT)
    lo, hi = resolve(_pages(parsed), spec, "&scope=")
    first = int(np.searchsorted(ends, lo, side="right"))
    last = int(np.searchsorted(starts, hi, side="left"))
    starts, ends, markers = starts[first:last].copy(), ends[first:last].copy(), markers[first:last]
    if len(starts):  # clip the edge units to the scope
        starts[0], ends[0] = strip_span(parsed.full_view, max(int(starts[0]), lo), int(ends[0]))
        starts[-1], ends[-1] = strip_span(parsed.full_view, int(starts[-1]), min(int(ends[-1]), hi))
        markers = markers | (starts >= ends)
    scope = Scope(int(np.count_nonzero(~markers)), "sentences", _METHOD, hi - lo, note=f"scope {spec.strip()}")
    return UnitView(starts, ends, first, scope, index, silent=markers, span=(lo, hi), empty=NO_TEXT)


def _text_flags(parsed: Parsed, view: UnitView) -> tuple[str, ...]:
    """``no-text-layer:p3,p7-9`` for pages in view without text; ``repaired-pdf``."""
    pages = _pages(parsed)
    lo, hi = pages.page_of(view.span[0]), pages.page_of(max(view.span[0], view.span[1] - 1))
    empty = [p for p in range(lo, hi + 1) if pages.text_starts[p - 1] == pages.text_ends[p - 1]]
    flags = [f"no-text-layer:{page_ranges(empty, 60)}"] if empty else []
    if parsed.data["meta"]["repaired"]:
        flags.append("repaired-pdf")
    return tuple(flags)


def _anchor(parsed: Parsed, start: int, end: int) -> Anchor:
    pages = _pages(parsed)
    heading = pages.heading_above(start)
    return Anchor(pages.label(start, end), start, end, pages.line_of(start), pages.line_of(max(start, end - 1)),
                  heading.title if heading else None)


# -- statement rows --------------------------------------------------------------


def _row_items(parsed: Parsed, view: UnitView, found: Found, room: int,
               exclude: Sequence[tuple[int, int]]) -> list[EvidenceItem]:
    """Per statement a slot's metric needs, its heading and needed rows on its own page, anchored by lines,
    within ``room`` characters (a statement that does not fit whole is left out: half a statement answers
    nothing) and the view's span; scored as a lifted row ranks (ROW_LIFT of the slot's best open unit):
    below the slot's best passage, which stays what the judge reads first, above weaker passages, which a
    pack that overflows drops first."""
    slots = found.intent.slots or (found.intent.text,)
    items: list[EvidenceItem] = []
    for page, kind, rows in statement_needs(found.intent.text, _known(parsed)):
        spans = _statement_spans(parsed, page, kind, rows)
        inside = all(view.span[0] <= a and b <= view.span[1] for a, b in spans)
        if not spans or not inside or any(lo < b and a < hi for a, b in spans for lo, hi in exclude):
            continue
        serves = tuple(j for j, slot in enumerate(slots) if kind in needed_rows(slot))
        score = _row_score(found, serves)
        new = [EvidenceItem(_anchor(parsed, a, b), parsed.full_view[a:b], score, serves) for a, b in spans]
        if sum(len(item.text) for item in (*items, *new)) <= room:
            items += new
    return items


def _row_score(found: Found, slots: Sequence[int]) -> float:
    """ROW_LIFT x the best ranked score of an open unit among ``slots``."""
    open_ = ~found.blocked
    best = [float(found.ranking.ranked[j][open_].max()) for j in slots if j in found.ranking.ranked and open_.any()]
    return round(ROW_LIFT * max(best, default=0.0), 4)


def _statement_spans(parsed: Parsed, page: int, kind: str, rows: set[str]) -> list[tuple[int, int]]:
    """The full-view spans of a statement page's heading and needed rows (readers.pdf.structure)."""
    pages = _pages(parsed)
    at = int(pages.text_starts[page - 1])
    text = parsed.full_view[at : int(pages.text_ends[page - 1])]
    return [(at + a, at + b) for a, b in statement_lines(text, kind, rows)]


# -- tables ----------------------------------------------------------------------


def _cached_tables(parsed: Parsed, page: int) -> list[str]:
    cache: dict[int, list[str]] = parsed.data.setdefault("tables", {})
    if page not in cache:
        cache[page] = page_tables(parsed.data["pdf"], page)
    return cache[page]


def _best_pages(parsed: Parsed, view: UnitView, raw: dict[int, Scores]) -> list[tuple[int, float]]:
    """The TABLE_PAGES pages whose best unit scores highest (any slot)."""
    pages = _pages(parsed)
    best: dict[int, float] = {}
    for scores in raw.values():
        for u in np.argsort(-scores, kind="stable")[:50].tolist():
            if scores[u] > 0:
                page = pages.page_of(int(view.starts[u]))
                best[page] = max(best.get(page, 0.0), float(scores[u]))
    return sorted(best.items(), key=lambda kv: -kv[1])[:TABLE_PAGES]


def _table_items(
    parsed: Parsed,
    view: UnitView,
    raw: dict[int, Scores],
    contents: list[frozenset[str]],
    budget: int,
    exclude: Sequence[tuple[int, int]],
) -> list[EvidenceItem]:
    """TSV items for the tables on the best pages, each cut at whole rows to the budget."""
    pages = _pages(parsed)
    items: list[EvidenceItem] = []
    for page, score in _best_pages(parsed, view, raw):
        at = int(pages.text_starts[page - 1])
        if any(lo < at < hi for lo, hi in exclude):  # the page was already exposed whole
            continue
        for number, tsv in enumerate(_cached_tables(parsed, page), 1):
            text = _rows_within(tsv, budget - sum(len(i.text) for i in items))
            if not text:
                return items
            if text != tsv:  # say the table goes on: a cut table must not read as a whole one
                more = tsv.count("\n") - text.count("\n")
                text += f"\n… {more:,} more rows: @focus=p{page}:table{number}"
            words = content_tokens(text)
            slots = tuple(j for j, c in enumerate(contents) if c & words)
            items.append(EvidenceItem(Anchor(f"p{page}:table{number}", at, at), text, round(score, 4), slots))
    return items


def _rows_within(tsv: str, room: int) -> str:
    """The TSV cut after the last whole row that fits in ``room`` chars ('' if none does)."""
    if len(tsv) <= room:
        return tsv
    cut = tsv.rfind("\n", 0, room + 1)
    return tsv[:cut] if cut > 0 else ""


def _table_focus(parsed: Parsed, page: int, number: int) -> Batch:
    pages = _pages(parsed)
    if not 1 <= page <= pages.pages:
        raise BadAnchor(f"page {page} is outside p1-{pages.pages}", hint=f"try @focus=p1-{min(3, pages.pages)}")
    tables = _cached_tables(parsed, page)
    if not 1 <= number <= len(tables):
        found = f"page {page} has {len(tables)} tables found" if tables else f"no table was found on page {page}"
        raise BadAnchor(f"{found}; p{page}:table{number} does not resolve", hint=f"read the page with @focus=p{page}")
    at = int(pages.text_starts[page - 1])
    tsv = tables[number - 1]
    item = EvidenceItem(Anchor(f"p{page}:table{number}", at, at), tsv)
    return Batch((item,), Scope(tsv.count("\n") + 1, "rows", "find_tables", len(tsv)))
