"""The Code Reader: conformance, the symbol index against ast, anchors, intent, fallbacks, bounds."""

from __future__ import annotations

import ast
import time
from pathlib import Path

import pytest

from readers.base import BadAnchor, Parsed, ReadIntent, UnsupportedArtifact
from readers.code.reader import CodeReader
from tests.reader_conformance import MemorySource, ReaderConformance, Sample

_ROOT = Path(__file__).resolve().parents[3]
_TEXT_PY = _ROOT / "readers" / "text.py"
_LOCATE_PY = _ROOT / "readers" / "retrieval" / "locate.py"
_GRAMMAR_PY = _ROOT / "sparsefs" / "protocol" / "grammar.py"
_OPS_PY = _ROOT / "readers" / "ops.py"

JS = """\
// Router for the {admin} pages; braces in comments: { { {
import { readFile } from "fs";
const express = require("express");

/* A block comment with a fake function: function fake() { */
export class Router extends Base {
  constructor(routes) {
    super();
    this.routes = routes; // map of "path" -> handler }
  }

  async dispatch(req, res) {
    const tmpl = `unbalanced ${req.path} { in a template`;
    if (req.method === "GET") {
      return this.routes["{get}"](req, res);
    }
    return res.status(404).send("not found }");
  }
}

export const parseQuery = (query) => {
  const out = {};
  for (const part of query.split("&")) {
    const [k, v] = part.split("=");
    out[k] = v ?? "}";
  }
  return out;
};

function formatPrice(cents) {
  return "$" + (cents / 100).toFixed(2) + " {USD}";
}
"""

GO = """\
package main

import (
\t"fmt"
\t"net/http"
)

// Server serves {json}; the comment has a brace }
type Server struct {
\taddr string
\tmux  *http.ServeMux
}

type Handler interface {
\tServe(w http.ResponseWriter, r *http.Request)
}

func (s *Server) Start() error {
\tmsg := "listening on {" + s.addr + "}"
\tfmt.Println(msg, '}')
\treturn http.ListenAndServe(s.addr, s.mux)
}

func NewServer(addr string) *Server {
\traw := `a raw string with } and {
spanning lines }`
\t_ = raw
\treturn &Server{addr: addr, mux: http.NewServeMux()}
}
"""

RUST = """\
use std::collections::HashMap;
use std::fmt;

/// A cache with a {doc} comment }
pub struct Cache<'a> {
    entries: HashMap<&'a str, String>,
}

impl<'a> Cache<'a> {
    pub fn new() -> Self {
        Cache { entries: HashMap::new() }
    }

    pub fn get(&self, key: &str) -> Option<&String> {
        let brace = '{';
        let s = "}} not a close";
        self.entries.get(key)
    }
}

impl fmt::Display for Cache<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Cache({{}} entries: {})", self.entries.len())
    }
}

pub enum Mode { Fast, Slow }

fn helper(x: i32) -> i32 {
    /* nested { comment */
    x + 1
}
"""

C = """\
#include <stdio.h>
#include "util.h"

/* count braces: { { } */
struct point {
    int x;
    int y;
};

static int count_open(const char *s)
{
    int n = 0;
    for (; *s; s++) {
        if (*s == '{') n++;   /* '}' */
    }
    return n;
}

int main(int argc, char **argv) {
    printf("%d {\\n", count_open(argv[1]));
    return 0;
}
"""

# (qualname, kind, first line, last line), written by hand from the snippets above.
EXPECTED = {
    "app.js": [
        ("Router", "class", 6, 19),
        ("Router.constructor", "method", 7, 10),
        ("Router.dispatch", "method", 12, 18),
        ("parseQuery", "function", 21, 28),
        ("formatPrice", "function", 30, 32),
    ],
    "server.go": [
        ("Server", "struct", 9, 12),
        ("Handler", "interface", 14, 16),
        ("Start", "function", 18, 22),
        ("NewServer", "function", 24, 29),
    ],
    "lib.rs": [
        ("Cache", "struct", 5, 7),
        ("Cache", "impl", 9, 19),
        ("Cache.new", "method", 10, 12),
        ("Cache.get", "method", 14, 18),
        ("Cache", "impl", 21, 25),
        ("Cache.fmt", "method", 22, 24),
        ("Mode", "enum", 27, 27),
        ("helper", "function", 29, 32),
    ],
    "util.c": [("point", "struct", 5, 8), ("count_open", "function", 10, 17), ("main", "function", 19, 22)],
}
SNIPPETS = {"app.js": JS, "server.go": GO, "lib.rs": RUST, "util.c": C}

READER = CodeReader()


def _parse(name: str, text: str) -> Parsed:
    return READER.parse(MemorySource(name, text.encode("utf-8")))


