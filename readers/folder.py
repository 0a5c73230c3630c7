"""The Folder Reader: a directory as one collection artifact.

A collection's full view is the concatenation of its members' full views,
each after a ``=== path ===`` marker line, in path order; members are parsed
by their own Readers through a :class:`CollectionSource` (the daemon hands out
its cached, fingerprinted parses, so the Folder Reader does no I/O itself).
Because a member's full view sits verbatim inside the collection's, every
member passage keeps being an exact slice, with its span shifted by the
member's offset and its anchor prefixed by the member path
(``reports/q3.pdf:p12:L3-9``).

``DIR@scout`` is the inventory (kinds, sizes, full-view length per member);
``DIR@intent=...`` ranks members with BM25 over their paths and the start of
their full views, reads at most :data:`MAX_FILES_READ` of them with their own
Readers (each with the whole budget and the intent's location method when it
has it) and keeps the passages with the best file score x passage score
(relative to the best of the same Reader: Readers score on their own scales)
that fit the budget together. ``&scope=`` is a glob over member paths
(``*.pdf``, ``logs/*``). Work is bounded in members, characters and time; a
parse cut short by the time bound is flagged (``partial-index``) and not
cached, so the next request continues where it stopped (members already
parsed are warm).
"""

from __future__ import annotations

import fnmatch
import re
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from readers.base import (
    Anchor,
    ArtifactSource,
    BadAnchor,
    Batch,
    CostProfile,
    EvidenceItem,
    Parsed,
    Reader,
    ReaderError,
    ReadIntent,
    Scope,
    SlotCoverage,
    UnsupportedArtifact,
)
from readers.escape import escape_name
from readers.retrieval.bm25index import UnitIndex, content_tokens
from readers.retrieval.methods import METHODS

MAX_MEMBERS = 500
MAX_FULL_VIEW_CHARS = 48 * 1024 * 1024
PARSE_TIME_BUDGET_S = 8.0
MAX_FILES_READ = 5
SELECTION_CHARS = 20_000
_PATH_WORDS = re.compile(r"[A-Za-z]+|\d+")


@dataclass(frozen=True)
class Member:
    """One file of the collection, as listed (path relative to the folder)."""

    rel: str
    size: int
    mtime_ns: int


class CollectionSource(Protocol):
    """What the Folder Reader may know about and read from a directory."""

    @property
    def name(self) -> str:
        """The folder's path relative to the mount root ('' for the root)."""
        ...

    def members(self) -> tuple[Sequence[Member], int]:
        """Regular files under the folder (bounded walk), and how many the bound left out."""
        ...

    def parsed(self, rel: str) -> tuple[Reader, Parsed]:
        """A member parsed by its own Reader (cached by the caller); ReaderError if it cannot be."""
        ...

    def cached(self, rel: str) -> bool:
        """True when ``parsed(rel)`` would cost no parse (the time bound ignores those)."""
        ...


@dataclass(frozen=True)
class MemberView:
    """Where a member sits in the collection's full view, or why it does not."""

    rel: str
    size: int
    kind: str
    start: int = 0
    end: int = 0
    error: str = ""

    @property
    def chars(self) -> int:
        return self.end - self.start

    @property
    def shown(self) -> str:
        """The member's path as packs, anchors and the inventory print it (readers.escape): one line, no
        separator of the inventory's own; an anchor with it is taken back by focus."""
        return escape_name(self.rel)


@dataclass
class _Collection:
    views: list[MemberView]
    readers: dict[str, tuple[Reader, Parsed]]
    index: UnitIndex | None
    listed_out: int
    unparsed: int

    def readable(self) -> list[MemberView]:
        return [v for v in self.views if v.rel in self.readers]


