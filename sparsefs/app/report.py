"""``sparsefs stats`` and ``sparsefs report``: what the packs exposed vs what full reads would have cost.

The source is the pack log (``log.jsonl``: one line per pack delivered, from a
mount or from ``sparsefs read``/MCP/the API): ``<mount>/.sparsefs/log.jsonl``
for a live mount, else the state directory's copy (the same file).

Lines are shown per *read unit* (an episode, or for a line outside any
episode, its artifact version) and per kind; what each line costs in full
reads is defined and computed once, in :mod:`sparsefs.store.savings`, which
``.sparsefs/stats.json`` uses too: a full read of one artifact version counts
at most once per read window (a person keeps what they read while they work
on the file), a grown log costs only what it added, a folder pack costs its
listing and the members it carries text of, an error costs nothing.
stats.json counts the lines one mount logged; this, every line. A
``not-saved`` line (lines a full state disk dropped) adds its totals.

Lines of the plain-read guard (sparsefs.guard.policy: ``action`` "plain-read",
decision ``guard-card`` or ``insisted``) are not packs: they are counted as
cards served and insisted plain reads (and under their decisions), their
exposure and full reads in the totals.
A kind is the Reader that read the file (the line's ``reader``: ``table`` for
CSV and XLSX, ``folder``...); a line without one (an error before any Reader
ran, an older log) takes the Reader registered for the base file's extension,
else the extension — never a virtual name (``csv@summ=population``). The log is
append-only and unbounded, so it is streamed, line by line; a malformed line
(bad JSON, a missing field, a count that is not a non-negative integer) is
counted and contributes nothing.
"""

from __future__ import annotations

import html
import os
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import orjson

from readers import registry
from sparsefs.app.compose import default_state_dir
from sparsefs.fuse.mounts import is_sparsefs_mount
from sparsefs.store.logfile import NOT_SAVED
from sparsefs.store.savings import VERSION_KEY, Logged, ReadUnits, count
from sparsefs.vfs.control import CONTROL_DIR, LOG_NAME

_EPISODE_ROWS = 20
_ALT = "characters read through SparseFS vs what full reads would have cost, per kind (log scale)"
GUARD_DECISIONS = frozenset({"guard-card", "insisted"})  # sparsefs.guard.policy's log lines (action "plain-read")


@dataclass
class Unit:
    """One episode (or one artifact version read outside episodes)."""

    key: str
    artifact: str
    kind: str
    version: str = ""
    packs: int = 0
    exposed: int = 0
    full_view: int = 0
    decisions: Counter[str] = field(default_factory=Counter)
    cards: int = 0  # guard cards served for plain reads
    insisted: int = 0  # plain reads that went through after a card

    @property
    def saved(self) -> int:
        return self.full_view - self.exposed


@dataclass
class Totals:
    """Sums over units: packs, exposed characters, full-read characters."""

    packs: int = 0
    exposed: int = 0
    full_view: int = 0
    cards: int = 0
    insisted: int = 0

    def add(self, unit: Unit) -> None:
        self.packs += unit.packs
        self.cards += unit.cards
        self.insisted += unit.insisted
        self.exposed += unit.exposed
        self.full_view += unit.full_view

    @property
    def ratio(self) -> float | None:
        return round(self.exposed / self.full_view, 4) if self.full_view else None


