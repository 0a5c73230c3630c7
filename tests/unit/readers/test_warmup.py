"""sparsefs.artifacts.warmup and readers.retrieval.methods.warm_dense: the background dense warm-up."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from readers.base import Parsed, ReadIntent
from readers.kit.source import MemorySource
from readers.retrieval import dense
from readers.retrieval.methods import DENSE_KEY, warm_dense
from readers.text import TextReader
from sparsefs.artifacts import warmup
from sparsefs.artifacts.warmup import DenseWarmer

needs_model = pytest.mark.skipif(not dense.available(), reason=dense.missing_reason() or "dense extra missing")

DOC = "\n\n".join(
    f"Section {i}. The ward {i % 7} team reported {i * 13} admissions and a median stay of {i % 5 + 2} days. "
    f"Staffing in unit {i} changed after the review of protocol {i % 11}."
    for i in range(60)
)


HYBRID = ReadIntent("admissions in ward 3", ("admissions in ward 3",), method="hybrid")


def _counting(calls: list[int], result: int) -> Callable[[Parsed, Callable[[], bool], int], int]:
    """A warm function that adds ``result`` units on its first call for an artifact, then none."""

    def warm(parsed: Parsed, stop: Callable[[], bool], limit: int) -> int:
        calls.append(id(parsed))
        return result if calls.count(id(parsed)) == 1 else 0

    return warm


def _parsed() -> Parsed:
    return TextReader().parse(MemorySource("notes.txt", DOC.encode()))


def _wait(condition: Callable[[], bool], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


@pytest.fixture(autouse=True)
def _no_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(warmup, "START_DELAY_S", 0.0)


def test_each_parsed_version_is_warmed_once_and_close_stops_the_thread() -> None:
    calls: list[int] = []
    warmer = DenseWarmer(_counting(calls, 1))
    first, second = _parsed(), _parsed()
    warmer.submit(first)
    warmer.submit(first)
    warmer.submit(second)
    assert _wait(lambda: warmer.done == 2)
    assert sorted(set(calls)) == sorted({id(first), id(second)})
    assert len(calls) == 4  # one slice that added a unit, one that found nothing left, per artifact
    warmer.close()
    assert warmer._thread is not None and not warmer._thread.is_alive()
    warmer.submit(_parsed())  # after close: ignored, no new thread
    assert warmer.done == 2


def test_a_failing_warm_up_leaves_the_thread_serving() -> None:
    calls: list[str] = []

    def flaky(parsed: Parsed, stop: Callable[[], bool], limit: int) -> int:
        calls.append("x")
        if len(calls) == 1:
            raise RuntimeError("model broke")
        return 0

    warmer = DenseWarmer(flaky)
    held = [_parsed(), _parsed()]  # the warmer keeps weak references only
    for parsed in held:
        warmer.submit(parsed)
    assert _wait(lambda: warmer.done == 1) and len(calls) == 2
    warmer.close()


def test_close_interrupts_a_long_job_between_batches() -> None:
    started = threading.Event()
    batches: list[int] = []

    def slow(parsed: Parsed, stop: Callable[[], bool], limit: int) -> int:
        started.set()
        while not stop():
            batches.append(1)
            time.sleep(0.01)
        return len(batches)

    warmer = DenseWarmer(slow)
    held = _parsed()
    warmer.submit(held)
    assert started.wait(5)
    t0 = time.monotonic()
    warmer.close()
    assert time.monotonic() - t0 < 1.0
    assert warmer._thread is not None and not warmer._thread.is_alive()


def test_an_artifact_dropped_before_its_turn_is_not_warmed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(warmup, "START_DELAY_S", 0.3)
    calls: list[int] = []
    warmer = DenseWarmer(_counting(calls, 0))
    warmer.submit(_parsed())  # nothing else holds it: gone before the thread looks
    gc.collect()
    kept = _parsed()
    warmer.submit(kept)
    assert _wait(lambda: warmer.done == 1)
    assert set(calls) == {id(kept)}
    warmer.close()


def test_the_environment_can_turn_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(warmup.ENV, "0")
    assert not warmup.enabled()
    monkeypatch.setenv(warmup.ENV, "1")
    assert warmup.enabled()


@needs_model
def test_warm_dense_embeds_every_unit_and_a_new_question_embeds_none() -> None:
    parsed = _parsed()
    units = len(parsed.data["unit_starts"])
    assert warm_dense(parsed, lambda: False) == units
    cached = parsed.data["dense:" + DENSE_KEY]
    assert len(cached["ids"]) == units
    batch = TextReader().locate(parsed, HYBRID, 600)
    assert batch.scope.method.startswith("hybrid") and batch.items
    assert parsed.data["dense:" + DENSE_KEY] is cached  # nothing new to embed: the entry was not replaced
    cold = _parsed()  # the same read without the warm-up: the same passages (bit-identical vectors)
    again = TextReader().locate(cold, HYBRID, 600)
    assert [it.anchor.label for it in again.items] == [it.anchor.label for it in batch.items]


@needs_model
def test_warm_dense_stops_when_asked_and_skips_pdf_page_markers() -> None:
    parsed = _parsed()
    asked: list[int] = []

    def stop_after_two() -> bool:
        asked.append(1)
        return len(asked) > 2

    added = warm_dense(parsed, stop_after_two)
    assert added == 2 * dense.BATCH
    markers = np.zeros(len(parsed.data["unit_starts"]), dtype=bool)
    markers[::2] = True
    fresh = _parsed()
    fresh.data["markers"] = markers
    warm_dense(fresh, lambda: False)
    ids = fresh.data["dense:" + DENSE_KEY]["ids"]
    assert not markers[ids].any() and len(ids) == int((~markers).sum())


class _RecordingWarmer(DenseWarmer):
    def __init__(self) -> None:
        super().__init__(_counting([], 0))
        self.submitted: list[Parsed] = []

    def submit(self, parsed: Parsed) -> None:
        self.submitted.append(parsed)


def test_only_a_hybrid_choice_queues_the_warm_up() -> None:
    from readers.selection import SNIPPETS, Choice, RequestGroup
    from sparsefs.protocol.selecting import ConfigurationChooser, Selection

    warmer = _RecordingWarmer()
    chooser = ConfigurationChooser(warmer=warmer)
    group = RequestGroup("text", ">32K", "selective-fact")
    parsed = _parsed()
    for method in ("bm25", "lexical", "region", "hybrid"):
        chooser.chosen(Selection(group, Choice(SNIPPETS[method], 0.7, 1000.0, "test")), parsed)
    assert warmer.submitted == [parsed]
    warmer.close()


def test_a_finished_warm_up_is_saved_without_waiting_for_unmount(tmp_path: Path) -> None:
    from sparsefs.store.parsed import open_store

    store = open_store(tmp_path)
    parsed = _parsed()
    store.save("ab" * 16, "text", parsed, parse_seconds=1.0)
    warmer = DenseWarmer(_adds_vectors, on_warmed=store.save_grown)
    warmer.submit(parsed)
    assert _wait(lambda: warmer.done == 1)
    warmer.close()
    again = open_store(tmp_path)  # a second reader of the same directory: the entry is already there
    assert _wait(lambda: (loaded := again.load("ab" * 16, "text")) is not None and "dense:test" in loaded.data)
    store.close()
    again.close()


def _adds_vectors(parsed: Parsed, stop: Callable[[], bool], limit: int) -> int:
    if "dense:test" in parsed.data:
        return 0
    parsed.data["dense:test"] = {"ids": np.arange(2, dtype=np.int64), "vectors": np.ones((2, 4), dtype=np.float16)}
    return 2


@needs_model
def test_warmed_vectors_are_bit_identical_to_the_request_paths() -> None:
    parsed = _parsed()
    warm_dense(parsed, lambda: False)
    cached = parsed.data["dense:" + DENSE_KEY]
    starts, ends = parsed.data["unit_starts"], parsed.data["unit_ends"]
    texts = [parsed.full_view[int(starts[i]) : int(ends[i])] for i in cached["ids"]]
    assert np.array_equal(cached["vectors"], dense.embed(texts).astype(np.float16))
