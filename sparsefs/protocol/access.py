"""One access of the Read Intent Protocol (paper, Algorithm 1).

``Protocol.serve`` takes an artifact path and a parsed virtual request and
returns an EvidencePack. It owns the episode state; the Gate decides
admission on sizes only; the Reader only locates evidence. With
``deferred=True`` (a mount: packs are built at lookup) nothing is charged
until ``Protocol.deliver`` is called for a pack that is read; an error pack
charges nothing ever (sparsefs.protocol.episodes, staging).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import xxhash

from gate import Decision, GateConfig, admit_batch, choose_mode, deliver_full_view
from readers.actions import ACTIONS, named
from readers.actions import Episode as EpisodeRole
from readers.base import BadAnchor, Batch, EvidenceItem, ReaderError, ScopeMismatch, SlotCoverage
from readers.ops import OPERATIONS
from sparsefs.artifacts.cache import Artifact, ArtifactCache
from sparsefs.protocol.actions import prepare
from sparsefs.protocol.baseline import Baseline
from sparsefs.protocol.episodes import Delivery, Episode, EpisodeStore
from sparsefs.protocol.exposure import evidence_out, exposure, finalize, fit_to_budget, reserve_for, served_as
from sparsefs.protocol.grammar import OPERATION_OPTION_KEYS, VirtualRequest
from sparsefs.protocol.intents import ResolvedIntent, SessionIntent, resolve
from sparsefs.protocol.pack import CoverageOut, ErrorOut, EvidencePack, ScopeOut, display_name
from sparsefs.protocol.pack import Decision as PackDecision
from sparsefs.protocol.pack_text import item_chars, without_items
from sparsefs.protocol.selecting import ConfigurationChooser, Selection
from sparsefs.protocol.steps import next_steps
from sparsefs.store.savings import FullRead
from sparsefs.store.state import StateDB

_LOG = logging.getLogger(__name__)
_ARTIFACT_STRIPES = 64  # episodes are per artifact: one slow operation never delays another file's pack
PREVIEW_CHARS = 2_000
DEFAULT_PACK_CHARS = 1_500
"""A pack's size by default: the whole pack the agent reads, per slot."""
MAX_PACK_CHARS = 6_000
PACK_LINES_ESTIMATE = 210
"""What a pack adds around its passages, asked of the Reader before the pack is measured exactly. A one-slot
pack's lines measured 182-186 characters (median, calibration split; was estimated at 160), and a pack that
overflows loses a whole passage (exposure.fit_to_budget): asking for 210 keeps papers' whole packs at a
median of 1,393 with more hits (issue 27, measured on the calibration split: docs/BENCHMARKS.md)."""
PREVIEWS_VAGUE = named(previews_vague=True)  # readers.actions: a vague access gets the Object Preview
WITHIN_FULL_VIEW = named(within_full_view=True)  # after the full view went out: anchors into it, nothing re-sent
SELECTED_FULL_VIEW_MAX_CHARS = 65_536
"""The most a selected full view sends unasked; beyond it the agent gets the preview and how to narrow."""


@dataclass(frozen=True)
class Served:
    """A pack, the text the agent reads (in the requested format), and what the log needs to know.

    ``exposed_chars`` is every character of ``text``: what reading the pack costs the agent.
    """

    pack: EvidencePack
    text: str
    full_view_chars: int
    version: str = ""  # full fingerprint of the artifact version the pack was built from
    reads: tuple[FullRead, ...] = ()  # what a person would have read instead (sparsefs.protocol.baseline)
    delivery: Delivery = field(default_factory=lambda: Delivery(""), compare=False)

    @property
    def exposed_chars(self) -> int:
        return len(self.text)

    @property
    def content(self) -> bytes:
        return self.text.encode("utf-8", "surrogateescape")


