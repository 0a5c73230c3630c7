"""A heuristic symbol index for languages without a parser at hand.

Three linear passes over the text:

1. *Mask*: comments and string literals are overwritten with spaces (newlines
   kept, so offsets and line numbers do not move). One regex per language
   family; an unterminated comment or string runs to its line end or to the
   end of the file, so every match consumes text and the pass stays linear.
2. *Definitions*: definition-line regexes per family run over the masked text,
   so a ``{`` or ``def`` inside a string or a comment is never seen.
3. *Ends*: brace languages match each definition's ``{`` with its ``}`` (one
   stack pass pairs all braces); indentation languages (Python that does not
   parse, Ruby, Lua) close a definition at the next line indented no deeper
   (one stack pass too). Nesting follows from line containment.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import NamedTuple

from readers.code.symbols import CONTAINER_KINDS, MAX_SYMBOLS, SymbolIndex, nest

BRACE_WINDOW = 2000
"""How far past a definition line its opening brace is looked for."""

LANGUAGES: dict[str, str] = {
    **dict.fromkeys((".py", ".pyi"), "python"),
    **dict.fromkeys((".js", ".mjs", ".cjs", ".jsx", ".ts", ".tsx"), "javascript"),
    ".go": "go",
    ".rs": "rust",
    **dict.fromkeys((".java", ".kt", ".cs", ".scala", ".swift"), "jvm"),
    **dict.fromkeys((".c", ".h", ".cc", ".cpp", ".hpp"), "c"),
    **dict.fromkeys((".sh", ".bash"), "shell"),
    ".rb": "ruby",
    ".php": "php",
    ".lua": "lua",
}
"""Extension -> language family."""

INTERPRETERS: dict[str, str] = {
    **dict.fromkeys(("python", "python2", "python3", "pypy", "pypy3"), "python"),
    **dict.fromkeys(("node", "nodejs", "deno", "bun", "ts-node"), "javascript"),
    **dict.fromkeys(("sh", "bash", "zsh", "ksh", "dash", "ash"), "shell"),
    "ruby": "ruby",
    "php": "php",
    **dict.fromkeys(("lua", "luajit"), "lua"),
}
"""Shebang interpreter -> language family."""

_INDENTED = frozenset({"python", "ruby", "lua"})

_C_COMMENTS = r"//[^\n]*+|/\*(?:[^*]|\*(?!/))*+(?:\*/|\Z)"
# Each literal, once opened, always matches (to its end, its line end or the end of the
# file, a dangling backslash included): a failed attempt would be retried at every quote.
_DQ = r'"(?:\\.|[^"\\\n])*+(?:"|\\?$)'
_SQ = r"'(?:\\.|[^'\\\n])*+(?:'|\\?$)"
_CHAR = r"'(?:\\.[^'\n]{0,8}|[^'\\\n])'"  # a char literal, not a Rust lifetime
_BACKTICK = r"`(?:\\[\s\S]|[^`\\])*+(?:`|\\?\Z)"
_HASH_COMMENT = r"#[^\n]*+"
_TRIPLE = r'"""(?:[^"\\]|\\[\s\S]|"(?!""))*+(?:"""|\\?\Z)' + r"|'''(?:[^'\\]|\\[\s\S]|'(?!''))*+(?:'''|\\?\Z)"
_MASKS: dict[str, re.Pattern[str]] = {
    "python": re.compile("|".join((_TRIPLE, _HASH_COMMENT, _DQ, _SQ)), re.M),
    "javascript": re.compile("|".join((_C_COMMENTS, _DQ, _SQ, _BACKTICK)), re.M),
    "go": re.compile("|".join((_C_COMMENTS, _DQ, _CHAR, _BACKTICK)), re.M),
    "rust": re.compile("|".join((_C_COMMENTS, _DQ, _CHAR)), re.M),
    "jvm": re.compile("|".join((_TRIPLE, _C_COMMENTS, _DQ, _CHAR)), re.M),
    "c": re.compile("|".join((_C_COMMENTS, _DQ, _CHAR)), re.M),
    "shell": re.compile("|".join((r"(?<![\w$])" + _HASH_COMMENT, _DQ, _SQ)), re.M),
    "ruby": re.compile("|".join((_HASH_COMMENT, _DQ, _SQ)), re.M),
    "php": re.compile("|".join((_C_COMMENTS, r"(?<![\w$])" + _HASH_COMMENT, _DQ, _SQ)), re.M),
    "lua": re.compile("|".join((r"--\[\[(?:[^\]]|\](?!\]))*+(?:\]\]|\Z)", r"--[^\n]*+", _DQ, _SQ)), re.M),
}

_I = r"[ \t]*+"
_MODS = r"(?:(?:public|private|protected|internal|static|final|abstract|sealed|open|override|virtual|async|"
_MODS += r"partial|extern|unsafe|synchronized|native|inline|suspend|data|export|default|readonly|const|new)\s++)*"
_NOT_CALLS = r"(?!(?:if|for|while|switch|catch|return|sizeof|else|do|new|throw|case|using|lock|foreach)\b)"
_DEFS: dict[str, tuple[tuple[str, str], ...]] = {
    "python": ((r"^" + _I + r"(?:async[ \t]+)?(?P<kw>def|class)[ \t]+(?P<name>\w+)", ""),),
    "javascript": (
        (r"^" + _I + r"(?:export\s++(?:default\s++)?)?(?:async\s++)?function\b\s*+\*?\s*+(?P<name>[\w$]+)", "function"),
        (
            r"^"
            + _I
            + r"(?:export\s++(?:default\s++)?)?(?:abstract\s++)?"
            + r"(?P<kw>class|interface|enum|namespace)\s++(?P<name>[\w$]+)",
            "",
        ),
        (
            r"^" + _I + r"(?:export\s++)?(?:const|let|var)\s++(?P<name>[\w$]+)\s*+(?::[^=\n]{0,80})?=\s*+(?:async\s++)?"
            r"(?:function\b|\([^()\n]{0,200}\)\s*+(?::[^=\n]{0,80})?=>|[\w$]+\s*+=>)",
            "function",
        ),
        (
            r"^"
            + _I
            + r"(?:(?:public|private|protected|static|async|get|set|readonly|override)\s++)*"
            + _NOT_CALLS
            + r"(?P<name>[\w$]+)\s*+(?:<[^>\n]{0,80}>)?\([^()]{0,400}\)\s*+(?::[^{;\n]{0,120})?\{",
            "function",
        ),
    ),
    "go": (
        (r"^func\s++(?:\([^)\n]{0,200}\)\s*+)?(?P<name>\w+)", "function"),
        (r"^type\s++(?P<name>\w+)\s++(?P<kw>struct|interface)\b", ""),
    ),
    "rust": (
        (
            r"^"
            + _I
            + r"(?:pub(?:\([^)\n]{0,40}\))?\s++)?(?:(?:async|const|unsafe|default)\s++)*(?:extern\s++(?:\s*+)?)?"
            r"fn\s++(?P<name>\w+)",
            "function",
        ),
        (
            r"^"
            + _I
            + r"(?:pub(?:\([^)\n]{0,40}\))?\s++)?(?:unsafe\s++)?(?P<kw>struct|enum|trait|union|mod)\s++(?P<name>\w+)",
            "",
        ),
        (
            r"^" + _I + r"(?:unsafe\s++)?(?P<kw>impl)\b(?:<[^{\n]{0,120}?>)?\s++(?:[\w:<>, &']{1,120}?\s++for\s++)?"
            r"(?P<name>[\w:]+)",
            "",
        ),
    ),
    "jvm": (
        (
            r"^"
            + _I
            + r"(?:@\w+(?:\([^)\n]{0,120}\))?\s++)*"
            + _MODS
            + r"(?P<kw>class|interface|enum|record|struct|object|trait|protocol|extension)\s++(?P<name>\w+)",
            "",
        ),
        (r"^" + _I + _MODS + r"(?:fun|func|def)\s++(?:<[^>\n]{0,80}>\s*+)?(?:[\w.]+\.)?(?P<name>`?\w+`?)", "function"),
        (
            r"^"
            + _I
            + _MODS
            + _NOT_CALLS
            + r"(?:[\w<>\[\],.?]{1,80}\s++){1,3}"
            + _NOT_CALLS
            + r"(?P<name>\w+)\s*+\([^;{}()]{0,400}\)\s*+(?:throws\s++[\w., ]{1,200})?\s*+(?:where\s[^{;]{0,120})?\{",
            "function",
        ),
    ),
    "c": (
        (
            r"^"
            + _I
            + r"(?:template\s*+<[^;{]{0,200}>\s*+)?(?:typedef\s++)?(?P<kw>struct|class|union|enum|namespace)\s++"
            r"(?:\w+\s++)?(?P<name>\w+)\s*+(?:final\s*+)?(?::[^;{]{0,200})?\{",
            "",
        ),
        (
            r"^"
            + _I
            + _NOT_CALLS
            + r"(?:[\w:*&<>,~]{1,80}+[ \t*&]++){0,4}+"
            + _NOT_CALLS
            + r"(?P<name>~?[\w:]{1,120})\s*+\([^;{}()]{0,400}(?:\([^;{}()]{0,200}\)[^;{}()]{0,200})*\)"
            r"\s*+(?:const|noexcept|override|final|\s|->\s*+[\w:<>*&]+){0,8}\s*+(?::[^;{]{0,400})?\{",
            "function",
        ),
    ),
    "shell": (
        (r"^" + _I + r"function\s++(?P<name>[\w.:-]+)", "function"),
        (r"^" + _I + r"(?P<name>[\w.:-]+)\s*+\(\s*+\)", "function"),
    ),
    "ruby": (
        (r"^" + _I + r"def\s++(?:self\.)?(?P<name>[\w?!=\[\]<>+*/%-]+)", "function"),
        (r"^" + _I + r"(?P<kw>class|module)\s++(?:<<\s*+)?(?P<name>[\w:]+)", ""),
    ),
    "php": (
        (r"^" + _I + _MODS + r"function\s++&?(?P<name>\w+)", "function"),
        (r"^" + _I + _MODS + r"(?P<kw>class|interface|trait|enum)\s++(?P<name>\w+)", ""),
    ),
    "lua": ((r"^" + _I + r"(?:local\s++)?function\s++(?P<name>[\w.:]+)", "function"),),
}
_COMPILED = {lang: tuple((re.compile(p, re.M), k) for p, k in defs) for lang, defs in _DEFS.items()}
_IMPORTS: dict[str, re.Pattern[str]] = {
    "python": re.compile(r"^(?:from\s++([\w.]+)\s++import|import\s++([\w.]+))", re.M),
    "javascript": re.compile(r"^[ \t]*import\b[^'\"\n]*['\"]([^'\"\n]+)|\brequire\(\s*+['\"]([^'\"\n]+)", re.M),
    "go": re.compile(r"^import\s++(?:\w+\s++)?\"([^\"\n]+)|^[ \t]+(?:\w+\s++)?\"([^\"\n]+)\"[ \t\r]*+$", re.M),
    "rust": re.compile(r"^[ \t]*(?:pub\s++)?use\s++([\w:]+)|^[ \t]*extern\s++crate\s++(\w+)", re.M),
    "jvm": re.compile(r"^[ \t]*(?:import|using)\s++(?:static\s++)?([\w.*]+)|^[ \t]*package\s++([\w.]+)", re.M),
    "c": re.compile(r"^[ \t]*#\s*+include\s*+[<\"]([^>\"\n]+)|^[ \t]*(?:import|using\s++namespace)\s++([\w:]+)", re.M),
    "shell": re.compile(r"^[ \t]*(?:source|\.)\s++(\S+)|^(?!)(x)", re.M),
    "ruby": re.compile(r"^[ \t]*require(?:_relative)?\s*+\(?\s*+['\"]([^'\"\n]+)|^(?!)(x)", re.M),
    "php": re.compile(r"^[ \t]*use\s++([\w\\]+)|^[ \t]*(?:require|include)(?:_once)?\s*+\(?\s*+['\"]([^'\"\n]+)", re.M),
    "lua": re.compile(r"\brequire\s*+\(?\s*+['\"]([^'\"\n]+)|^(?!)(x)", re.M),
}
_SPACE_RUN = re.compile(r"[^\n]")


class _Def(NamedTuple):
    start: int
    end: int
    name: str
    kind: str


def language_of(name: str, head: str) -> str | None:
    """The language family of a file from its extension or its shebang, or None."""
    base = name.rsplit("/", 1)[-1]
    dot = base.rfind(".")
    if dot > 0 and base[dot:].lower() in LANGUAGES:
        return LANGUAGES[base[dot:].lower()]
    return shebang_language(head)


def shebang_language(head: str) -> str | None:
    """The family named by a ``#!`` line (``/usr/bin/env python3 -u`` -> python)."""
    if not head.startswith("#!"):
        return None
    words = head[2:].split("\n", 1)[0].split()
    if not words:
        return None
    program = words[0].rsplit("/", 1)[-1]
    if program == "env":
        rest = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        program = rest[0] if rest else ""
    return INTERPRETERS.get(program) or INTERPRETERS.get(program.rstrip("0123456789.").rstrip("-"))


def mask(text: str, language: str) -> str:
    """``text`` with comments and string literals blanked (same length, same newlines)."""
    return _MASKS[language].sub(lambda m: _SPACE_RUN.sub(" ", m.group()), text)


def heuristic_index(text: str, language: str, flags: tuple[str, ...]) -> SymbolIndex:
    """Symbols of ``text`` found by regexes over its masked form."""
    masked = mask(text, language)
    starts = _line_starts(text)
    defs = _definitions(masked, language)
    if language in _INDENTED:
        spans = _indent_ends(masked, text, starts, defs, ruby_like=language != "python")
    else:
        spans = _brace_ends(masked, defs)
    rows = []
    for d, end in zip(defs, spans, strict=True):
        line = _line_of(starts, d.start)
        last = max(line, _line_of(starts, max(d.start, end - 1)))
        signature = " ".join(text[starts[line - 1] : _signature_end(masked, d.end)].split()).rstrip("{ ")
        first = _decorated_from(masked, starts, line) if language == "python" else line
        rows.append((d.name, d.kind, signature, first, line, last))
    more = (f"symbols-truncated: first {MAX_SYMBOLS:,} kept",) if len(rows) > MAX_SYMBOLS else ()
    return SymbolIndex(nest(rows), "heuristic", _imports(masked, text, language), "", (*flags, *more))


def _definitions(masked: str, language: str) -> list[_Def]:
    """Definition matches of every pattern, in order, one per line start."""
    found: dict[int, _Def] = {}
    for pattern, kind in _COMPILED[language]:
        for m in pattern.finditer(masked):
            keyword = m.groupdict().get("kw") or ""
            k = keyword if keyword in CONTAINER_KINDS else (kind or "function")
            found.setdefault(m.start(), _Def(m.start(), m.end(), m.group("name"), k))
            if len(found) > MAX_SYMBOLS:
                break
    return [found[at] for at in sorted(found)]


def _decorated_from(masked: str, starts: list[int], line: int) -> int:
    """The first line of the decorators right above a Python ``def``/``class`` line (at most 50)."""
    first = line
    while first > 1 and line - first < 50:
        above = masked[starts[first - 2] : starts[first - 1]].strip()
        if not above.startswith("@"):
            break
        first -= 1
    return first


def _signature_end(masked: str, end: int) -> int:
    """Where a signature shown in the outline ends: its line, or its '{' if sooner."""
    line_end = masked.find("\n", end)
    line_end = len(masked) if line_end < 0 else line_end
    brace = masked.find("{", end, line_end)
    return min(line_end, brace if brace >= 0 else line_end, end + 400)


def _brace_ends(masked: str, defs: list[_Def]) -> list[int]:
    """Each definition's end: just past the '}' matching its first '{' (none: its line end)."""
    pairs = _brace_pairs(masked)
    ends = []
    for i, d in enumerate(defs):
        limit = min(len(masked), d.end + BRACE_WINDOW, defs[i + 1].start if i + 1 < len(defs) else len(masked))
        brace = masked.find("{", d.start, limit)
        semi = masked.find(";", d.end, brace if brace >= 0 else limit)
        if brace >= 0 and semi < 0:
            ends.append(pairs.get(brace, len(masked)) + 1)
        else:
            stop = semi if semi >= 0 else masked.find("\n", d.end)
            ends.append(len(masked) if stop < 0 else stop + 1)
    return ends


def _brace_pairs(masked: str) -> dict[int, int]:
    """Offset of each '{' -> offset of its matching '}' (unmatched ones are left out)."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for m in re.finditer(r"[{}]", masked):
        if m.group() == "{":
            stack.append(m.start())
        elif stack:
            pairs[stack.pop()] = m.start()
    return pairs


def _indent_ends(masked: str, text: str, starts: list[int], defs: list[_Def], ruby_like: bool) -> list[int]:
    """Ends of indentation blocks: a definition closes at the next non-blank line indented
    no deeper (taken along when it is Ruby's or Lua's ``end``). Lines inside a string or
    comment never close a block, but one can be a block's last line (a docstring)."""
    ends = [len(masked)] * len(defs)
    open_: list[tuple[int, int]] = []  # (definition, indent)
    by_line = {_line_of(starts, d.start): i for i, d in enumerate(defs)}
    last_code = 0
    for number, line in _lines(masked, starts):
        stripped = line.strip()
        if not stripped:
            original = text[starts[number - 1] : starts[number - 1] + len(line)].strip()
            if original and not original.startswith(("#", "--")):  # in a string, not a comment
                last_code = number
            continue
        indent = len(line) - len(line.lstrip())
        while open_ and indent <= open_[-1][1] and stripped[0] not in ")]}":  # ')' ends a def's header
            i, _ = open_.pop()
            closing = ruby_like and (stripped == "end" or stripped.startswith(("end ", "end)", "end;", "end,")))
            ends[i] = _line_end(masked, starts, number if closing else last_code)
            if closing:
                break
        if number in by_line:
            open_.append((by_line[number], indent))
        last_code = number
    return ends


def _lines(text: str, starts: list[int]) -> Iterator[tuple[int, str]]:
    for number, start in enumerate(starts, 1):
        end = starts[number] - 1 if number < len(starts) else len(text)
        yield number, text[start:end]


def _line_end(text: str, starts: list[int], number: int) -> int:
    number = max(1, number)
    return starts[number] - 1 if number < len(starts) else len(text)


def _line_starts(text: str) -> list[int]:
    return [0, *(m.end() for m in re.finditer("\n", text) if m.end() < len(text))]


def _line_of(starts: list[int], offset: int) -> int:
    from bisect import bisect_right

    return max(1, bisect_right(starts, offset))


def _imports(masked: str, text: str, language: str) -> tuple[str, ...]:
    """Imported modules, from import lines (strings read from the original text)."""
    pattern = _IMPORTS[language]
    found: list[str] = []
    source = text if language in ("javascript", "go", "c", "ruby", "php", "lua", "shell") else masked
    for m in pattern.finditer(source):
        if masked[m.start() : m.start() + 1].isspace() and not source[m.start()].isspace():
            continue  # the line is inside a comment or a string
        found.append(next(g for g in m.groups() if g))
        if len(found) >= 200:
            break
    return tuple(dict.fromkeys(found))