@dataclass
class Report:
    """Everything stats and report show."""

    source: str
    units: list[Unit]
    bad_lines: int = 0
    lines_not_saved: int = 0  # lines a full state disk dropped (their totals are in, by a not-saved line)
    full_reads: int = 0  # artifact versions read in full once per read window (sparsefs.store.savings)
    not_saved: str = ""  # a live mount's stats.json: what it could not write yet (a full state disk)

    def totals(self) -> Totals:
        totals = Totals()
        for unit in self.units:
            totals.add(unit)
        return totals

    def by_kind(self) -> dict[str, Totals]:
        kinds: dict[str, Totals] = defaultdict(Totals)
        for unit in self.units:
            kinds[unit.kind].add(unit)
        return dict(sorted(kinds.items(), key=lambda item: -item[1].full_view))

    def decisions(self) -> Counter[str]:
        return sum((unit.decisions for unit in self.units), Counter())

    def episodes(self) -> list[Unit]:
        return [unit for unit in self.units if not unit.key.startswith(VERSION_KEY) and unit.key != NOT_SAVED]

    def as_json(self) -> dict[str, Any]:
        totals = self.totals()
        return {
            "source": self.source,
            "packs_served": totals.packs,
            "chars_exposed": totals.exposed,
            "full_read_chars": totals.full_view,
            "chars_saved": totals.full_view - totals.exposed,
            "exposure_ratio": totals.ratio,
            "decisions": dict(self.decisions()),
            "full_reads": self.full_reads,
            "bad_lines": self.bad_lines,
            "lines_not_saved": self.lines_not_saved,
            **({"not_saved": self.not_saved} if self.not_saved else {}),
            "cards_served": totals.cards,
            "insisted_reads": totals.insisted,
            "by_kind": {kind: asdict(t) | {"ratio": t.ratio} for kind, t in self.by_kind().items()},
            "episodes": [_unit_json(unit) for unit in self.episodes()],
        }


def _unit_json(unit: Unit) -> dict[str, Any]:
    return {
        "episode": unit.key,
        "artifact": unit.artifact,
        "packs": unit.packs,
        "exposed": unit.exposed,
        "full_read_chars": unit.full_view,
        "decisions": dict(unit.decisions),
        "cards": unit.cards,
        "insisted": unit.insisted,
    }


def log_path(path: str, state_dir: str | None) -> Path:
    """Where the pack log of PATH (a mount or a source directory) or of a state directory is."""
    if state_dir is not None:
        return Path(state_dir) / LOG_NAME
    where = Path(path).resolve()
    if is_sparsefs_mount(where):
        return where / CONTROL_DIR / LOG_NAME
    return default_state_dir(where) / LOG_NAME


def load(log: Path) -> Report:
    """Group the log's packs into units; malformed lines are counted, not fatal. Each line costs the full reads
    :class:`ReadUnits` (the stats.json definition) charges it, in log order."""
    units: dict[str, Unit] = {}
    read_units = ReadUnits()
    bad = lost = 0
    for line in _lines(log):
        try:
            entry = orjson.loads(line)
            if isinstance(entry, dict) and entry.get("decision") == NOT_SAVED:
                lost += _add_lost(entry, units, read_units)
                continue
            parsed = Line.parse(entry)
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            bad += 1
            continue
        parsed.add_to(units, read_units)
    return Report(str(log), list(units.values()), bad, lost, read_units.full_reads)


def _add_lost(entry: dict[str, Any], units: dict[str, Unit], read_units: ReadUnits) -> int:
    """A ``not-saved`` line (sparsefs.store.logfile): lines a full disk dropped, with their totals."""
    lines, exposed, cost = (count(entry[key]) for key in ("lines", "exposed", "full_read_chars"))
    unit = units.setdefault(NOT_SAVED, Unit(NOT_SAVED, "(lines not saved)", "(not saved)"))
    unit.exposed += exposed
    unit.full_view += cost
    read_units.exposed += exposed
    read_units.full_read_chars += cost
    return lines


def _lines(log: Path) -> Iterator[bytes]:
    try:
        with log.open("rb") as stream:
            yield from (line for line in stream if line.strip())
    except FileNotFoundError:
        return