class FolderReader(Reader):
    """Directories: inventory, candidate files, cross-file evidence."""

    name = "folder"
    extensions = frozenset({"/"})
    cost = CostProfile(parse_ms_per_mb=60.0, per_call_chars=200, full_view_ratio=0.5)
    methods = frozenset(METHODS)  # passed on to each member whose Reader has the method

    def accepts(self, name: str, head: bytes) -> bool:
        return False  # chosen for directories by the daemon, never for a file

    def parse(self, source: ArtifactSource) -> Parsed:
        raise UnsupportedArtifact("the folder Reader reads directories, not files", hint="ask about the file itself")

    def parse_collection(self, source: CollectionSource, time_budget_s: float | None = None) -> Parsed:
        """Parse members in path order until the member, character or time bound.

        Members already parsed (cached by the source) are always included; at least
        one new member is parsed per call, so repeated requests always progress.
        """
        members, listed_out = source.members()
        budget = PARSE_TIME_BUDGET_S if time_budget_s is None else time_budget_s
        deadline = time.monotonic() + budget
        parts: list[str] = []
        views: list[MemberView] = []
        readers: dict[str, tuple[Reader, Parsed]] = {}
        offset = unparsed = 0
        fresh = 0
        for member in sorted(members, key=lambda m: m.rel)[:MAX_MEMBERS]:
            if offset > MAX_FULL_VIEW_CHARS:
                views.append(MemberView(member.rel, member.size, "?", error="not indexed (folder size bound)"))
                continue
            cached = source.cached(member.rel)
            if fresh and not cached and time.monotonic() > deadline:
                views.append(MemberView(member.rel, member.size, "?", error="not indexed yet (time bound)"))
                unparsed += 1
                continue
            fresh += not cached
            view, text = _member_view(source, member, offset, readers)
            views.append(view)
            if text:
                parts.append(text)
                offset += len(text)
        full_view = "".join(parts)
        left_out = max(0, len(members) - MAX_MEMBERS) + listed_out
        collection = _Collection(views, readers, _selection_index(full_view, views, readers), left_out, unparsed)
        return Parsed(full_view, "folder", {"collection": collection, "complete": unparsed == 0})

    # -- preview -------------------------------------------------------------------

    def preview(self, parsed: Parsed, max_chars: int) -> str:
        if max_chars <= 0:
            return ""
        col = _collection(parsed)
        kinds = Counter(v.kind for v in col.views)
        lines = [
            f"folder: {len(col.views):,} files ({_left_out(col)}), full view {len(parsed.full_view):,} chars",
            "kinds: " + ", ".join(f"{kind} {n}" for kind, n in kinds.most_common()),
            "path · kind · bytes · full-view chars",
        ]
        lines += [_inventory_line(v) for v in col.views]
        return _bounded(lines, max_chars)

    # -- locate --------------------------------------------------------------------

    def locate(self, parsed: Parsed, intent: ReadIntent, max_chars: int, exclude: Sequence[tuple[int, int]] = (),
               k: int | None = None) -> Batch:
        """Each chosen member located by its own Reader with the whole budget; the best passages kept."""
        col = _collection(parsed)
        slots = intent.slots or (intent.text,)
        chosen = _candidates(col, intent, k)
        coverages: list[tuple[MemberView, tuple[SlotCoverage, ...]]] = []
        methods: dict[str, None] = {}
        flags: dict[str, None] = dict.fromkeys(_bound_flags(col))
        batches: list[tuple[MemberView, float, str, Batch]] = []
        for view, weight in chosen:
            reader, member = col.readers[view.rel]
            batch = reader.locate(member, _member_intent(intent, reader), max_chars, _member_exclude(view, exclude))
            batches.append((view, weight, reader.name, batch))
            coverages.append((view, batch.coverage))
            methods[batch.scope.method] = None
            flags.update(dict.fromkeys(batch.flags))
        found = _scored(batches)
        items = _within_budget(found, max_chars)
        kept = {item.anchor.label for item in items}
        coverage = tuple(_merged_coverage(slot, j, coverages, kept) for j, slot in enumerate(slots))
        names = ", ".join(v.shown for v, _ in chosen) or "none"
        method = " / ".join(methods) or "bm25"
        scope = Scope(len(col.readable()), "files", f"{method} in each file (files by bm25)", len(parsed.full_view),
                      note=f"read {len(chosen)} of {len(col.readable())} files: {names}")
        return Batch(tuple(items), scope, coverage, tuple(flags))

    def members(self, parsed: Parsed) -> tuple[tuple[str, int, int], ...]:
        return tuple((view.rel, view.start, view.end) for view in _collection(parsed).views)

    # -- focus -----------------------------------------------------------------------

    def focus(self, parsed: Parsed, anchor: str) -> Batch:
        col = _collection(parsed)
        view, rest = _split_anchor(col, anchor.strip())
        reader, member = col.readers[view.rel]
        if not rest:
            text = parsed.full_view[view.start : view.end]
            item = EvidenceItem(Anchor(view.shown, view.start, view.end, heading=view.shown), text)
            return Batch((item,), Scope(1, "files", "focus", view.chars))
        batch = reader.focus(member, rest)
        return Batch(tuple(_shifted(view, i) for i in batch.items), batch.scope, batch.coverage, batch.flags)

    def widen(self, parsed: Parsed, anchor: str) -> list[str]:
        """A member's own widenings of its anchor, then the whole member."""
        col = _collection(parsed)
        try:
            view, rest = _split_anchor(col, anchor.strip())
        except BadAnchor:
            return []
        if not rest:
            return []
        reader, member = col.readers[view.rel]
        return [*(f"{view.shown}:{a}" for a in reader.widen(member, rest)), view.shown]


