"""Choosing a Reader configuration per request group (paper §4.2, Appendix E).

A *configuration* is a location method (lexical, BM25, hybrid, region, exact)
times an exposure form (snippets, full view, exact result). A *request group*
is artifact type x size band of the full view x intent type. The selector picks

    r* = argmin  C(r | g)   subject to   p_valid(r | g) >= TAU

over the configurations the caller says are available, where ``p_valid`` is
the lower end of the 95% Wilson interval of the per-request evidence success
measured by ``scripts/calibrate.py`` on calibration documents only, and ``C``
is characters: mean exposed + a per-call overhead + mean follow-up exposure.

Two sources, two lifetimes:

- reliability (successes / trials) comes from the shipped table
  ``readers/calibration.json`` and is never updated at run time: behavioural
  signals say nothing about whether evidence was correct;
- cost estimates come from the same table (:class:`CostBook`) and, like
  reliability, never move at run time: a choice that learned from earlier reads
  would make a pack depend on what was asked before it (issue 27).

Rules, in order:

1. A group with fewer than :data:`MIN_REQUESTS` calibration requests is not
   adaptive: it gets the default configuration of its artifact type
   (:func:`default_config`), or the full view when that default's calibrated
   ``p_valid`` misses TAU. When the default has no calibration data in the
   group at all, nothing says it fails either, so it is used and the reason
   says so (the Gate still bounds what a sparse read may expose).
2. Otherwise the cheapest configuration meeting TAU wins; ties go to the
   default, then the higher ``p_valid``, then the configuration's name.
3. No configuration meets TAU: the full view. TAU is never relaxed.

A missing or corrupt table loads as an empty one, which makes every group
non-adaptive (rule 1); it never raises.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any, Literal

from readers.ops import OPERATIONS

ArtifactType = Literal["text", "structured", "collection"]
SizeBand = Literal["<=8K", "8K-32K", ">32K"]
IntentType = Literal["selective-fact", "cross-file", "exact-computation", "verbatim", "summary"]
LocationMethod = Literal["lexical", "bm25", "hybrid", "region", "exact", "none"]
Exposure = Literal["snippets", "full-view", "exact-result"]

TAU = 0.6
"""Reliability threshold, fixed before evaluation (paper Appendix E)."""
MIN_REQUESTS = 20
"""Calibration requests a group needs before it is adaptive."""
Z95 = 1.959963984540054
"""Two-sided 95% normal quantile."""
PER_CALL_CHARS = 160
"""Fixed per-call overhead in characters (pack header, anchors): the Text Reader's CostProfile."""
SCHEMA = 1
TABLE_FILE = "calibration.json"

SMALL_BAND = 8 * 1024
MEDIUM_BAND = 32 * 1024

EXACT_ACTIONS = OPERATIONS  # every exact operation of readers.ops
_VERBATIM = re.compile(
    r"\b(quote|quoted|quotes|quoting|verbatim|exact(?:ly)?\s+(?:wording|words|text|phrase|sentence)"
    r"|word[\s-]+for[\s-]+word|literal(?:ly)?\s+text)\b",  # not quote marks: agents quote terms, not requests
    re.IGNORECASE,
)


@dataclass(frozen=True, order=True)
class RequestGroup:
    """Artifact type x size band of the full view x intent type."""

    artifact: ArtifactType
    band: SizeBand
    intent: IntentType

    @property
    def key(self) -> str:
        return f"{self.artifact}|{self.band}|{self.intent}"

    @classmethod
    def parse(cls, key: str) -> RequestGroup:
        parts = key.split("|")
        if len(parts) != 3 or parts[0] not in _ARTIFACTS or parts[1] not in _BANDS or parts[2] not in _INTENTS:
            raise ValueError(f"bad group key {key!r}")
        return cls(parts[0], parts[1], parts[2])  # type: ignore[arg-type]


@dataclass(frozen=True, order=True)
class Configuration:
    """A location method and an exposure form; ``none/full-view`` is the full view."""

    method: LocationMethod
    exposure: Exposure

    @property
    def key(self) -> str:
        return f"{self.method}/{self.exposure}"

    @classmethod
    def parse(cls, key: str) -> Configuration:
        method, _, exposure = key.partition("/")
        if method not in _METHODS or exposure not in _EXPOSURES:
            raise ValueError(f"unknown configuration {key!r}")
        return cls(method, exposure)  # type: ignore[arg-type]


_ARTIFACTS = frozenset({"text", "structured", "collection"})
_BANDS = frozenset({"<=8K", "8K-32K", ">32K"})
_SUMMARY = re.compile(r"^\W*(?:please\s+)?(?:summari[sz]e|give\s+(?:me\s+)?(?:a|an)\s+(?:summary|overview)|recap)\b",
                      re.IGNORECASE)