@dataclass(frozen=True)
class Line:
    """One validated log line; nothing is counted before every field is."""

    logged: Logged
    decision: str
    plain_read: bool  # a guard line (a card, or an insisted plain read), not a pack
    reader: str | None = None  # the Reader that read it ("table/csv"), when one did

    @classmethod
    def parse(cls, entry: Any) -> Line:
        if not isinstance(entry, dict):
            raise TypeError("not a log line")
        count(entry["L"])
        return cls(Logged.of(entry), str(entry["decision"]), entry.get("action") == "plain-read",
                   entry["reader"] if isinstance(entry.get("reader"), str) else None)

    def add_to(self, units: dict[str, Unit], read_units: ReadUnits) -> None:
        logged = self.logged
        key, cost = read_units.add(logged)
        unit = units.setdefault(key, Unit(key, logged.artifact, kind_of(logged.artifact, self.reader), logged.version))
        unit.exposed += logged.exposed
        unit.full_view += cost
        unit.decisions[self.decision] += 1
        if not self.plain_read:
            unit.packs += 1
        elif self.decision == "insisted":
            unit.insisted += 1
        else:
            unit.cards += 1


def kind_of(artifact: str, reader: str | None = None) -> str:
    """The Reader that read it ("table/csv" -> "table"); else the one registered for the base file's
    extension (or carded under it), else the extension. An older log's line may name a virtual path: its
    suffix is dropped."""
    if reader:
        return reader.partition("/")[0]
    base = os.path.basename(artifact.rstrip("/"))
    base = base[: base.index("@", 1)] if "@" in base[1:] else base
    extension = registry.extension_of(base)
    if not extension:
        return "(none)"
    claimed = next((r for r in registry.registrations() if r.claims(extension, b"")), None)
    claimed = claimed or registry.guarding(extension)  # the fallback's own (.md, .txt: text)
    return claimed.name if claimed else extension.lstrip(".")


def _pack_decisions(decisions: Counter[str]) -> list[tuple[str, int]]:
    """Decisions of packs; the guard's own (a card, an insisted read) are shown on a line of their own."""
    return [(k, v) for k, v in decisions.most_common() if k not in GUARD_DECISIONS]


def _ratio(value: float | None) -> str:
    return f"{value:.1%}" if value is not None else "-"


def headline(totals: Totals) -> str:
    """The saving in one sentence, from counted characters: ``sparsefs stats``, the report page and the demo
    all say it with this function (docs/SEMANTICS.md, "Savings", defines what full reads cost)."""
    saved = totals.full_view - totals.exposed
    if not totals.full_view:
        return f"The agent read {totals.exposed:,} characters through SparseFS; no full read was needed to compare."
    if saved < 0:
        return (f"The agent read {totals.exposed:,} characters through SparseFS, {-saved:,} more than the "
                f"{totals.full_view:,} full reads of the same files would have cost.")
    return (f"Saved {saved:,} characters ({saved / totals.full_view:.1%}): the agent read {totals.exposed:,} "
            f"through SparseFS where full reads of the same files would have cost {totals.full_view:,}.")