def _ast_symbols(source: str) -> set[tuple[str, int, int, int]]:
    """(name, first line with decorators, def line, last line) of every def/class, by ast.walk."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            found.add((node.name, first, node.lineno, node.end_lineno or node.lineno))
    return found


def _lines(text: str, first: int, last: int) -> str:
    return "\n".join(text.split("\n")[first - 1 : last])


class TestCodeConformance(ReaderConformance):
    reader = READER

    def samples(self) -> list[Sample]:
        return [
            Sample("text.py", _TEXT_PY.read_bytes(), "how are units scored with bm25 and neighbours"),
            Sample(
                "grammar.py", _GRAMMAR_PY.read_bytes(), "split slots; parse suffix", ("split_slots", "parse_suffix")
            ),
            Sample("app.js", JS.encode(), "format a price in dollars"),
            Sample("server.go", GO.encode(), "start listening http server"),
            Sample("lib.rs", RUST.encode(), "cache entries get key"),
            Sample("util.c", C.encode(), "count open braces"),
        ]

    def malformed(self) -> list[tuple[str, bytes]]:
        return [
            ("a.py", b"def f():\x00 pass\n"),
            ("b.c", "int caf\u00e9;".encode("latin-1")),
            ("c.js", b"\xff\xfe\x00x"),
        ]

    def check_faithful(self, sample: Sample, parsed: Parsed) -> None:
        assert parsed.full_view == sample.data.decode("utf-8")


@pytest.mark.parametrize("path", [_TEXT_PY, _GRAMMAR_PY, _OPS_PY, _ROOT / "readers" / "code" / "reader.py"])
def test_python_symbols_match_ast_walk(path: Path) -> None:
    source = path.read_text()
    index = _parse(path.name, source).data["symbols"]
    assert index.method == "ast"
    assert {(s.name, s.first, s.line, s.last) for s in index.symbols} == _ast_symbols(source)
    for s in index.symbols:
        assert s.signature.startswith(("def ", "async def ", "class ")) and s.name in s.signature


def test_methods_and_qualnames() -> None:
    index = _parse("locate.py", _LOCATE_PY.read_text()).data["symbols"]
    by_name = {s.qualname: s for s in index.symbols}
    assert by_name["RankingReader.locate"].kind == "method"
    assert by_name["RankingReader"].kind == "class"
    assert by_name["UnitView.live"].signature == "def live(self) -> int"
    bounded = _parse("bounded.py", (_TEXT_PY.parent / "kit" / "bounded.py").read_text()).data["symbols"]
    assert {s.qualname: s for s in bounded.symbols}["BoundedLines.add"].signature == "def add(self, line: str) -> bool"
    assert "@dataclass(frozen=True, eq=False)" in by_name["UnitView"].decorators


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_heuristic_symbols_tolerate_braces_in_strings_and_comments(name: str) -> None:
    index = _parse(name, SNIPPETS[name]).data["symbols"]
    assert index.method == "heuristic"
    assert [(s.qualname, s.kind, s.first, s.last) for s in index.symbols] == EXPECTED[name]


def test_focus_round_trips_every_symbol() -> None:
    source = _GRAMMAR_PY.read_text()
    parsed = _parse("grammar.py", source)
    for s in parsed.data["symbols"].symbols:
        batch = READER.focus(parsed, f"#{s.qualname}")
        (item,) = batch.items
        again = READER.focus(parsed, item.anchor.label)
        assert again.items[0].anchor.label == item.anchor.label
        assert item.text == _lines(source, s.first, s.last).rstrip("\n")
        assert item.anchor.label == f"#{s.qualname} (L{s.first}-{s.last})"


def test_focus_includes_decorators_and_docstring() -> None:
    source = _LOCATE_PY.read_text()
    parsed = _parse("locate.py", source)
    text = READER.focus(parsed, "#UnitView").items[0].text
    assert text.startswith('@dataclass(frozen=True, eq=False)\nclass UnitView:\n    """The units one locate may pick')


def test_shared_names_take_the_first_and_say_so() -> None:
    parsed = _parse("lib.rs", RUST)
    first = READER.focus(parsed, "#Cache")
    assert first.items[0].anchor.label == "#Cache (L5-7)"
    assert any("3 symbols named Cache" in f for f in first.flags)
    second = READER.focus(parsed, "#Cache:2")
    assert second.items[0].anchor.label == "#Cache (L9-19)"
    assert (
        READER.focus(parsed, second.items[0].anchor.label).items[0].anchor.char_start
        == second.items[0].anchor.char_start
    )
    with pytest.raises(BadAnchor) as info:
        READER.focus(parsed, "#Cache:4")
    assert "#Cache:1" in info.value.hint
    with pytest.raises(BadAnchor) as info:
        READER.focus(parsed, "#helpr")
    assert "#helper" in info.value.hint


def test_line_anchor_and_scope() -> None:
    source = _LOCATE_PY.read_text()
    parsed = _parse("locate.py", source)
    item = READER.focus(parsed, "L10-12").items[0]
    assert item.text == _lines(source, 10, 12)
    adjusted = READER.focus(parsed, "#_adjusted").items[0]
    batch = READER.locate(parsed, ReadIntent("scores", ("scores",), scope="#_adjusted"), 800)
    assert batch.items
    for it in batch.items:
        assert adjusted.anchor.char_start <= it.anchor.char_start and it.anchor.char_end <= adjusted.anchor.char_end
        assert it.anchor.heading == "_adjusted"


