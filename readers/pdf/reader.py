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

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

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
    Reader,
    ReadIntent,
    Scope,
    SlotCoverage,
    UnsupportedArtifact,
)
from readers.pdf.anchors import TABLE, PageMap, resolve
from readers.pdf.extract import MAX_SECONDS, extract
from readers.pdf.preview import page_ranges, preview
from readers.pdf.statements import asked_kinds, boosted, statement_pages
from readers.pdf.tables import page_tables, wants_tables
from readers.retrieval.bm25index import (
    Mask,
    Offsets,
    Scores,
    UnitIndex,
    blocked_mask,
    content_tokens,
)
from readers.retrieval.confidence import judge, signals
from readers.retrieval.methods import METHODS, Ranking, choose_units, rank_units
from readers.retrieval.segment import segment, strip_span

TABLE_PAGES = 3
_T = TypeVar("_T")
_METHOD = "bm25+neighbours"
_MAGIC = b"%PDF-"
_HEAD = 1024  # the PDF header may follow some junk within the first 1 KiB


@dataclass(frozen=True, eq=False)
class _View:
    """The units a locate may pick from (all, or those inside ``&scope=``)."""

    starts: Offsets
    ends: Offsets
    first: int
    markers: Mask
    pages: tuple[int, int]
    scope: Scope