def render_text(report: Report, limit: int | None = _EPISODE_ROWS) -> str:
    """The terminal summary; the newest ``limit`` episodes (None: all), saying how many are left out."""
    totals, decisions = report.totals(), report.decisions()
    lines = [
        headline(totals),
        f"log: {report.source}" + (f" ({report.bad_lines} malformed lines skipped)" if report.bad_lines else ""),
        f"packs served: {totals.packs:,}  ({', '.join(f'{k} {v}' for k, v in _pack_decisions(decisions))})",
        f"characters exposed: {totals.exposed:,} of {totals.full_view:,} that full reads would have cost "
        f"({_ratio(totals.ratio)}; saved {totals.full_view - totals.exposed:,})",
        f"full reads: {report.full_reads:,} (each file version at most once per read window; docs/SEMANTICS.md, "
        "Savings)",
        f"fallbacks to the full view: {decisions['fallback']}",
        f"guard cards served: {totals.cards:,}  insisted plain reads: {totals.insisted:,}",
        "",
        f"{'kind':<10} {'packs':>6} {'exposed':>12} {'full reads':>12} {'ratio':>7}",
    ]
    lines += [
        f"{kind:<10} {t.packs:>6,} {t.exposed:>12,} {t.full_view:>12,} {_ratio(t.ratio):>7}"
        for kind, t in report.by_kind().items()
    ]
    episodes = report.episodes()
    shown = episodes if limit is None else episodes[len(episodes) - min(len(episodes), limit):]
    if shown:
        lines += ["", f"{'episode':<8} {'packs':>5} {'exposed':>10} {'full reads':>10}  artifact · decisions"]
        lines += [
            f"{u.key:<8} {u.packs:>5} {u.exposed:>10,} {u.full_view:>10,}  {u.artifact} · "
            + ", ".join(f"{k} {v}" for k, v in sorted(u.decisions.items()))
            for u in shown
        ]
    if len(shown) < len(episodes):
        lines.append(f"(the newest {len(shown):,} of {len(episodes):,} episodes; {len(episodes) - len(shown):,} "
                     "older ones not shown: sparsefs stats --all, or --limit N)")
    return "\n".join(_notes(report) + lines) + "\n"


def _notes(report: Report) -> list[str]:
    """What a full state disk kept out of the log, said once, first."""
    notes = [f"NOTE: {report.not_saved}"] if report.not_saved else []
    if report.lines_not_saved:
        notes.append(f"NOTE: {report.lines_not_saved:,} log lines were not saved (state disk full); their totals "
                     "are included")
    return notes


def load_for(path: str, state_dir: str | None) -> Report:
    """The log's report, with a live mount's note of what it could not save yet (read first: reading stats.json
    writes lines that waited for a full state disk, if it has room again)."""
    where = Path(path).resolve()
    note = _mount_not_saved(where) if state_dir is None and is_sparsefs_mount(where) else ""
    report = load(log_path(path, state_dir))
    report.not_saved = note
    return report


