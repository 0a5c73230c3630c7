"""``sparsefs mcp``: the read tools over MCP (stdio), for hosts where FUSE is not available.

Three tools, shaped after the paper's reference tools, each a thin wrapper over
:class:`sparsefs.app.api.Workspace` (so the grammar, Protocol, Readers, Gate and
episode state are the mount's, and a running mount of the root is read through):

* ``sro_preview(path)`` — the bounded Object Preview (``@scout``);
* ``sro_read(path, mode, intent, slots, scope, options)`` — one protocol access;
  ``mode`` is a grammar action (intent, collect, refine, verify, focus, scout,
  full) or an exact operation (sum, count, path, filter...), whose options
  (where, by, sheet, k, budget...) go in ``options``;
* ``sro_raw(path, range)`` — original bytes, at most :data:`MAX_RAW_BYTES` per call.

Preview and read return the compact EvidencePack, once, as the result's one text
block: exactly the bytes ``cat 'PATH@...'`` returns in a mount, and exactly what
the stats and the episode's E count (an agent reads what the tool returns). No
structured copy rides along: the pack's header already carries its episode,
fingerprint, decision, E and L, and every host shows the text to the model
(issue 25.7: the pretty JSON pack, nulls included, sent twice — as text and as
``structuredContent`` — cost 6,600 characters on the wire for a pack counted as
1,200). An answer is at most 1.3x its pack on the wire for packs of 700
characters or more; below that the JSON-RPC envelope (about 190 characters,
the SDK's ``serverInfo`` stamp included) dominates (docs/BENCHMARKS.md). A
request that fails (a missing file, a bad anchor, a Reader that cannot read
the file: an error pack) is a tool error — the result's ``isError`` flag is
set — whose text is that error pack (what was wrong, and after ``try:`` what to
ask instead). The intent, slots
and options are parameters, taken literally: a '/' or '&' in them never matters
(``sparsefs.app.api.request_name`` encodes them). Each call takes the state directory's lock
(and opens the state database) only while it runs, so a mount of the same
source can start between calls; parsed artifacts and their indexes stay in
memory across calls (``Workspace(keep_warm=True)``), as in a mount.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from typing import TypeVar

import orjson
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, ContentBlock, TextContent

from readers.actions import Argument, named
from sparsefs.app.api import ReadFailed, Workspace

T = TypeVar("T")
MAX_RAW_BYTES = 1 << 20
_RANGE = re.compile(r"\s*(\d*)\s*-\s*(\d*)\s*")
_WITHOUT_ARGUMENT = named(argument=Argument.NONE)  # readers.actions: scout, full (and raw: sro_raw)
INSTRUCTIONS = (
    "Read workspace files as compact, source-anchored EvidencePacks instead of whole files. Start with "
    "sro_preview for an unknown file, then sro_read with mode='intent' and what you need (separate needs as "
    "slots); mode='refine' continues the same episode without repeating passages, 'verify' checks a claim, "
    "'focus' opens an anchor from a pack (p12, L120-180, #Heading, sheet:Sales, $.key), 'full' gives the faithful "
    "full view. sro_raw returns original bytes by range. Paths are relative to the workspace root."
)


def build_server(workspace: Workspace) -> MCPServer:
    """An MCP server whose tools read through ``workspace``."""
    server = MCPServer("sparsefs", instructions=INSTRUCTIONS, log_level="WARNING")

    @server.tool()
    def sro_preview(path: str) -> CallToolResult:
        """The Object Preview of a file or folder: size, outline, first lines, as a compact EvidencePack."""
        return _evidence(lambda: workspace.preview(path).text)

    @server.tool()
    def sro_read(
        path: str,
        mode: str = "intent",
        intent: str | None = None,
        slots: list[str] | None = None,
        scope: str | None = None,
        options: dict[str, str] | None = None,
    ) -> CallToolResult:
        """One read of the Read Intent Protocol; returns the compact EvidencePack (header, anchored passages,
        coverage, next steps).

        mode: intent | collect | refine | verify | focus | scout | full, or an exact operation (sum, count, ...).
        intent: what you need (for focus: the anchor; for verify: the claim).
        slots: separate needs, each answered with its own coverage line.
        scope: restrict where evidence may come from (p10-20, L1-400, a sheet, a key path).
        options: more grammar options, e.g. {"where": "region:EU", "by": "region", "sheet": "Sales", "k": "3",
        "budget": "2000"} (exact operations take theirs here).
        """
        argument = read_argument(mode, intent, slots)
        merged: dict[str, str | int] = {**(options or {}), **({"scope": scope} if scope else {})}
        return _evidence(lambda: workspace.ask(path, mode, argument, options=merged).text)

    @server.tool()
    def sro_raw(path: str, range: str | None = None) -> CallToolResult:
        """Original bytes of a file: range 'START-END' (bytes, end exclusive) or 'START-'.

        Returns JSON: path, range, encoding ('utf-8' or 'base64' for binary) and content; 1 MiB at most per call.
        """
        start, end = parse_range(range)
        data = _pack(lambda: workspace.raw(path, start, end))
        return CallToolResult(content=[TextContent(type="text", text=raw_json(path, start, data))])

    return server


def read_argument(mode: str, intent: str | None, slots: list[str] | None) -> str | None:
    """The grammar argument: the intent, then each slot, separated by ';' (one need each)."""
    needs = [text.strip() for text in [intent or "", *(slots or [])] if text and text.strip()]
    if mode in _WITHOUT_ARGUMENT and needs:
        raise ToolError(f"mode {mode!r} takes no intent or slots")
    return "; ".join(needs) or None


def parse_range(text: str | None) -> tuple[int, int]:
    """'START-END' / 'START-' as a half-open byte span of at most MAX_RAW_BYTES."""
    if not text:
        return 0, MAX_RAW_BYTES
    match = _RANGE.fullmatch(text)
    if match is None or not match[1]:
        raise ToolError(f"range {text!r}: write START-END or START- (bytes, end exclusive)")
    start = int(match[1])
    end = int(match[2]) if match[2] else start + MAX_RAW_BYTES
    if end < start:
        raise ToolError(f"range {text!r}: END is before START")
    return start, min(end, start + MAX_RAW_BYTES)


def raw_json(path: str, start: int, data: bytes) -> str:
    """The bytes as JSON: UTF-8 text when they are (a character cut by the window's end is left to the next
    call, and the range says so), else base64."""
    text = utf8_prefix(data)
    if text is not None:
        content, encoding, length = text, "utf-8", len(text.encode())
    else:
        content, encoding, length = base64.b64encode(data).decode(), "base64", len(data)
    span = [start, start + length]
    return orjson.dumps({"path": path, "range": span, "encoding": encoding, "content": content}).decode()


def utf8_prefix(data: bytes) -> str | None:
    """``data`` as text, less an incomplete character at its very end; None when it is not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        if err.reason != "unexpected end of data" or err.start == 0 or len(data) - err.start > 3:
            return None
        return data[: err.start].decode("utf-8")  # the first error is the cut: all before it decodes


def _pack(read: Callable[[], T]) -> T:
    try:
        return read()
    except (ReadFailed, OSError, TimeoutError) as err:
        raise ToolError(str(err)) from None


def _evidence(read: Callable[[], str]) -> CallToolResult:
    """The compact pack as the result's one text block; an error pack sets ``isError``, so a client never takes
    it for evidence (its text is still the error pack: the message, and what to ask instead)."""
    text = _pack(read)
    content: list[ContentBlock] = [TextContent(type="text", text=text)]
    return CallToolResult(content=content, is_error=is_error_pack(text))


def is_error_pack(text: str) -> bool:
    """Whether ``text`` is a compact error pack: its first line is ``NAME: error: ...``
    (sparsefs.protocol.pack_text), the next ``try: ...``."""
    first, _, rest = text.partition("\n")
    return ": error: " in first and rest.startswith("try: ")


def run_stdio(root: str, state_dir: str | None, cache: str | None = None) -> int:
    """Serve on stdin/stdout until the client closes the connection (parses over the shared ``cache`` if given)."""
    workspace = Workspace(root, state_dir, keep_warm=True, cache=cache)
    try:
        build_server(workspace).run("stdio")
    finally:
        workspace.close()
    return 0