class PdfReader(Reader):
    """PDF documents with a text layer (scanned pages are reported, not OCR'd)."""

    name = "pdf"
    extensions = frozenset({".pdf"})
    magic = (_MAGIC,)
    actions = frozenset({"intent", "collect", "refine", "verify", "focus", "scout", "full", "raw"})
    max_bytes = 64 * 1024 * 1024
    max_seconds = MAX_SECONDS
    cost = CostProfile(parse_ms_per_mb=450.0, per_call_chars=140, full_view_ratio=0.3)
    methods = frozenset(METHODS)

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

    # -- locate ----------------------------------------------------------------

    def locate(
        self,
        parsed: Parsed,
        intent: ReadIntent,
        max_chars: int,
        exclude: Sequence[tuple[int, int]] = (),
        k: int | None = None,
    ) -> Batch:
        slots = intent.slots or (intent.text,)
        view = _view(parsed, intent.scope)
        flags = _text_flags(parsed, view)
        contents = [content_tokens(slot) for slot in slots]
        if not np.count_nonzero(~view.markers) or not any(contents):
            coverage = tuple(SlotCoverage(slot, "unresolved") for slot in slots)
            flag = "no-content-words" if np.count_nonzero(~view.markers) else "no-text-found"
            return Batch((), view.scope, coverage, flags=(*flags, flag))
        index = _data(parsed, "index", UnitIndex)
        blocked = blocked_mask(view.starts, view.ends, exclude) | view.markers
        searched = {j: slot for j, slot in enumerate(slots) if contents[j]}
        units = (view.starts, view.ends, view.first)
        ranking = _statements_first(parsed, view, rank_units(parsed, index, units, intent, searched, blocked,
                                                             silent=view.markers), intent.text)
        tables: list[EvidenceItem] = []
        if wants_tables(intent.text):
            tables = _table_items(parsed, view, ranking.raw, contents, max_chars // 2, exclude)
            flags = (*flags, "tables" if tables else "no-table-found")
        budget = max_chars - sum(len(t.text) for t in tables)
        sel = choose_units(ranking, index, units, blocked, budget, k)
        items = [_item(parsed, int(sel.starts[r[0]]), int(sel.ends[r[-1]])) for r in sel.passages()]
        items = [
            EvidenceItem(it.anchor, it.text, round(max(sel.best[u] for u in r), 4), _slots(sel.slots, r))
            for it, r in zip(items, sel.passages(), strict=True)
        ]
        items = sorted(items + tables, key=lambda it: (it.anchor.char_start, it.anchor.char_end))
        coverage = tuple(
            _coverage(parsed, view, slot, j, contents[j], ranking.raw.get(j), items, _uncited(parsed, items, intent))
            for j, slot in enumerate(slots)
        )
        method = ranking.method if not tables else f"{ranking.method}+find_tables"
        scope = _with_method(view.scope, method)
        flags = (*flags, *ranking.flags)
        return Batch(tuple(items), scope, coverage, flags)

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


def _statements_first(parsed: Parsed, view: _View, ranking: Ranking, text: str) -> Ranking:
    """A read that names a financial statement, or asks for figures one holds, ranks that statement's pages
    first (readers.pdf.statements)."""
    known: dict[str, list[int]] = parsed.data.get("statements", {})
    lifts: dict[int, float] = {}
    for kind, share in asked_kinds(text).items():
        for page in known.get(kind, ()):
            lifts[page] = max(share, lifts.get(page, 0.0))
    if not lifts:
        return ranking
    page_of = np.searchsorted(_pages(parsed).marker_starts, view.starts, side="right")
    lift = np.zeros(len(page_of))
    for page, share in lifts.items():
        lift = np.maximum(lift, share * (page_of == page))
    return replace(ranking, ranked=boosted(ranking.ranked, lift), flags=(*ranking.flags, "statement-pages"))


def _data(parsed: Parsed, key: str, kind: type[_T]) -> _T:
    value = parsed.data[key]
    assert isinstance(value, kind)
    return value


def _pages(parsed: Parsed) -> PageMap:
    return _data(parsed, "pages", PageMap)


def _with_method(scope: Scope, method: str) -> Scope:
    return Scope(scope.units_scanned, scope.unit, method, scope.chars_processed, scope.note)


def _view(parsed: Parsed, spec: str | None) -> _View:
    pages = _pages(parsed)
    starts: Offsets = parsed.data["unit_starts"]
    ends: Offsets = parsed.data["unit_ends"]
    markers: Mask = parsed.data["markers"]
    if spec is None:
        scope = Scope(int(np.count_nonzero(~markers)), "sentences", _METHOD, len(parsed.full_view))
        return _View(starts, ends, 0, markers, (1, pages.pages), scope)
    lo, hi = resolve(pages, spec, "&scope=")
    first = int(np.searchsorted(ends, lo, side="right"))
    last = int(np.searchsorted(starts, hi, side="left"))
    starts, ends, markers = starts[first:last].copy(), ends[first:last].copy(), markers[first:last]
    if len(starts):  # clip the edge units to the scope
        starts[0], ends[0] = strip_span(parsed.full_view, max(int(starts[0]), lo), int(ends[0]))
        starts[-1], ends[-1] = strip_span(parsed.full_view, int(starts[-1]), min(int(ends[-1]), hi))
        markers = markers | (starts >= ends)
    scope = Scope(int(np.count_nonzero(~markers)), "sentences", _METHOD, hi - lo, note=f"scope {spec.strip()}")
    return _View(starts, ends, first, markers, (pages.page_of(lo), pages.page_of(max(lo, hi - 1))), scope)


def _text_flags(parsed: Parsed, view: _View) -> tuple[str, ...]:
    """``no-text-layer:p3,p7-9`` for pages in view without text; ``repaired-pdf``."""
    pages = _pages(parsed)
    lo, hi = view.pages
    empty = [p for p in range(lo, hi + 1) if pages.text_starts[p - 1] == pages.text_ends[p - 1]]
    flags = [f"no-text-layer:{page_ranges(empty, 60)}"] if empty else []
    if parsed.data["meta"]["repaired"]:
        flags.append("repaired-pdf")
    return tuple(flags)


def _item(parsed: Parsed, start: int, end: int) -> EvidenceItem:
    pages = _pages(parsed)
    heading = pages.heading_above(start)
    anchor = Anchor(
        pages.label(start, end),
        start,
        end,
        pages.line_of(start),
        pages.line_of(max(start, end - 1)),
        heading.title if heading else None,
    )
    return EvidenceItem(anchor, parsed.full_view[start:end])


def _slots(slots: dict[int, set[int]], run: Sequence[int]) -> tuple[int, ...]:
    return tuple(sorted(set().union(*(slots[u] for u in run))))


def _coverage(
    parsed: Parsed,
    view: _View,
    slot: str,
    j: int,
    content: frozenset[str],
    scores: Scores | None,
    items: Sequence[EvidenceItem],
    pages: Sequence[str] = (),
) -> SlotCoverage:
    """The slot's items judged by the calibrated coverage model (``readers.retrieval.confidence``); an
    item counts as the slot's when it scores > 0 and shares a content word. ``pages``: statement pages
    the read asked for that no item cites, the first candidates to look at."""
    mine = sorted((it for it in items if j in it.slots), key=lambda it: -it.score)
    if not (mine and mine[0].score > 0 and content & content_tokens(mine[0].text)):
        mine = []
    candidates: list[str] = list(pages)
    if scores is not None:
        for u in np.argsort(-scores, kind="stable")[:12].tolist():
            label = _pages(parsed).label(int(view.starts[u]), int(view.ends[u]))
            if scores[u] > 0 and label not in candidates:
                candidates.append(label)
    sig = signals(_data(parsed, "index", UnitIndex), slot, scores, [it.text for it in mine])
    return judge(slot, sig, [it.anchor.label for it in mine], candidates)


# -- tables ----------------------------------------------------------------------


def _cached_tables(parsed: Parsed, page: int) -> list[str]:
    cache: dict[int, list[str]] = parsed.data.setdefault("tables", {})
    if page not in cache:
        cache[page] = page_tables(parsed.data["pdf"], page)
    return cache[page]


def _best_pages(parsed: Parsed, view: _View, raw: dict[int, Scores]) -> list[tuple[int, float]]:
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
    view: _View,
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
