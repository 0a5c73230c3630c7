"""A conformance suite every Reader opts into (like fsspec's abstract tests).

Subclass :class:`ReaderConformance` in ``tests/test_<family>_reader.py``, set
``reader`` and implement ``samples``, ``malformed`` and ``check_faithful``;
pytest collects the inherited tests. What it checks, for every Reader:

- its registration (``readers.registry``, the one place the control plane reads
  a Reader's metadata from) matches its class: target, name, extensions and
  magic; the registry routes its samples to it; the parsed kinds it emits and
  the binary extensions are declared; its distributions are installed;
- a parse survives the parsed store (``sparsefs.store.parsed``: the classes it
  holds are among those it registers as persisted) and serves the same
  preview and evidence after the round trip;
- it declares what it handles (extensions or magic, actions, operations);
- it accepts its own samples, and parsing is deterministic;
- the full view is faithful to the source (the Reader-specific check);
- the Object Preview respects its character bound;
- located passages are exact slices of the full view, stay within the
  character budget, never overlap an excluded (already exposed) span, and
  give one coverage entry per slot; so do those of every location method the
  Reader declares in ``methods`` (the selector may pick any of them);
- contract v2: a ranking Reader (``readers.retrieval.locate.RankingReader``) keeps the one shared
  ``locate``; only the calibrated judge says ``matched`` (every ``matched`` of every method is checked
  against the judge, for the Reader's own family), verify's stance rule being the one named exception;
  it answers every action the actions table (``readers.actions``) says every Reader answers;
- every anchor it hands out resolves back through ``focus`` to a region that
  contains the passage, and so does every widening of it (``Reader.widen``, the suggested focus), a
  region that holds the passage;
- malformed input and random garbage raise ReaderError (never anything else)
  within the time bound, and an operation it does not offer is refused;
- every exact operation it offers (``operation_samples``) returns a bounded
  batch (items' text within ``max_chars``, scope method ``exact``), and hostile
  variants of it (an unknown column, ``where``/``by`` on a missing field, a bad
  or catastrophic regex, a huge ``rows`` range) either raise ReaderError or stay
  bounded, never anything else.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path

import pytest
import xxhash

from readers import ops, registry
from readers.actions import PROTOCOL_ACTIONS, answered_by_every
from readers.base import BadAnchor, Batch, Parsed, Reader, ReaderError, ReadIntent, UnsupportedOperation
from readers.claims.verify import STANCE_RULE, verify
from readers.kit.source import MemorySource
from readers.retrieval.confidence import vouches
from readers.retrieval.locate import RankingReader
from readers.retrieval.methods import METHODS

MISSING = "no_such_field_zq9"
OPERATION_BUDGETS = (120, 600, 3000)


@dataclass(frozen=True)
class Sample:
    """One good artifact and an intent whose evidence it holds."""

    name: str
    data: bytes
    intent: str
    slots: tuple[str, ...] = ()


class ReaderConformance:
    """Inherited tests; subclasses fill in the four members below."""

    reader: Reader
    time_bound_s: float = 10.0
    budgets: tuple[int, ...] = (300, 1500)
    routed: bool = True  # the registry picks this Reader for its samples by name and head (not a folder)
    stored: bool = True  # its parses go to the parsed store (a folder's stay in memory)

    def samples(self) -> list[Sample]:
        raise NotImplementedError

    def malformed(self) -> list[tuple[str, bytes]]:
        """(name, bytes) pairs this Reader is chosen for but cannot parse."""
        raise NotImplementedError

    def check_faithful(self, sample: Sample, parsed: Parsed) -> None:
        """Assert the full view says what the source says (an independent reading)."""
        raise NotImplementedError

    def operation_samples(self) -> list[tuple[Sample, ops.Operation]]:
        """(sample, operation) pairs this Reader answers exactly; empty skips the operate tests."""
        return []

    # -- helpers -----------------------------------------------------------------

    def parse(self, sample: Sample) -> Parsed:
        return self.reader.parse(MemorySource(sample.name, sample.data))

    def parsed_samples(self) -> Iterator[tuple[Sample, Parsed]]:
        for sample in self.samples():
            yield sample, self.parse(sample)

    def locate(
        self, sample: Sample, parsed: Parsed, max_chars: int, exclude: tuple[tuple[int, int], ...] = ()
    ) -> Batch:
        intent = ReadIntent(sample.intent, sample.slots or (sample.intent,))
        return self.reader.locate(parsed, intent, max_chars, exclude)

    # -- declarations ----------------------------------------------------------------

    def registration(self) -> registry.Registration:
        found = registry.named(self.reader.name)
        assert found is not None, f"no registration named {self.reader.name!r}: add one line to readers/registry.py"
        return found

    def test_declares_what_it_handles(self) -> None:
        reader, registration = self.reader, self.registration()
        assert reader.name and reader.name != "reader"
        assert registration.extensions or registration.magic or registration.sniffer or registration.fallback
        assert answered_by_every() <= reader.actions <= PROTOCOL_ACTIONS  # readers.actions, the one table
        assert reader.operations <= ops.OPERATIONS
        assert reader.cost.parse_ms_per_mb > 0

    # -- the registration ------------------------------------------------------------

    def test_registration_matches_its_class(self) -> None:
        registration = self.registration()
        assert registry.resolve(registration.target, registration) is type(self.reader)
        assert (registration.extensions, registration.magic) == (self.reader.extensions, self.reader.magic)
        assert registration.binary <= registration.extensions | registration.guarded_extensions
        for dist in registration.dists:
            assert metadata.version(dist), dist

    def test_the_registry_routes_its_samples_to_it(self) -> None:
        if not self.routed:
            pytest.skip("not chosen by name and head")
        for sample in self.samples():
            chosen = registry.select(sample.name, sample.data[:8192])
            assert type(chosen) is type(self.reader), (sample.name, chosen.name)

    def test_declares_its_kinds_and_binary_formats(self) -> None:
        registration = self.registration()
        for sample, parsed in self.parsed_samples():
            assert parsed.kind in registration.kinds, f"{sample.name}: kind {parsed.kind!r} is not registered"
            if registry.extension_of(sample.name) in registration.binary:
                with pytest.raises(UnicodeDecodeError):
                    sample.data.decode("utf-8")

    def test_parse_survives_the_store(self, tmp_path: Path) -> None:
        if not self.stored:
            pytest.skip("its parses are not stored")
        for sample, parsed in self.parsed_samples():
            self.locate(sample, parsed, 1500)  # lazily built indexes are stored too
            restored = _round_trip(parsed, sample, self.reader.name, tmp_path)
            assert (restored.full_view, restored.kind) == (parsed.full_view, parsed.kind), sample.name
            assert self.reader.preview(restored, 2000) == self.reader.preview(parsed, 2000), sample.name
            again, first = self.locate(sample, restored, 1500), self.locate(sample, parsed, 1500)
            assert [(i.anchor, i.text) for i in again.items] == [(i.anchor, i.text) for i in first.items]

    def test_accepts_its_samples(self) -> None:
        for sample in self.samples():
            assert self.reader.accepts(sample.name, sample.data[:8192]), sample.name

    # -- parse and full view -------------------------------------------------------------

    def test_parse_is_deterministic(self) -> None:
        for sample, parsed in self.parsed_samples():
            again = self.parse(sample)
            assert again.full_view == parsed.full_view, sample.name
            assert again.kind == parsed.kind

    def test_full_view_is_faithful(self) -> None:
        for sample, parsed in self.parsed_samples():
            assert parsed.full_view, sample.name
            self.check_faithful(sample, parsed)

    def test_preview_is_bounded(self) -> None:
        for _, parsed in self.parsed_samples():
            assert self.reader.preview(parsed, 0) == ""
            for limit in (120, 600, 2000):
                text = self.reader.preview(parsed, limit)
                assert 0 < len(text) <= limit

    # -- locate ---------------------------------------------------------------------

    def test_passages_are_slices_of_the_full_view(self) -> None:
        for sample, parsed in self.parsed_samples():
            batch = self.locate(sample, parsed, 1500)
            assert batch.items, f"no evidence for {sample.intent!r} in {sample.name}"
            for item in batch.items:
                a = item.anchor
                assert 0 <= a.char_start < a.char_end <= len(parsed.full_view)
                assert parsed.full_view[a.char_start : a.char_end] == item.text

    def test_passages_stay_within_budget(self) -> None:
        for sample, parsed in self.parsed_samples():
            for budget in self.budgets:
                items = self.locate(sample, parsed, budget).items
                total = sum(len(item.text) for item in items)
                longest = max((len(item.text) for item in items), default=0)
                assert total <= max(budget, longest), (sample.name, budget, total)

    def test_one_coverage_entry_per_slot(self) -> None:
        for sample, parsed in self.parsed_samples():
            slots = sample.slots or (sample.intent,)
            coverage = self.locate(sample, parsed, 1500).coverage
            assert [c.slot for c in coverage] == list(slots)
            for c in coverage:
                assert c.status in ("matched", "candidate", "unresolved")
                assert (c.status in ("matched", "candidate")) == bool(c.anchors)

    def test_excluded_spans_are_never_returned(self) -> None:
        for sample, parsed in self.parsed_samples():
            first = self.locate(sample, parsed, 1500)
            spans = tuple((i.anchor.char_start, i.anchor.char_end) for i in first.items)
            for item in self.locate(sample, parsed, 1500, exclude=spans).items:
                s, e = item.anchor.char_start, item.anchor.char_end
                assert all(e <= xs or s >= xe for xs, xe in spans), (sample.name, (s, e), spans)

    def test_every_declared_method_runs_and_returns_slices(self) -> None:
        """Each location method in ``methods`` (what the selector may pick for this Reader) answers under
        the same contract as the default: exact slices within the budget, exclusion, one coverage entry
        per slot, and the scope names the method that ran (hybrid without the dense extra: bm25). Each
        finds evidence in some sample (lexical needs a slot's words as written, so not in every one)."""
        assert self.reader.methods and self.reader.methods <= set(METHODS), self.reader.methods
        found: set[str] = set()
        for sample, parsed in self.parsed_samples():
            slots = sample.slots or (sample.intent,)
            for method in sorted(self.reader.methods):
                intent, what = ReadIntent(sample.intent, slots, method=method), (sample.name, method)
                batch = self.reader.locate(parsed, intent, 1500)
                found |= {method} if batch.items else set()
                _check_slices(parsed, batch, 1500, what)
                assert [c.slot for c in batch.coverage] == list(slots), what
                ran = [part.strip() for part in batch.scope.method.split(" / ")]  # a folder: each member's
                assert any(r.startswith(method) or (method == "hybrid" and r.startswith("bm25")) for r in ran), (
                    what, batch.scope.method)
                spans = tuple((i.anchor.char_start, i.anchor.char_end) for i in batch.items)
                for item in self.reader.locate(parsed, intent, 1500, exclude=spans).items:
                    s, e = item.anchor.char_start, item.anchor.char_end
                    assert all(e <= xs or s >= xe for xs, xe in spans), (what, (s, e))
        assert found == self.reader.methods, f"no evidence in any sample by {sorted(self.reader.methods - found)}"

    # -- contract v2 ----------------------------------------------------------------------

    def test_a_ranking_reader_keeps_the_shared_locate(self) -> None:
        """Hooks in, one pipeline out: a ranking Reader never writes its own locate (the class refuses it)."""
        if isinstance(self.reader, RankingReader):
            assert type(self.reader).locate is RankingReader.locate
            assert self.reader.default_method in self.reader.methods

    def test_only_the_calibrated_judge_says_matched(self) -> None:
        """Every "matched" a Reader hands out, by any method it declares, is what the calibrated judge says for
        the Reader's family given the signals it recorded; verify's stance rule is the one exception."""
        for sample, parsed in self.parsed_samples():
            slots = sample.slots or (sample.intent,)
            for method in sorted(self.reader.methods):
                batch = self.reader.locate(parsed, ReadIntent(sample.intent, slots, method=method), 1500)
                for cov in batch.coverage:
                    if cov.status == "matched":
                        assert vouches(cov), (sample.name, method, cov)
                        assert self._judged_for_me(cov.judged_by), (sample.name, cov.judged_by)
            checked = verify(self.reader, parsed, sample.intent, 1500)
            for cov in checked.coverage:
                stances = {item.stance for item in checked.items if item.anchor.label in cov.anchors}
                assert cov.status != "matched" or (cov.judged_by == STANCE_RULE and stances), (sample.name, cov)

    def _judged_for_me(self, family: str) -> bool:
        """A ranking Reader's coverage is judged for its own family (a folder passes on its members')."""
        return not isinstance(self.reader, RankingReader) or family == self.reader.family

    def test_every_widening_resolves_around_the_passage(self) -> None:
        """What a pack's suggested focus may name (``Reader.widen``): anchors that resolve and hold the passage."""
        for sample, parsed in self.parsed_samples():
            for item in self.locate(sample, parsed, 1500).items[:3]:
                for wider in self.reader.widen(parsed, item.anchor.label):
                    assert wider != item.anchor.label
                    region = self.reader.focus(parsed, wider)
                    starts = [i.anchor.char_start for i in region.items]
                    ends = [i.anchor.char_end for i in region.items]
                    assert min(starts) <= item.anchor.char_start and item.anchor.char_end <= max(ends), wider

    def test_anchors_resolve_back_through_focus(self) -> None:
        for sample, parsed in self.parsed_samples():
            for item in self.locate(sample, parsed, 1500).items:
                region = self.reader.focus(parsed, item.anchor.label)
                starts = [i.anchor.char_start for i in region.items]
                ends = [i.anchor.char_end for i in region.items]
                assert region.items, item.anchor.label
                assert min(starts) <= item.anchor.char_start and item.anchor.char_end <= max(ends), item.anchor.label

    def test_bad_anchor_is_refused(self) -> None:
        for _, parsed in self.parsed_samples():
            with pytest.raises(BadAnchor):
                self.reader.focus(parsed, "no-such-anchor-zq9")

    # -- failure -----------------------------------------------------------------------

    def test_malformed_input_is_a_reader_error_in_time(self) -> None:
        cases = self.malformed()
        assert cases, "a Reader must be tested on malformed input"
        for name, data in cases:
            started = time.monotonic()
            with pytest.raises(ReaderError) as info:
                self.reader.parse(MemorySource(name, data))
            assert info.value.message and info.value.hint, name
            assert time.monotonic() - started < self.time_bound_s, name

    def test_garbage_never_escapes_as_another_exception(self) -> None:
        rng = random.Random(4)
        inputs = [bytes(rng.randrange(256) for _ in range(n)) for n in (0, 1, 7, 300, 5000)]
        for sample in self.samples():
            cut = len(sample.data)
            inputs += [sample.data[: cut // 2], sample.data[: cut // 7], _flip(sample.data, rng)]
        name = self.samples()[0].name
        for data in inputs:
            started = time.monotonic()
            try:
                parsed = self.reader.parse(MemorySource(name, data))
            except ReaderError:
                continue
            finally:
                assert time.monotonic() - started < self.time_bound_s
            self.reader.preview(parsed, 500)

    def test_operations_it_does_not_offer_are_refused(self) -> None:
        missing = sorted(ops.OPERATIONS - self.reader.operations)
        if not missing:
            pytest.skip("offers every operation")
        _, parsed = next(self.parsed_samples())
        with pytest.raises(UnsupportedOperation):
            self.reader.operate(parsed, ops.Operation(missing[0], "x"), 1500)


    # -- exact operations ------------------------------------------------------------------

    def operated(self) -> Iterator[tuple[Sample, Parsed, ops.Operation]]:
        pairs = self.operation_samples()
        if not pairs:
            pytest.skip("no operation samples")
        parsed: dict[str, Parsed] = {}
        for sample, operation in pairs:
            if sample.name not in parsed:
                parsed[sample.name] = self.parse(sample)
            yield sample, parsed[sample.name], operation

    def check_bounded(self, batch: Batch, budget: int, what: str) -> None:
        assert isinstance(batch, Batch), what
        assert sum(len(item.text) for item in batch.items) <= budget, (what, budget)
        assert batch.scope.method == "exact", what

    def test_offered_operations_are_exact_and_bounded(self) -> None:
        for sample, parsed, operation in self.operated():
            assert operation.name in self.reader.operations, operation
            for budget in OPERATION_BUDGETS:
                started = time.monotonic()
                batch = self.reader.operate(parsed, operation, budget)
                assert time.monotonic() - started < self.time_bound_s
                self.check_bounded(batch, budget, f"{sample.name} {operation}")
            assert self.reader.operate(parsed, operation, 3000).items, (sample.name, operation)

    def test_hostile_options_are_reader_errors(self) -> None:
        for sample, parsed, operation in self.operated():
            must_fail, may_pass = _hostile(operation)
            for variant in must_fail:
                with pytest.raises(ReaderError) as info:
                    self.reader.operate(parsed, variant, 600)
                assert info.value.message and info.value.hint, (sample.name, variant)
            for variant in may_pass:
                started = time.monotonic()
                try:
                    batch = self.reader.operate(parsed, variant, 600)
                except ReaderError:
                    continue
                finally:
                    assert time.monotonic() - started < self.time_bound_s, (sample.name, variant)
                self.check_bounded(batch, 600, f"{sample.name} {variant}")


def _check_slices(parsed: Parsed, batch: Batch, budget: int, what: object) -> None:
    """Every passage is the full view's text at its anchor, and together they fit the budget (or are one
    passage longer than it)."""
    for item in batch.items:
        a = item.anchor
        assert 0 <= a.char_start < a.char_end <= len(parsed.full_view), (what, a)
        assert parsed.full_view[a.char_start : a.char_end] == item.text, (what, a)
    total = sum(len(item.text) for item in batch.items)
    assert total <= max(budget, max((len(item.text) for item in batch.items), default=0)), (what, total)


def _round_trip(parsed: Parsed, sample: Sample, reader: str, state: Path) -> Parsed:
    """``parsed`` saved to a parsed store, the store closed, and loaded back by a new one (a remount)."""
    from sparsefs.artifacts.cache import variant
    from sparsefs.store import serial
    from sparsefs.store.parsed import open_store

    try:
        serial.encode(parsed.data, {id(parsed.full_view): "full_view"})
    except serial.Unserializable as err:
        pytest.fail(f"{sample.name}: {err}; declare the class in its registration's persists")
    key = (xxhash.xxh3_128_hexdigest(sample.data), f"{reader}-{variant(sample.name)}")
    store = open_store(state)
    store.save(*key, parsed, parse_seconds=60.0)
    store.close()
    again = open_store(state)
    try:
        restored = again.load(*key)
    finally:
        again.close()
    assert restored is not None, f"{sample.name}: the stored parse did not load back"
    return restored


def _hostile(operation: ops.Operation) -> tuple[list[ops.Operation], list[ops.Operation]]:
    """Variants that must be refused, and variants that may run (but stay bounded)."""
    missing = ops.Condition(MISSING, "=", "1")
    bad_regex = ops.Condition(MISSING, "~", "(unclosed")
    must_fail = [
        replace(operation, where=(missing,)),
        replace(operation, by=MISSING),
        replace(operation, where=(bad_regex,)),
        replace(operation, sheet=MISSING, cols=(MISSING,), since="not a time"),
    ]
    if operation.where:
        must_fail.append(replace(operation, where=(ops.Condition(operation.where[0].field, "~", "(unclosed"),)))
    if operation.name in ("filter", "count") and operation.target:
        must_fail.append(replace(operation, target="(unclosed"))
    may_pass = [
        replace(operation, rows=(1, 10**12)),
        replace(operation, rows=(10**12, 10**12)),
        replace(operation, target=MISSING) if operation.target else operation,
        replace(operation, k=10**9),
    ]
    return must_fail, may_pass


def _flip(data: bytes, rng: random.Random) -> bytes:
    """The data with a few bytes in its middle third overwritten."""
    if len(data) < 30:
        return data[::-1]
    out = bytearray(data)
    third = len(data) // 3
    for _ in range(8):
        out[rng.randrange(third, 2 * third)] = rng.randrange(256)
    return bytes(out)