# -- parsing helpers -------------------------------------------------------------------


def _member_view(
    source: CollectionSource, member: Member, offset: int, readers: dict[str, tuple[Reader, Parsed]]
) -> tuple[MemberView, str]:
    try:
        reader, parsed = source.parsed(member.rel)
    except ReaderError as err:
        return MemberView(member.rel, member.size, "unreadable", error=err.message), ""
    marker = f"=== {escape_name(member.rel)} ===\n"  # a name cannot forge a member boundary
    start = offset + len(marker)
    readers[member.rel] = (reader, parsed)
    view = MemberView(member.rel, member.size, parsed.kind, start, start + len(parsed.full_view))
    return view, marker + parsed.full_view + "\n"


def _selection_index(full_view: str, views: list[MemberView], readers: Mapping[str, object]) -> UnitIndex | None:
    docs = [_selection_text(full_view, v) for v in views if v.rel in readers]
    return UnitIndex(docs) if docs else None


def _selection_text(full_view: str, view: MemberView) -> str:
    words = " ".join(_PATH_WORDS.findall(view.rel))
    return f"{words} {words} {full_view[view.start : min(view.end, view.start + SELECTION_CHARS)]}"


def _collection(parsed: Parsed) -> _Collection:
    col = parsed.data["collection"]
    assert isinstance(col, _Collection)
    return col


# -- locate helpers -----------------------------------------------------------------------


def _candidates(col: _Collection, intent: ReadIntent, k: int | None) -> list[tuple[MemberView, float]]:
    """The best-scoring members for any slot, at most k (or MAX_FILES_READ), with their score (best = 1)."""
    readable = col.readable()
    if col.index is None or not readable:
        return []
    slots = intent.slots or (intent.text,)
    scores = np.zeros(len(readable))
    for slot in slots:
        if content_tokens(slot):
            part = col.index.scores(slot)
            top = float(part.max()) if len(part) else 0.0
            scores = np.maximum(scores, part / top if top > 0 else part)
    in_scope = np.array([_in_scope(v.rel, intent.scope) for v in readable], dtype=bool)
    scores = np.where(in_scope, scores, 0.0)
    order = [int(i) for i in np.argsort(-scores, kind="stable") if scores[i] > 0]
    return [(readable[i], float(scores[i])) for i in order[: min(k or MAX_FILES_READ, MAX_FILES_READ)]]


def _member_intent(intent: ReadIntent, reader: Reader) -> ReadIntent:
    """The intent for one member: its slots and context, and the location method if that Reader has it."""
    method = intent.method if intent.method in reader.methods else None
    return ReadIntent(intent.text, intent.slots or (intent.text,), context=intent.context, method=method)


def _scored(batches: list[tuple[MemberView, float, str, Batch]]) -> list[tuple[float, EvidenceItem]]:
    """Each passage with file score x its score relative to the best passage of the same Reader:
    one Reader's scores compare across files (BM25 over sentences), different Readers' do not
    (a table's scores are ~10x a text's)."""
    best: dict[str, float] = {}
    for _, _, reader, batch in batches:
        best[reader] = max([best.get(reader, 0.0), *(item.score for item in batch.items)])
    return [
        (weight * (item.score / best[reader] if best[reader] > 0 else 0.0), _shifted(view, item))
        for view, weight, reader, batch in batches
        for item in batch.items
    ]


def _within_budget(found: list[tuple[float, EvidenceItem]], max_chars: int) -> list[EvidenceItem]:
    """The best passages of all files read (:func:`_scored`) that fit the budget together.

    Each member is located with the whole budget, so the characters go where the scores are. On the
    calibration's cross-file requests (scripts/calibration_sets.py, bm25, 187 requests): an even split
    gave each of 5 files 300 characters whatever their relevance; 2/3 of the budget per file with
    scores relative to each file's best: 112 hits; the whole budget with scores relative to each
    Reader's best: 128.
    """
    kept: list[EvidenceItem] = []
    used = 0
    for _, item in sorted(found, key=lambda pair: -pair[0]):
        if used + len(item.text) <= max_chars:
            kept.append(item)
            used += len(item.text)
    return sorted(kept, key=lambda it: (it.anchor.char_start, it.anchor.char_end))


