"""Fuzzing the grammar and the Readers with hypothesis.

The grammar must turn any text into a request or a GrammarError, and decode
percent-encoded text exactly. The Readers, driven through the real protocol
over files of every family (random bytes, random text, generated JSON, CSV,
logs, HTML, code), must answer every request with a pack — a real one or an
error pack that says what to ask instead — and never with the "internal
error" pack that marks a Reader bug. SPARSEFS_LONG=1 runs 20x the examples.
"""

from __future__ import annotations

import json
import os
import tempfile
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from readers.ops import OPERATIONS
from sparsefs.artifacts.cache import ArtifactCache
from sparsefs.protocol.access import Protocol
from sparsefs.protocol.grammar import GrammarError, VirtualRequest, parse_suffix
from sparsefs.source.rootfs import SourceRoot
from tests.conftest import is_pack

SCALE = 20 if os.environ.get("SPARSEFS_LONG") == "1" else 1
FUZZ = settings(max_examples=60 * SCALE, deadline=None, suppress_health_check=list(HealthCheck))

WORDS = st.sampled_from(["revenue", "2023", "harbor", "robots", "R&D", "error", "id", "the", "x", "ünïcödé", "50%"])
PHRASE = st.lists(WORDS, min_size=1, max_size=5).map(" ".join)
ANY_TEXT = st.text(max_size=60)
SAFE_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=60)


# ---- the grammar ----


@given(ANY_TEXT)
@settings(max_examples=300 * SCALE, deadline=None)
def test_any_suffix_is_a_request_or_a_grammar_error(suffix: str) -> None:
    try:
        request = parse_suffix(suffix, OPERATIONS)
    except GrammarError as err:
        assert err.message and err.hint
        return
    assert isinstance(request, VirtualRequest) and request.action


@given(st.sampled_from(["intent", "collect", "refine", "verify", "focus"]), SAFE_TEXT)
@settings(max_examples=300 * SCALE, deadline=None)
def test_percent_encoded_text_decodes_exactly(action: str, text: str) -> None:
    quoted = urllib.parse.quote(text, safe="")
    try:
        request = parse_suffix(f"{action}={quoted}")
    except GrammarError as err:
        assert action in ("focus", "refine", "verify") and not text.strip(), err  # these need an argument
        return
    assert request.argument == (text.strip() or None)


@given(st.dictionaries(st.sampled_from(["k", "budget", "scope", "format", "where", "by"]), SAFE_TEXT, max_size=4))
@settings(max_examples=200 * SCALE, deadline=None)
def test_options_decode_or_refuse(options: dict[str, str]) -> None:
    suffix = "count=x&" + "&".join(f"{k}={urllib.parse.quote(v, safe='')}" for k, v in options.items())
    try:
        request = parse_suffix(suffix, OPERATIONS)
    except GrammarError:
        return
    for key in ("where", "by", "scope"):
        if key in options and options[key].strip():
            assert request.options.get(key, request.scope) == options[key].strip()


# ---- the Readers, through the protocol ----

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | ANY_TEXT.filter(str.isprintable),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(PHRASE, inner, max_size=4),
    max_leaves=30,
)
CSV_ROWS = st.lists(
    st.lists(st.one_of(PHRASE, st.integers().map(str), st.just("")), min_size=1, max_size=5), min_size=0, max_size=12
)
LOG_LINES = st.lists(st.tuples(st.sampled_from(["INFO", "ERROR", "WARN", "DEBUG"]), PHRASE), max_size=20)
FILES = st.one_of(
    st.tuples(
        st.sampled_from(["a.txt", "a.bin", "a.pdf", "a.xlsx", "a.json", "a.csv", "a.log", "a.html", "a.py"]),
        st.binary(max_size=2_000),
    ),
    st.tuples(
        st.sampled_from(["a.txt", "a.md", "a.py", "a.log", "a.csv"]),
        ANY_TEXT.map(lambda t: t.encode("utf-8", "replace")),
    ),
    st.tuples(st.just("a.json"), JSON_VALUES.map(lambda v: json.dumps(v).encode())),
    st.tuples(
        st.just("a.jsonl"),
        st.lists(JSON_VALUES, max_size=8).map(lambda vs: "\n".join(json.dumps(v) for v in vs).encode()),
    ),
    st.tuples(st.just("a.csv"), CSV_ROWS.map(lambda rows: "\n".join(",".join(r) for r in rows).encode())),
    st.tuples(
        st.just("a.log"),
        LOG_LINES.map(
            lambda lines: "".join(
                f"2024-03-14T10:00:{i % 60:02d}Z {lvl} {msg}\n" for i, (lvl, msg) in enumerate(lines)
            ).encode()
        ),
    ),
    st.tuples(
        st.just("a.html"),
        st.lists(PHRASE, max_size=8).map(
            lambda ps: (
                "<!DOCTYPE html><html><body>" + "".join(f"<h2>{p}</h2><p>{p} {p}</p>" for p in ps) + "</body></html>"
            ).encode()
        ),
    ),
    st.tuples(
        st.just("a.py"),
        st.lists(PHRASE, max_size=6).map(
            lambda ps: "".join(f"def f{i}():\n    '''{p}'''\n    return {i}\n\n" for i, p in enumerate(ps)).encode()
        ),
    ),
)
REQUESTS = st.one_of(
    PHRASE.map(lambda p: f"intent={p}"),
    PHRASE.map(lambda p: f"collect={p}; {p}"),
    st.just("scout"),
    st.just("full"),
    PHRASE.map(lambda p: f"verify={p}"),
    st.sampled_from(["p1", "p1-3", "L1-5", "L0-0", "#Intro", "sheet:S", "$.a", "$[0]", "x"]).map(
        lambda a: f"focus={urllib.parse.quote(a, safe='')}"
    ),
    st.sampled_from(["count", "sum", "rows", "distinct", "filter", "min", "max", "mean", "path"]).flatmap(
        lambda op: PHRASE.map(lambda p: f"{op}={urllib.parse.quote(p, safe='')}&where={urllib.parse.quote(p)}")
    ),
    ANY_TEXT.map(lambda t: "intent=" + urllib.parse.quote(t, safe="", errors="surrogatepass")),
    PHRASE.map(lambda p: f"intent={p}&k=2&budget=300&scope=L1-3"),
)


@pytest.fixture(scope="module")
def workdir() -> Iterator[tuple[Path, Protocol]]:
    with tempfile.TemporaryDirectory(prefix="sparsefs-fuzz-") as name:
        root = SourceRoot.open(name)
        try:
            yield Path(name), Protocol(ArtifactCache(root))
        finally:
            root.close()


@given(FILES, st.lists(REQUESTS, min_size=1, max_size=3))
@FUZZ
def test_every_reader_answers_every_request_with_a_pack(
    workdir: tuple[Path, Protocol], file: tuple[str, bytes], suffixes: list[str]
) -> None:
    directory, protocol = workdir
    name, content = file
    (directory / name).write_bytes(content)
    for suffix in suffixes:
        try:
            request = parse_suffix(suffix, OPERATIONS)
        except GrammarError:
            continue
        served = protocol.serve(name, request)
        pack = served.pack
        assert pack.error is None or "internal error" not in pack.error.message, (
            name,
            content[:200],
            suffix,
            pack.error.message,
        )
        assert is_pack(served.content) or request.format != "text" or served.text == pack.full_view