class Protocol:
    """Episodes, Gate and Readers behind one ``serve`` call."""

    def __init__(
        self, artifacts: ArtifactCache, gate: GateConfig | None = None, state: StateDB | None = None,
        session: SessionIntent | None = None, chooser: ConfigurationChooser | None = None,
    ) -> None:
        self.artifacts = artifacts
        self.gate = gate or GateConfig()
        self.episodes = EpisodeStore(state)
        self.session = session or SessionIntent()
        saved = artifacts.store.save_grown if artifacts.store else None  # warmed vectors survive a remount
        self.chooser = chooser or ConfigurationChooser(on_warmed=saved)
        self.baseline = Baseline(artifacts)
        self._locks = [threading.Lock() for _ in range(_ARTIFACT_STRIPES)]

    def serve(self, rel: str, request: VirtualRequest, session: str | None = None, deferred: bool = False) -> Served:
        """Answer one access; ReaderError becomes an error pack, OSError propagates.

        ``session`` is the session intent the caller froze the pack under (default: the current one).
        ``deferred``: charge nothing yet; :meth:`deliver` applies the pack's ``delivery`` when it is read.

        Any other exception is a bug in a Reader: it is logged with its traceback
        and answered with an error pack, so one bad artifact never fails the mount.
        """
        return self._serve(rel, request, session, deferred)

    def deliver(self, delivery: Delivery) -> bool:
        """Charge a pack that is read: apply its staged episode changes. False (nothing applied) when the
        artifact's episodes changed since it was built: build it again."""
        if delivery.staged is not None:
            with self._lock(delivery.rel):
                if not self.episodes.commit(delivery.staged):
                    return False
        delivery.delivered()
        return True

    def _lock(self, rel: str) -> threading.Lock:
        return self._locks[xxhash.xxh32_intdigest(rel.encode("utf-8", "surrogateescape")) % _ARTIFACT_STRIPES]

    def _serve(self, rel: str, request: VirtualRequest, session: str | None, deferred: bool) -> Served:
        try:
            artifact = self.artifacts.load(rel)
        except ReaderError as err:
            return error_pack(rel, request, err.message, err.hint)
        except OSError:
            raise
        except Exception as err:  # noqa: BLE001 - a Reader bug must not escape as EIO
            return _internal_error(rel, request, err)
        with self._lock(rel):
            with self.episodes.staging(rel) as staged:
                try:
                    served = self._serve_locked(artifact, request, self.session.text if session is None else session)
                except Exception as err:  # noqa: BLE001 - same: answer, log, keep serving
                    served = _internal_error(rel, request, err, artifact)
            if served.pack.decision == "error":  # a read that failed charges nothing
                return replace(served, version=artifact.fingerprint)
            reads, delivered = self.baseline.reads(artifact, served.pack)
            delivery = Delivery(rel, staged[0], delivered)
            if not deferred:
                self.episodes.commit(staged[0])  # under the same lock: nothing changed since the build
                delivery = Delivery(rel)
        if not deferred:
            delivered()
        return replace(served, version=artifact.fingerprint, reads=reads, delivery=delivery)

    def record_plain_read(self, rel: str) -> tuple[str, int, int]:
        """A plain read of the whole file after a guard card (sparsefs.guard.policy): the full view's exposure
        in the artifact's episode, which it closes like @full. (episode id, chars newly exposed, L)."""
        artifact = self.artifacts.load(rel)
        length = len(artifact.parsed.full_view)
        with self._lock(rel):
            with self.episodes.staging(rel) as staged:
                episode = self._ensure(artifact, "full", "plain read")
                episode.reads += 1
                admission = deliver_full_view(episode.budget)
                episode.budget, episode.retired = admission.budget, True
                episode.close_reason = "plain read of the whole file (after the guard card)"
            self.episodes.commit(staged[0])  # the plain read happened: charged at once
        return episode.id, admission.delivered_chars, length

    def _serve_locked(self, artifact: Artifact, request: VirtualRequest, session: str) -> Served:
        flags = self._changed_flag(artifact) + [str(f) for f in artifact.parsed.data.get("flags", ())]
        refused = _refusal(artifact, request) or _misplaced_options(artifact, request)
        if refused is not None:
            return refused
        if request.action in OPERATIONS:
            return self._exact(artifact, request, flags)
        if not artifact.parsed.full_view and request.action != "full":  # an empty file or folder: say so
            return self._preview(artifact, request, [*flags, "empty"])
        resolved = resolve(request.action, request.argument, request.slots, session)
        flags += resolved.flags
        if request.action == "scout" and not self._fits_natively(artifact, request):
            return self._preview(artifact, request, flags)
        if request.action in PREVIEWS_VAGUE and resolved.underspecified:
            return self._preview(artifact, request, [*flags, "underspecified-intent"])
        within = request.action in WITHIN_FULL_VIEW
        held = self.episodes.superseded(artifact.rel, artifact.fingerprint) if within else None
        if held is not None:
            return self._within_full_view(artifact, request, held, flags, resolved)
        objective = resolved.text or request.argument or ""
        episode = self._ensure(artifact, request.action, objective)
        episode.reads += 1
        if request.action in ("full", "scout") or self._fits_natively(artifact, request):
            return self._full_view(artifact, request, episode, flags)
        selection = self._selection(artifact, request, resolved)
        if selection is not None and selection.full_view:
            if len(artifact.parsed.full_view) > SELECTED_FULL_VIEW_MAX_CHARS:
                return self._too_large_to_select(artifact, request, flags, selection)
            served = self._deliver_full(artifact, request, episode, [*flags, "selected-full-view"],
                                        "selected: " + selection.describe(), PackDecision.FULL)
        else:
            if selection is not None:
                episode.method = selection.method
            served = self._sparse(artifact, request, episode, flags, replace(resolved, method=episode.method))
        if selection is not None:  # shown by JSON and verbose only: the text (and what the Gate counted) stays
            served.pack.configuration = selection.describe()
            served = replace(served, text=served_as(served.pack, served.text, request.format))
        return served

    def _ensure(self, artifact: Artifact, action: str, objective: str) -> Episode:
        """The episode this access belongs to; a new one holds back the reserve for its full-view pack."""
        length = len(artifact.parsed.full_view)
        reserve = reserve_for(display_name(artifact.rel), length)
        return self.episodes.ensure(artifact.rel, artifact.fingerprint, action, objective, length, reserve)

    def _too_large_to_select(
        self, artifact: Artifact, request: VirtualRequest, flags: list[str], selection: Selection
    ) -> Served:
        """No sparse configuration is reliable, and the full view is too big to send unasked."""
        why = (f"no sparse configuration is reliable here ({selection.describe()}); the full view has "
               f"{len(artifact.parsed.full_view):,} chars: narrow it with &scope= or @focus=, or ask @full")
        return self._preview(artifact, request, [*flags, "needs-scope"], why)

    def _selection(self, artifact: Artifact, request: VirtualRequest, resolved: ResolvedIntent) -> Selection | None:
        """SelectReader for a read that opens an objective (intent, collect); refine keeps the episode's.
        A read narrowed with &scope= uses the Reader's default: the table's groups are whole artifacts."""
        if ACTIONS[request.action].episode is not EpisodeRole.OPENS or resolved.text is None or request.scope:
            return None
        parsed = artifact.parsed
        selection = self.chooser.choose(artifact.reader, parsed.kind, len(parsed.full_view), request.action,
                                        resolved.text)
        self.chooser.chosen(selection, parsed)
        return selection

    def _fits_natively(self, artifact: Artifact, request: VirtualRequest) -> bool:
        """A full view not clearly dearer than the pack asked for is read whole (paper, App. C): the
        protocol would cost more than it saves. Focus and exact operations are never native fits."""
        length = len(artifact.parsed.full_view)
        pack = _pack_chars(request) if ACTIONS[request.action].native_fit else 0
        return choose_mode(length, self.gate, pack_chars=pack) is Decision.NATIVE_FIT

    def _changed_flag(self, artifact: Artifact) -> list[str]:
        previous = self.episodes.previous_fingerprint(artifact.rel)
        if previous and previous != artifact.fingerprint:
            return ["artifact-changed-since-last-read"]
        return []

    def _preview(self, artifact: Artifact, request: VirtualRequest, flags: list[str], why: str = "") -> Served:
        text = artifact.reader.preview(artifact.parsed, PREVIEW_CHARS)
        pack = self._pack(artifact, request, None, PackDecision.PREVIEW, flags)
        pack.preview = text
        note = f"object preview; {why}" if why else "object preview"
        pack.scope = ScopeOut(chars_processed=len(artifact.parsed.full_view), note=_short(note))
        pack.next_steps = next_steps(artifact, request, pack)
        return Served(pack, served_as(pack, finalize(pack, None, False), request.format),
                      len(artifact.parsed.full_view))

    def _sparse(
        self, artifact: Artifact, request: VirtualRequest, episode: Episode, flags: list[str],
        resolved: ResolvedIntent,
    ) -> Served:
        budget = _pack_chars(request)
        try:
            prepared = prepare(artifact.reader, artifact.parsed, request, resolved, episode,
                               _passage_chars(request, budget))
        except BadAnchor as err:
            if _is_scope_error(err, request):
                why = f"{err.message} ({err.hint})" if err.hint else err.message
                return self._preview(artifact, request, [*flags, "inconsistent-scope"], why)
            return error_pack(artifact.rel, request, err.message, err.hint, artifact, episode)
        except ReaderError as err:
            return error_pack(artifact.rel, request, err.message, err.hint, artifact, episode)
        batch = prepared.batch
        if "no-content-words" in batch.flags and request.action != "focus":
            return self._preview(artifact, request, [*flags, "underspecified-intent"])
        decision = PackDecision.EXACT if request.action in OPERATIONS else PackDecision.SPARSE
        pack = self._pack(artifact, request, episode, decision, flags + list(batch.flags), resolved)
        pack.scope = _scope_out(batch)
        if request.action not in ("focus", "verify") and request.action not in OPERATIONS:  # verify budgets
            batch = fit_to_budget(batch, _measure(pack, batch), budget, per_slot=request.action == "collect")
        pack.evidence = [evidence_out(item) for item in batch.items]
        pack.coverage = [_coverage_out(c, prepared.earlier.get(n, ())) for n, c in enumerate(batch.coverage)]
        estimate = _measure(pack, batch)(list(batch.items))  # next steps must fit what is left after this pack
        pack.exposure = exposure(estimate, episode.budget, len(artifact.parsed.full_view), 0, True)
        pack.next_steps = next_steps(artifact, request, pack)
        text = finalize(pack, episode.budget, True)
        admission = admit_batch(episode.budget, len(text), episode.budget.full_pack_limit)
        if admission.decision is not Decision.ADMIT:
            return self._fallback(artifact, request, episode, [*flags, "batch-over-budget"])
        episode.budget = admission.budget
        _record(episode, batch)
        return Served(pack, served_as(pack, text, request.format), len(artifact.parsed.full_view))

    def _within_full_view(
        self, artifact: Artifact, request: VirtualRequest, episode: Episode, flags: list[str],
        resolved: ResolvedIntent,
    ) -> Served:
        """Refine after the episode delivered the full view: where to look in it, nothing re-sent."""
        try:
            prepared = prepare(artifact.reader, artifact.parsed, request, resolved, episode, _pack_chars(request))
        except ReaderError as err:
            return error_pack(artifact.rel, request, err.message, err.hint, artifact, episode)
        episode.reads += 1
        pack = self._pack(artifact, request, episode, PackDecision.REUSE_FULL_VIEW,
                          [*flags, "full-view-delivered-earlier"])
        pack.coverage = [_within(cov) for cov in prepared.batch.coverage]
        pack.scope = _scope_out(prepared.batch)
        pack.scope.note = _short(f"the full view went out in {episode.id}; these anchors point into it")
        pack.next_steps = next_steps(artifact, request, pack)
        return Served(pack, served_as(pack, finalize(pack, episode.budget, False), request.format),
                      len(artifact.parsed.full_view))

    def _exact(self, artifact: Artifact, request: VirtualRequest, flags: list[str]) -> Served:
        """An exact operation: the result is admitted like any batch; no native fit, no fallback
        to the full view unless the result itself would not fit the budget."""
        length = len(artifact.parsed.full_view)
        reserve = reserve_for(display_name(artifact.rel), length)
        episode = self.episodes.detached(artifact.rel, artifact.fingerprint, _objective(request), length, reserve)
        episode.reads += 1
        return self._sparse(artifact, request, episode, flags, ResolvedIntent(None, ()))

    def _full_view(self, artifact: Artifact, request: VirtualRequest, episode: Episode, flags: list[str]) -> Served:
        if request.action == "full":
            return self._deliver_full(artifact, request, episode, flags, "full view requested", PackDecision.FULL)
        return self._deliver_full(artifact, request, episode, flags, "native-fit", PackDecision.NATIVE_FIT)

    def _fallback(self, artifact: Artifact, request: VirtualRequest, episode: Episode, flags: list[str]) -> Served:
        return self._deliver_full(artifact, request, episode, flags, "fallback: the pack did not fit L - E",
                                  PackDecision.FALLBACK)

    def _deliver_full(
        self, artifact: Artifact, request: VirtualRequest, episode: Episode, flags: list[str], reason: str,
        decision: PackDecision,
    ) -> Served:
        """FullViewFallback: deliver f once (or point at it), close, retire earlier sparse observations.

        The pack is the full view and one header line, at most L + reserve: its whole size is what the
        Gate records. A full view the episode already delivered is not sent again (``reuse-full-view``)."""
        retiring = episode.budget.sparse_exposed > 0 and not episode.retired
        reuse = episode.budget.full_view_delivered
        decision = PackDecision.REUSE_FULL_VIEW if reuse else decision
        closing = [*flags, "episode-closed"] + (["earlier-evidence-retired"] if retiring else [])
        pack = self._pack(artifact, request, episode, decision, closing)
        pack.scope = ScopeOut(chars_processed=len(artifact.parsed.full_view), note=reason)
        if not reuse:
            pack.full_view = artifact.parsed.full_view
        text = self._full_text(pack, episode)
        admission = deliver_full_view(episode.budget, len(text)) if not reuse else deliver_full_view(episode.budget)
        episode.budget, episode.close_reason, episode.retired = admission.budget, reason, True
        return Served(pack, served_as(pack, text, request.format), len(artifact.parsed.full_view))

    def _full_text(self, pack: EvidencePack, episode: Episode) -> str:
        """The full-view pack's text; flags go, then the header, when it would pass L + reserve."""
        limit = episode.budget.full_pack_limit
        pack.exposure = exposure(0, episode.budget, episode.budget.full_view_chars, 0, False)
        text = finalize(pack, episode.budget, False)
        if len(text) > limit and pack.full_view is not None:
            pack.flags = [flag for flag in pack.flags if flag == "episode-closed"]
            text = finalize(pack, episode.budget, False)
        if len(text) > limit and pack.full_view is not None:
            text = pack.full_view  # nothing but the file: exactly L
            pack.exposure = exposure(len(text), episode.budget, len(text), len(text), False)
        return text

    def _pack(
        self, artifact: Artifact, request: VirtualRequest, episode: Episode | None, decision: PackDecision,
        flags: list[str],
        resolved: ResolvedIntent | None = None,
    ) -> EvidencePack:
        used = resolved is not None and "session-intent-used" in resolved.flags
        context = resolved.context if resolved is not None else None
        return EvidencePack(
            artifact=display_name(artifact.rel), reader=_read_as(artifact),
            fingerprint=artifact.short_fingerprint, action=request.action,
            episode=episode.id if episode else None, decision=decision,
            intent=resolved.text if used and resolved else request.argument,
            slots=list(resolved.slots if used and resolved else request.slots), flags=flags,
            session_intent=(resolved.session or None) if resolved is not None and (used or context) else None,
            exposure=exposure(0, episode.budget if episode else None, len(artifact.parsed.full_view), 0, False),
        )