"""Only a request that opens by asking for a summary: "what did X say about Y" may be a fact (a 10-K's
"what did management say about PFAS") and stays a selective fact."""
_INTENTS = frozenset({"selective-fact", "cross-file", "exact-computation", "verbatim", "summary"})
_METHODS = frozenset({"lexical", "bm25", "hybrid", "region", "exact", "none"})
_EXPOSURES = frozenset({"snippets", "full-view", "exact-result"})
FULL_VIEW = Configuration("none", "full-view")
SNIPPETS = {m: Configuration(m, "snippets") for m in ("lexical", "bm25", "hybrid", "region")}
EXACT = Configuration("exact", "exact-result")


# -- request groups ----------------------------------------------------------------


def size_band(full_view_chars: int) -> SizeBand:
    """<=8K | 8K-32K | >32K characters of the full view (K = 1,024)."""
    if full_view_chars <= SMALL_BAND:
        return "<=8K"
    return "8K-32K" if full_view_chars <= MEDIUM_BAND else ">32K"


def intent_type(action: str, text: str, is_folder: bool) -> IntentType:
    """Exact operations, then folders, then verbatim cues, then summary requests; else a selective fact.

    ``summary`` is a fifth type beside the paper's four: "Summarize the
    discussion of X" asks for an account spread over many turns (QMSum, a
    query-based meeting *summarization* set: evidence a median 2.9K characters
    in several ranges), not one fact. Calibration files every QMSum request
    under it (the data set says what they are); a live request is one only when
    it opens by asking for a summary, because "what did X say about Y" cannot
    be told from a fact question by its words.
    """
    if action in EXACT_ACTIONS:
        return "exact-computation"
    if is_folder:
        return "cross-file"
    if _VERBATIM.search(text):
        return "verbatim"
    if _SUMMARY.search(text):
        return "summary"
    return "selective-fact"


def request_group(artifact: ArtifactType, full_view_chars: int, action: str, text: str) -> RequestGroup:
    """The request group of one read of an artifact of this type (``readers.registry.group_of`` finds the
    type of a parsed kind: which kinds are text or structured is each Reader's registration)."""
    return RequestGroup(artifact, size_band(full_view_chars), intent_type(action, text, artifact == "collection"))


def default_config(group: RequestGroup) -> Configuration:
    """The artifact type's default: BM25 snippets; an exact operation's is its exact result."""
    return EXACT if group.intent == "exact-computation" else SNIPPETS["bm25"]


# -- reliability -------------------------------------------------------------------


def wilson_lower(successes: int, trials: int, z: float = Z95) -> float:
    """Lower end of the Wilson score interval; 0.0 without trials."""
    if trials <= 0:
        return 0.0
    p = successes / trials
    z2 = z * z
    centre = p + z2 / (2 * trials)
    spread = z * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials))
    return max(0.0, (centre - spread) / (1 + z2 / trials))


@dataclass(frozen=True)
class Cell:
    """Calibration of one configuration in one group."""

    n: int
    successes: int
    mean_exposed: float
    mean_follow_up: float

    @property
    def p_valid(self) -> float:
        return wilson_lower(self.successes, self.n)


@dataclass(frozen=True)
class CalibrationTable:
    """Per group: how many calibration requests, and a Cell per configuration."""

    requests: Mapping[str, int] = field(default_factory=dict)
    cells: Mapping[tuple[str, str], Cell] = field(default_factory=dict)
    error: str = ""

    def cell(self, group: RequestGroup, config: Configuration) -> Cell | None:
        return self.cells.get((group.key, config.key))

    def requests_in(self, group: RequestGroup) -> int:
        return self.requests.get(group.key, 0)


def table_from_json(doc: Any) -> CalibrationTable:
    """Validate and convert the JSON document; ValueError when it does not fit the schema."""
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ValueError(f"not a schema-{SCHEMA} calibration table")
    requests: dict[str, int] = {}
    cells: dict[tuple[str, str], Cell] = {}
    for key, entry in dict(doc["groups"]).items():
        RequestGroup.parse(str(key))
        requests[str(key)] = _count(entry["requests"])
        for config_key, raw in dict(entry["configs"]).items():
            Configuration.parse(str(config_key))
            cell = Cell(_count(raw["n"]), _count(raw["successes"]), _chars(raw["mean_exposed"]),
                        _chars(raw["mean_follow_up"]))
            if cell.successes > cell.n:
                raise ValueError(f"{key} {config_key}: more successes than trials")
            cells[(str(key), str(config_key))] = cell
    return CalibrationTable(requests, cells)


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"bad count {value!r}")
    return value


