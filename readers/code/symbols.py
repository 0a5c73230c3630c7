"""The symbol index of a source file: what is defined where.

Python is read with :mod:`ast` (classes, functions and methods at any depth,
their signatures as written, decorators, ``end_lineno``, the module docstring
and the imports). Any other language, and a Python file that does not parse,
goes through the heuristic of :mod:`readers.code.heuristic`.

A :class:`Symbol` spans whole lines ``first..last`` (1-based, decorators
included); ``line`` is the line of its ``def``/``class``/``func`` keyword.
Symbols are in document order; ``parent`` is the index of the enclosing
symbol. Bounded: at most :data:`MAX_SYMBOLS` symbols are kept.
"""

from __future__ import annotations

import ast
import re
import warnings
from dataclasses import dataclass, field

from readers.kit.bounded import clip

MAX_SYMBOLS = 50_000
"""Symbols kept per file (the first ones, in document order)."""

MAX_DEPTH = 32
"""Heuristic symbols nested deeper than this are left out (qualnames grow with depth)."""

MAX_AST_CHARS = 8 * 1024 * 1024
"""Past this, a Python file is indexed heuristically (ast trees of huge files cost too much memory)."""

SIGNATURE_CHARS = 240
"""Longest signature kept (longer ones end with '…')."""

CONTAINER_KINDS = frozenset(
    {
        "class",
        "interface",
        "enum",
        "namespace",
        "struct",
        "trait",
        "union",
        "mod",
        "impl",
        "record",
        "object",
        "protocol",
        "extension",
        "module",
    }
)
"""Kinds whose functions are methods."""

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_BLOCKS = ("body", "handlers", "orelse", "finalbody", "cases")
_HEADER_END = re.compile(r"\s*:\s*(?:#[^\n]*)?\s*\Z")


@dataclass(frozen=True, slots=True)
class Symbol:
    """One definition: ``qualname`` is dotted through its enclosing symbols."""

    name: str
    qualname: str
    kind: str
    signature: str
    first: int
    line: int
    last: int
    depth: int
    parent: int | None
    decorators: tuple[str, ...] = ()


@dataclass(frozen=True)
class SymbolIndex:
    """The symbols of one file, how they were found, and its imports."""

    symbols: tuple[Symbol, ...]
    method: str
    imports: tuple[str, ...] = ()
    docstring: str = ""
    flags: tuple[str, ...] = field(default_factory=tuple)


def index_symbols(text: str, language: str) -> SymbolIndex:
    """The symbol index of ``text`` written in ``language`` (see code_heuristic.LANGUAGES)."""
    from readers.code.heuristic import heuristic_index

    if language != "python":
        return heuristic_index(text, language, ())
    if len(text) > MAX_AST_CHARS:
        return heuristic_index(text, "python", (f"python-heuristic: over {MAX_AST_CHARS:,} chars",))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarning for odd escapes is not our business
            tree = ast.parse(text)
    except SyntaxError as exc:
        flag = f"python-syntax-error: line {exc.lineno}: {exc.msg}; symbols found heuristically"
        return heuristic_index(text, "python", (flag,))
    except (RecursionError, MemoryError, ValueError):
        return heuristic_index(text, "python", ("python-unparsable: symbols found heuristically",))
    return _python_index(text, tree)


def _python_index(text: str, tree: ast.Module) -> SymbolIndex:
    lines = text.split("\n")  # ast counts lines at '\n' (str.splitlines also splits at '\f')
    symbols: list[Symbol] = []
    stack: list[tuple[ast.AST, int | None]] = [(tree, None)]  # depth first, in document order
    while stack and len(symbols) < MAX_SYMBOLS:
        node, parent = stack.pop()
        if isinstance(node, _DEFS):
            prefix = symbols[parent].qualname + "." if parent is not None else ""
            depth = 0 if parent is None else symbols[parent].depth + 1
            symbols.append(_python_symbol(lines, node, prefix, depth, parent))
            parent = len(symbols) - 1
        stack.extend((child, parent) for child in reversed(_statements(node)))
    ordered = _in_order(symbols)
    flags = (f"symbols-truncated: first {MAX_SYMBOLS:,} kept",) if len(symbols) >= MAX_SYMBOLS else ()
    return SymbolIndex(ordered, "ast", _python_imports(tree), ast.get_docstring(tree) or "", flags)