def test_intent_naming_a_function_finds_its_definition_first() -> None:
    parsed = _parse("ops.py", _OPS_PY.read_text())
    batch = READER.locate(parsed, ReadIntent("parse_where", ("parse_where",)), 1500)
    best = max(batch.items, key=lambda it: it.score)
    assert "def parse_where(" in best.text
    assert best.anchor.heading == "parse_where"
    assert batch.coverage[0].status != "unresolved" and batch.coverage[0].anchors[0] == best.anchor.label
    js = _parse("app.js", JS)
    best = max(
        READER.locate(js, ReadIntent("where is formatPrice", ("formatPrice",)), 600).items, key=lambda i: i.score
    )
    assert "function formatPrice(cents)" in best.text


def test_passages_carry_the_enclosing_symbol() -> None:
    source = _TEXT_PY.read_text()
    parsed = _parse("text.py", source)
    spans = [
        (n.lineno, n.end_lineno or n.lineno, n.name)
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.FunctionDef | ast.ClassDef)
    ]
    batch = READER.locate(parsed, ReadIntent("heading above line", ("heading above line",)), 1500)
    assert batch.items
    for item in batch.items:
        line = item.anchor.line_start or 0
        inside = [s for s in spans if s[0] <= line <= s[1]]
        innermost = min(inside, key=lambda s: s[1] - s[0])[2] if inside else None
        assert (item.anchor.heading or "").split(".")[-1:] == ([innermost] if innermost else [""])


def test_syntax_error_falls_back_to_the_heuristic_and_says_so() -> None:
    source = _TEXT_PY.read_text()
    broken = source + "\n\ndef broken(:\n    pass\n"
    parsed = _parse("text.py", broken)
    index = parsed.data["symbols"]
    assert index.method == "heuristic"
    assert any(f.startswith("python-syntax-error") for f in index.flags)
    assert "python-syntax-error" in READER.preview(parsed, 2000)
    assert "python-syntax-error" in " ".join(READER.focus(parsed, "#broken").flags)
    found = {(s.name, s.first, s.line, s.last) for s in index.symbols}
    assert _ast_symbols(source) <= found


def test_shebang_and_extensions() -> None:
    assert READER.accepts("run", b"#!/usr/bin/env python3\nprint(1)\n")
    assert READER.accepts("tool", b"#!/bin/bash\nset -e\n")
    assert not READER.accepts("tool", b"#!/usr/bin/perl\n")
    assert not READER.accepts("notes.txt", b"hello")
    assert READER.accepts("x.tsx", b"export const A = () => <div/>;")
    assert not READER.accepts("x.py", b"\x00\x01")
    parsed = READER.parse(MemorySource("deploy", b"#!/usr/bin/env bash\ndeploy() {\n  echo '}'\n}\n"))
    assert [(s.name, s.first, s.last) for s in parsed.data["symbols"].symbols] == [("deploy", 2, 4)]
    with pytest.raises(UnsupportedArtifact):
        READER.parse(MemorySource("README", b"plain words"))


def test_preview_of_a_long_file_shows_top_level_symbols_first() -> None:
    source = "".join(
        f"class Model{i}:\n" + "".join(f"    def m{j}(self, x: int) -> int:\n        return x\n\n" for j in range(8))
        for i in range(210)
    )
    parsed = _parse("models.py", source)
    assert len(source.split("\n")) > 5000
    text = READER.preview(parsed, 2000)
    assert len(text) <= 2000
    assert "top-level symbols (210 of 1,890" in text and "class Model0  [8 members]" in text
    assert "def m3" not in text


def test_large_generated_file_parses_in_bounded_time() -> None:
    source = "".join(
        f"// helper {i} with {{ braces }} in a comment\nexport function helper{i}(a, b) {{\n"
        f'  const s = "}} in a string {{";\n  return a + b + {i};\n}}\n\n'
        for i in range(45_000)
    )
    assert len(source) > 5_000_000
    started = time.monotonic()
    parsed = _parse("big.js", source)
    assert time.monotonic() - started < 15
    symbols = parsed.data["symbols"].symbols
    assert len(symbols) == 45_000 and symbols[-1].qualname == "helper44999"
    assert (symbols[1234].first, symbols[1234].last) == (1234 * 6 + 2, 1234 * 6 + 5)
    best = max(READER.locate(parsed, ReadIntent("helper31337", ("helper31337",)), 500).items, key=lambda i: i.score)
    assert "function helper31337(" in best.text


@pytest.mark.parametrize(
    "text",
    ['"\\' * 200_000, "/*" * 200_000, "x(a) {\n" * 50_000, "{" * 300_000, '"""' + "a\\\n" * 100_000, "`" * 100_001],
)
def test_hostile_sources_stay_bounded(text: str) -> None:
    for name in ("h.c", "h.js", "h.py", "h.kt", "h.rb", "h.sh"):
        started = time.monotonic()
        parsed = _parse(name, text)
        READER.preview(parsed, 500)
        assert time.monotonic() - started < 5, name