def _mount_not_saved(mountpoint: Path) -> str:
    try:
        stats = orjson.loads((mountpoint / CONTROL_DIR / "stats.json").read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return ""
    missing = stats.get("not_saved") if isinstance(stats, dict) else None
    return str(missing.get("summary", "")) if isinstance(missing, dict) else ""


def print_stats(path: str, state_dir: str | None, as_json: bool, out: TextIO,
                limit: int | None = _EPISODE_ROWS) -> int:
    """The ``sparsefs stats`` command (the newest ``limit`` episodes; None: all)."""
    report = load_for(path, state_dir)
    if as_json:
        out.write(orjson.dumps(report.as_json(), option=orjson.OPT_INDENT_2).decode() + "\n")
    elif not report.units:
        out.write(f"no packs logged yet in {report.source}\n")
    else:
        out.write(render_text(report, limit))
    return 0


def draw_chart(report: Report, target: Path) -> None:
    """Exposed vs full-read characters per kind, horizontal bars on a log scale (a 50-character pack beside a
    5-million-character full read stays visible), each exposed bar labelled with its share of the full reads."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    kinds = report.by_kind()
    names = list(kinds)[::-1]
    figure, axes = plt.subplots(figsize=(8, 1.6 + 0.55 * max(1, len(names))))
    rows = range(len(names))
    full = axes.barh([r + 0.2 for r in rows], [max(1, kinds[n].full_view) for n in names], 0.4, log=True,
                     label="full reads would have cost")
    shown = axes.barh([r - 0.2 for r in rows], [max(1, kinds[n].exposed) for n in names], 0.4, log=True,
                      label="read through SparseFS")
    axes.bar_label(full, labels=[f"{kinds[n].full_view:,}" for n in names], padding=3, fontsize=8)
    axes.bar_label(shown, labels=[f"{kinds[n].exposed:,} ({_share(kinds[n])})" for n in names], padding=3,
                   fontsize=8)
    axes.set_yticks(list(rows), names)
    axes.set_xlabel("characters (log scale)")
    axes.set_xlim(left=1, right=max(10, *(t.full_view for t in kinds.values()), *(t.exposed for t in kinds.values()))
                  * 8)
    axes.legend(loc="lower right", fontsize=8)
    figure.tight_layout()
    figure.savefig(target, dpi=110)
    plt.close(figure)


def _share(totals: Totals) -> str:
    """Exposed as a share of full reads with two significant digits (0.00062%, not a rounded 0.0%)."""
    if not totals.full_view:
        return "-"
    percent = 100 * totals.exposed / totals.full_view
    return f"{percent:,.1f}%" if percent >= 1 else f"{percent:.2g}%"


def render_html(report: Report, chart: str, when: datetime | None = None) -> str:
    """A self-contained page: a dated title, the headline saving (:func:`headline`, as ``sparsefs stats`` says
    it), totals, the chart, per-kind and per-episode tables."""
    totals = report.totals()
    date = (when or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M %Z").strip()
    kind_rows = "".join(
        _row(kind, t.packs, t.exposed, t.full_view, _ratio(t.ratio)) for kind, t in report.by_kind().items()
    )
    episode_rows = "".join(
        _row(
            u.key,
            u.artifact,
            u.packs,
            u.exposed,
            u.full_view,
            ", ".join(f"{k} {v}" for k, v in sorted(u.decisions.items())),
        )
        for u in report.episodes()
    )
    decisions = ", ".join(f"{k} {v}" for k, v in _pack_decisions(report.decisions()))
    return (
        f"<!doctype html><meta charset=utf-8><title>SparseFS report, {html.escape(date)}</title>"
        "<style>body{font:14px sans-serif;margin:2em}td,th{padding:2px 10px;text-align:right}"
        "td:first-child,th:first-child{text-align:left}.headline{font-size:20px;font-weight:bold}</style>"
        f"<h1>SparseFS report</h1><p>{html.escape(date)} · log: {html.escape(report.source)}</p>"
        f"<p class=headline>{html.escape(headline(totals))}</p>"
        + "".join(f"<p><b>{html.escape(note)}</b></p>" for note in _notes(report)) +
        f"<p>packs served: {totals.packs:,} ({html.escape(decisions)})<br>characters exposed: {totals.exposed:,} of "
        f"{totals.full_view:,} that full reads would have cost ({_ratio(totals.ratio)}; {report.full_reads:,} full "
        "reads, each file version at most once per read window); fallbacks: "
        f"{report.decisions()['fallback']}; guard cards served: {totals.cards:,}, insisted plain reads: "
        f"{totals.insisted:,}</p><img src='{html.escape(chart)}' alt='{_ALT}'>"
        "<h2>Per kind (the Reader)</h2><table><tr><th>kind<th>packs<th>exposed<th>full reads<th>ratio"
        f"{kind_rows}</table><h2>Per episode</h2><table><tr><th>episode<th>artifact<th>packs<th>exposed<th>full reads"
        f"<th>decisions{episode_rows}</table>\n"
    )


def _row(*cells: object) -> str:
    return "<tr>" + "".join(f"<td>{html.escape(f'{c:,}' if isinstance(c, int) else str(c))}" for c in cells)


def write_report(path: str, state_dir: str | None, output: str, out: TextIO) -> int:
    """The ``sparsefs report`` command: OUTPUT/index.html and OUTPUT/chart.png."""
    report = load_for(path, state_dir)
    if not report.units:
        out.write(f"no packs logged yet in {report.source}\n")
        return 1
    folder = Path(output)
    folder.mkdir(parents=True, exist_ok=True)
    draw_chart(report, folder / "chart.png")
    (folder / "index.html").write_text(render_html(report, "chart.png"))
    out.write(render_text(report) + f"\nwrote {folder / 'index.html'} and {folder / 'chart.png'}\n")
    return 0