def _statements(node: ast.AST) -> list[ast.AST]:
    """The statement children of ``node``: the only places a def or class can be."""
    found: list[ast.AST] = []
    for name in _BLOCKS:
        block = getattr(node, name, None)
        if isinstance(block, list):
            found.extend(block)
    return found


def _python_symbol(
    lines: list[str],
    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef,
    prefix: str,
    depth: int,
    parent: int | None,
) -> Symbol:
    decorators = tuple("@" + clip(ast.unparse(d), SIGNATURE_CHARS) for d in node.decorator_list)
    first = min([d.lineno for d in node.decorator_list] + [node.lineno])
    kind = "class" if isinstance(node, ast.ClassDef) else "function"
    last = node.end_lineno or node.lineno
    return Symbol(
        node.name, prefix + node.name, kind, _header(lines, node), first, node.lineno, last, depth, parent, decorators
    )


def _header(lines: list[str], node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> str:
    """The ``def``/``class`` header as written, up to (not including) its colon."""
    body = node.body[0]
    start_line, start_col = node.lineno - 1, node.col_offset
    end_line, end_col = body.lineno - 1, body.col_offset
    if end_line - start_line > 40:  # a pathological header: keep its first line
        end_line, end_col = start_line, 1 << 30
    parts = lines[start_line : end_line + 1]
    if not parts:
        return node.name
    if len(parts) == 1:
        chunk = _bytes_cut(parts[0], start_col, end_col)
    else:
        chunk = "\n".join([_bytes_cut(parts[0], start_col, None), *parts[1:-1], _bytes_cut(parts[-1], 0, end_col)])
    header = _HEADER_END.sub("", chunk.rstrip())
    if header.endswith(":"):
        header = header[:-1]
    return clip(" ".join(header.split()), SIGNATURE_CHARS)


def _bytes_cut(line: str, start: int, end: int | None) -> str:
    """``line`` cut at UTF-8 byte columns (what ast's col_offset counts)."""
    if line.isascii():
        return line[start:end]
    return line.encode("utf-8")[start:end].decode("utf-8", "ignore")


def _in_order(symbols: list[Symbol]) -> tuple[Symbol, ...]:
    """The symbols, a function directly inside a class made a method."""
    fixed: list[Symbol] = []
    for s in symbols:
        if s.kind == "function" and s.parent is not None and symbols[s.parent].kind == "class":
            s = Symbol(
                s.name, s.qualname, "method", s.signature, s.first, s.line, s.last, s.depth, s.parent, s.decorators
            )
        fixed.append(s)
    return tuple(fixed)


def _python_imports(tree: ast.Module) -> tuple[str, ...]:
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.append("." * node.level + (node.module or ""))
    return tuple(dict.fromkeys(names))


def nest(symbols: list[tuple[str, str, str, int, int, int]]) -> tuple[Symbol, ...]:
    """Symbols from (name, kind, signature, first, line, last) in document order, nested by
    line containment (a linear pass with a stack of open symbols)."""
    out: list[Symbol] = []
    open_: list[int] = []
    for name, kind, signature, first, line, last in symbols[:MAX_SYMBOLS]:
        while open_ and out[open_[-1]].last < first:
            open_.pop()
        if len(open_) >= MAX_DEPTH:
            continue
        parent = open_[-1] if open_ else None
        prefix = out[parent].qualname + "." if parent is not None else ""
        if kind == "function" and parent is not None and out[parent].kind in CONTAINER_KINDS:
            kind = "method"
        depth = len(open_)
        signature = clip(signature, SIGNATURE_CHARS)
        out.append(Symbol(name, prefix + name, kind, signature, first, line, last, depth, parent))
        open_.append(len(out) - 1)
    return tuple(out)