def _chars(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ValueError(f"bad character count {value!r}")
    return float(value)


def parse_table(text: str | bytes) -> CalibrationTable:
    """A table from JSON text; an empty table carrying ``error`` when it is corrupt."""
    try:
        return table_from_json(json.loads(text))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return CalibrationTable(error=f"calibration table unusable ({exc}); not adaptive anywhere")


@cache
def load_table() -> CalibrationTable:
    """The shipped table (readers/calibration.json); empty, with ``error`` set, when missing or corrupt."""
    try:
        data = resources.files("readers").joinpath(TABLE_FILE).read_bytes()
    except OSError as exc:
        return CalibrationTable(error=f"no calibration table ({exc}); not adaptive anywhere")
    return parse_table(data)


# -- cost --------------------------------------------------------------------------


class CostBook:
    """Mean exposed and follow-up characters per (group, configuration), as calibration measured them.

    Fixed for the life of the process: a read's outcome never changes which configuration the next read
    gets, so a pack is a function of the artifact version, the request and the episode state, not of what
    was asked before (issue 27: online means made 26 of 731 questions' packs depend on their order). The
    paper's online cost update is left out on purpose; calibration re-measures costs instead.
    """

    def __init__(self, table: CalibrationTable, overhead: int = PER_CALL_CHARS) -> None:
        self.overhead = overhead
        self._means = {key: (cell.mean_exposed, cell.mean_follow_up) for key, cell in table.cells.items() if cell.n}

    def estimate(self, group: RequestGroup, config: Configuration) -> float | None:
        """Estimated characters of one read; None when calibration never measured it."""
        found = self._means.get((group.key, config.key))
        if found is None:
            return None
        exposed, follow = found
        return exposed + self.overhead + follow


# -- choice ------------------------------------------------------------------------


@dataclass(frozen=True)
class Choice:
    """The configuration to run, its calibrated reliability and estimated cost, and why."""

    config: Configuration
    p_valid: float | None
    est_cost: float | None
    reason: str


class Selector:
    """r* = argmin cost s.t. p_valid >= TAU, over a calibration table and a cost book."""

    def __init__(self, table: CalibrationTable, costs: CostBook | None = None, tau: float = TAU) -> None:
        self.table = table
        self.costs = costs if costs is not None else CostBook(table)
        self.tau = tau

    def p_valid(self, group: RequestGroup, config: Configuration) -> float | None:
        cell = self.table.cell(group, config)
        return cell.p_valid if cell is not None and cell.n else None

    def choose(self, group: RequestGroup, available: Iterable[Configuration]) -> Choice:
        """The configuration for one read of ``group`` among ``available`` (full view excluded)."""
        configs = sorted({c for c in available if c.exposure != "full-view"})
        n = self.table.requests_in(group)
        if n < MIN_REQUESTS:
            return self._not_adaptive(group, configs, n)
        ranked = [(self._cost(group, c), c) for c in configs if (self.p_valid(group, c) or 0.0) >= self.tau]
        if not ranked:
            return Choice(FULL_VIEW, None, None, f"no configuration reaches p_valid >= {self.tau} in {group.key}")
        default = default_config(group)
        cost, best = min(ranked, key=lambda cc: (cc[0], cc[1] != default, -(self.p_valid(group, cc[1]) or 0.0),
                                                 cc[1].key))
        p = self.p_valid(group, best)
        return Choice(best, p, cost, f"cheapest of {len(ranked)} configurations with p_valid >= {self.tau}")

    def _not_adaptive(self, group: RequestGroup, configs: list[Configuration], n: int) -> Choice:
        default = default_config(group)
        why = f"{group.key} has {n} calibration requests (< {MIN_REQUESTS}): not adaptive"
        if self.table.error:
            why = f"{self.table.error}; {why}"
        if default not in configs:
            return Choice(FULL_VIEW, None, None, f"{why}; default {default.key} unavailable")
        p = self.p_valid(group, default)
        cost = self.costs.estimate(group, default)
        if p is None:
            return Choice(default, None, cost, f"{why}; default {default.key} has no calibration data, used as is")
        if p < self.tau:
            return Choice(FULL_VIEW, p, None, f"{why}; default {default.key} p_valid {p:.2f} < {self.tau}")
        return Choice(default, p, cost, f"{why}; default {default.key} p_valid {p:.2f}")

    def _cost(self, group: RequestGroup, config: Configuration) -> float:
        cost = self.costs.estimate(group, config)
        return math.inf if cost is None else cost


_DEFAULT: list[Selector] = []
_DEFAULT_LOCK = threading.Lock()


def default_selector() -> Selector:
    """The process-wide selector over the shipped table (one CostBook per process)."""
    with _DEFAULT_LOCK:
        if not _DEFAULT:
            _DEFAULT.append(Selector(load_table()))
        return _DEFAULT[0]


def choose(group: RequestGroup, available: Iterable[Configuration]) -> Choice:
    """:meth:`Selector.choose` on the shipped table and the process-wide cost book."""
    return default_selector().choose(group, available)