def error_pack(
    rel: str, request: VirtualRequest | None, message: str, hint: str,
    artifact: Artifact | None = None, episode: Episode | None = None, fmt: str | None = None,
) -> Served:
    """A short pack that says what was wrong and what to ask instead, in the format the request asked for
    (``fmt`` when the request did not parse: sparsefs.protocol.grammar.requested_format)."""
    length = len(artifact.parsed.full_view) if artifact else 0
    pack = EvidencePack(
        artifact=display_name(rel), reader=_read_as(artifact) if artifact else None,
        fingerprint=artifact.short_fingerprint if artifact else "-",
        action=request.action if request else "?", episode=episode.id if episode else None,
        decision=PackDecision.ERROR, intent=request.argument if request else None,
        slots=list(request.slots) if request else [], error=ErrorOut(message=message, hint=hint),
        exposure=exposure(0, None, length, 0, False),
    )
    fmt = fmt or (request.format if request else "text")
    return Served(pack, served_as(pack, finalize(pack, None, False), fmt), 0)  # no full read was replaced


def _measure(pack: EvidencePack, batch: Batch) -> Callable[[list[EvidenceItem]], int]:
    """The size of ``pack`` with some of the batch's passages: its lines without passages, plus theirs."""
    several = len(pack.slots) > 1
    around = without_items(pack, batch.coverage)
    return lambda items: around + sum(item_chars(evidence_out(item), several) for item in items)