def _bound_flags(col: _Collection) -> tuple[str, ...]:
    flags = ["partial-index"] if col.unparsed else []
    if col.listed_out:
        flags.append(f"folder-bound: {col.listed_out:,} entries not searched (ask about a subfolder)")
    return tuple(flags)


def _in_scope(rel: str, scope: str | None) -> bool:
    if not scope:
        return True
    pattern = scope.strip()
    if pattern.endswith("/"):
        return rel.startswith(pattern)
    return fnmatch.fnmatch(rel, pattern) or fnmatch.fnmatch(rel.rsplit("/", 1)[-1], pattern)


def _member_exclude(view: MemberView, exclude: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    spans = []
    for start, end in exclude:
        if end > view.start and start < view.end:
            spans.append((max(start, view.start) - view.start, min(end, view.end) - view.start))
    return spans


def _shifted(view: MemberView, item: EvidenceItem) -> EvidenceItem:
    a = item.anchor
    empty = a.char_end <= a.char_start
    start, end = (view.start, view.start) if empty else (a.char_start + view.start, a.char_end + view.start)
    anchor = Anchor(f"{view.shown}:{a.label}", start, end, a.line_start, a.line_end, a.heading or view.shown)
    return EvidenceItem(anchor, item.text, item.score, item.slots)


def _merged_coverage(
    slot: str, j: int, coverages: list[tuple[MemberView, tuple[SlotCoverage, ...]]], kept: set[str]
) -> SlotCoverage:
    """The best state a member's judge gave with passages that were sent (matched, else candidate), with
    that member's judgement (so the promise stays the judge's); a member's passage the budget left out is
    a candidate to focus on."""
    anchors: list[str] = []
    candidates: list[str] = []
    judged: SlotCoverage | None = None
    for view, coverage in coverages:
        if j < len(coverage):
            sent = [f"{view.shown}:{a}" for a in coverage[j].anchors if f"{view.shown}:{a}" in kept]
            anchors += sent
            candidates += [f"{view.shown}:{a}" for a in coverage[j].anchors if f"{view.shown}:{a}" not in kept]
            if sent and (judged is None or (coverage[j].status == "matched" and judged.status != "matched")):
                judged = coverage[j]
            candidates += [f"{view.shown}:{c}" for c in coverage[j].candidates if f"{view.shown}:{c}" not in kept]
    if judged is not None:
        return replace(judged, slot=slot, anchors=tuple(anchors), candidates=(), leads=())
    return SlotCoverage(slot, "unresolved", candidates=tuple(candidates[:3]))


# -- focus helpers ------------------------------------------------------------------------


def _split_anchor(col: _Collection, anchor: str) -> tuple[MemberView, str]:
    """The member a ``path`` or ``path:inner-anchor`` names (longest path first)."""
    for view in sorted(col.readable(), key=lambda v: -len(v.rel)):
        for name in dict.fromkeys((view.rel, view.shown)):  # as the pack shows it, or as it is
            if anchor == name:
                return view, ""
            if anchor.startswith(name + ":"):
                return view, anchor[len(name) + 1 :]
    names = [v.shown for v in col.readable()][:5]
    beyond = f" among the {len(col.views):,} files searched ({col.listed_out:,} more are past the folder bound)"
    raise BadAnchor(
        f"no file {anchor!r}" + (beyond if col.listed_out else " in this folder"),
        hint="focus on a member path from @scout, e.g. " + (", ".join(names) or "(the folder has no readable files)"),
    )


# -- preview helpers ------------------------------------------------------------------------


def _left_out(col: _Collection) -> str:
    parts = []
    if col.listed_out:
        parts.append(f"{col.listed_out:,} more not listed (bound)")
    if col.unparsed:
        parts.append(f"{col.unparsed:,} not indexed yet")
    return "; ".join(parts) or "all listed"


def _inventory_line(view: MemberView) -> str:
    chars = f"{view.chars:,}" if not view.error else view.error
    return f"{view.shown} · {view.kind} · {view.size:,} · {escape_name(chars)}"


def _bounded(lines: list[str], max_chars: int) -> str:
    out: list[str] = []
    used = 0
    for number, line in enumerate(lines):
        rest = len(lines) - number
        tail = f"... {rest:,} more" if rest > 1 else ""
        if used + len(line) + 1 + (len(tail) + 1 if rest > 1 else 0) > max_chars:
            if tail and used + len(tail) <= max_chars:
                out.append(tail)
            break
        out.append(line)
        used += len(line) + 1
    return "\n".join(out)[:max_chars]