def _pack_chars(request: VirtualRequest) -> int:
    """The whole pack's target size: ``&budget=``, else DEFAULT_PACK_CHARS per slot."""
    if request.budget:
        return request.budget
    return min(DEFAULT_PACK_CHARS * max(1, len(request.slots)), MAX_PACK_CHARS)


def _passage_chars(request: VirtualRequest, budget: int) -> int:
    """Passage text the Reader is asked for: the pack's target less what its own lines take."""
    lines = PACK_LINES_ESTIMATE + 70 * max(0, len(request.slots) - 1)
    return max(budget // 3, budget - lines)


def _refusal(artifact: Artifact, request: VirtualRequest) -> Served | None:
    """An error pack when this artifact's Reader does not serve the action."""
    reader = artifact.reader
    if request.action in OPERATIONS or request.action in reader.actions:
        return None
    offered = ", ".join(f"@{a}" for a in sorted(reader.actions))
    return error_pack(
        artifact.rel, request, f"the {reader.name} Reader has no @{request.action}",
        f"this file supports {offered}", artifact,
    )


def _read_as(artifact: Artifact) -> str:
    kind, name = artifact.parsed.kind, artifact.reader.name
    return name if kind == name else f"{name}/{kind}"


def _misplaced_options(artifact: Artifact, request: VirtualRequest) -> Served | None:
    """Operation options (where, by, ...) outside an exact operation would be silently ignored."""
    misplaced = sorted(key for key in request.options if key in OPERATION_OPTION_KEYS)
    if request.action in OPERATIONS or not misplaced:
        return None
    options = ", ".join(f"&{key}=" for key in misplaced)
    return error_pack(
        artifact.rel, request, f"{options} only applies to exact operations (@sum, @count, @rows, @filter, ...)",
        f"drop {options} from @{request.action}, or write a literal '&' in the text as %26", artifact,
    )


def _internal_error(rel: str, request: VirtualRequest, err: Exception, artifact: Artifact | None = None) -> Served:
    reader = artifact.reader.name if artifact else "artifact"
    _LOG.error("internal error serving %s@%s", rel, request.action, exc_info=err)
    return error_pack(
        rel, request, f"internal error in the {reader} Reader ({type(err).__name__}: {str(err)[:200]})",
        "read the original with @raw or plain tools; this is a bug worth reporting (the daemon log has details)",
        artifact,
    )


def _objective(request: VirtualRequest) -> str:
    """An exact operation's objective: the operation with its argument and options."""
    options = "&".join(f"{key}={value}" for key, value in sorted(request.options.items()))
    return f"{request.action}={request.argument or ''}&{options}"


def _record(episode: Episode, batch: Batch) -> None:
    for item in batch.items:
        episode.anchors.append(item.anchor.label)
        if item.anchor.char_end > item.anchor.char_start:  # an exact result is not a span of the full view
            episode.spans.append((item.anchor.char_start, item.anchor.char_end))
            episode.passages.append((item.anchor.label, item.anchor.char_start, item.anchor.char_end))


MAX_NOTE_CHARS = 300
"""A scope note is provenance, not evidence: it is not counted as exposure, so it stays short."""


def _scope_out(batch: Batch) -> ScopeOut:
    s = batch.scope
    return ScopeOut(
        units_scanned=s.units_scanned, unit=s.unit, method=s.method, chars_processed=s.chars_processed,
        note=_short(s.note),
    )


def _coverage_out(cov: SlotCoverage, earlier: tuple[str, ...] = ()) -> CoverageOut:
    return CoverageOut(
        slot=cov.slot, status=cov.status, anchors=list(cov.anchors), candidates=list(cov.candidates),
        earlier=list(earlier), confidence=cov.confidence, leads=list(cov.leads),
    )


def _within(cov: SlotCoverage) -> CoverageOut:
    """Coverage whose evidence is all inside a full view the agent already received."""
    return CoverageOut(slot=cov.slot, status=cov.status, candidates=list(cov.candidates), earlier=list(cov.anchors))


def _is_scope_error(err: BadAnchor, request: VirtualRequest) -> bool:
    """A scope (or sheet) the artifact does not have: the preview shows what it does have."""
    return isinstance(err, ScopeMismatch) or (request.scope is not None and request.action != "focus")


def _short(note: str) -> str:
    return note if len(note) <= MAX_NOTE_CHARS else note[: MAX_NOTE_CHARS - 1] + "…"
