"""`sparsefs mcp` over stdio, driven by the MCP SDK's own client."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from sparsefs import Workspace, request_name
from sparsefs.app.cli import main
from sparsefs.app.mcp_server import MAX_RAW_BYTES, parse_range, raw_json, read_argument
from tests.conftest import is_pack

TOOLS = {"sro_preview", "sro_read", "sro_raw"}


def _text(result: Any) -> str:
    return "".join(part.text for part in result.content if part.type == "text")


async def _session(workspace: Path, state: Path) -> dict[str, Any]:
    params = StdioServerParameters(command=sys.executable, args=["-m", "sparsefs", "mcp", "--root", str(workspace),
                                                                 "--state-dir", str(state)])
    out: dict[str, Any] = {}
    async with Client(params, read_timeout_seconds=60) as client:
        out["tools"] = {tool.name: tool for tool in (await client.list_tools()).tools}
        out["preview"] = await client.call_tool("sro_preview", {"path": "annual-report.md"})
        out["read"] = await client.call_tool("sro_read", {"path": "annual-report.md", "mode": "intent",
                                                          "intent": "R&D expenses", "slots": ["headcount/staff"]})
        out["refine"] = await client.call_tool("sro_read", {"path": "annual-report.md", "mode": "refine",
                                                            "intent": "Kent operations center"})
        out["raw"] = await client.call_tool("sro_raw", {"path": "annual-report.md", "range": "2-12"})
        out["escape"] = await client.call_tool("sro_raw", {"path": "../outside.txt"})
        out["bad_mode"] = await client.call_tool("sro_read", {"path": "annual-report.md", "mode": "scout",
                                                              "intent": "x"})
        out["sum"] = await client.call_tool("sro_read", {"path": "sales.csv", "mode": "sum", "intent": "revenue",
                                                         "options": {"where": "region:EU"}})
    return out


def test_round_trip_over_stdio(workspace: Path, tmp_path: Path) -> None:
    (tmp_path / "outside.txt").write_text("TOP-SECRET")
    rows = [f"{'EU' if i % 2 else 'US'},{i},row {i} with some padding text" for i in range(300)]
    (workspace / "sales.csv").write_text("\n".join(["region,revenue,note", *rows]) + "\n")
    out = anyio.run(_session, workspace, tmp_path / "state")
    assert set(out["tools"]) >= TOOLS
    parameters = set(out["tools"]["sro_read"].input_schema["properties"])
    assert {"path", "mode", "intent", "slots", "scope", "options"} <= parameters
    preview = _text(out["preview"])  # the compact pack, as `cat` shows it
    assert preview.startswith("annual-report.md@scout ") and " · preview" in preview.split("\n", 1)[0]
    read = _text(out["read"])
    header = read.split("\n", 1)[0]
    assert is_pack(read) and header.startswith("annual-report.md@intent e") and "R&D expenses" in read
    assert "headcount/staff" in read  # a slot's coverage line: the '/' in a parameter is text
    assert _text(out["refine"]).split(" ")[1] == header.split(" ")[1]  # the same episode
    for key in ("preview", "read", "refine", "sum", "raw"):
        assert out[key].structured_content is None and len(out[key].content) == 1, key  # the text, once
    data = (workspace / "annual-report.md").read_bytes()
    raw = orjson.loads(_text(out["raw"]))
    assert raw == {"path": "annual-report.md", "range": [2, 12], "encoding": "utf-8",
                   "content": data[2:12].decode()}
    assert out["escape"].is_error and "TOP-SECRET" not in _text(out["escape"])
    assert out["bad_mode"].is_error and "takes no intent" in _text(out["bad_mode"])
    total = _text(out["sum"])  # an exact operation with its options
    assert "@sum e" in total.split("\n", 1)[0] and "sum(revenue) = 22,500" in total
    # the same pack as a read of the same name (frozen: byte for byte)
    name = request_name("annual-report.md", "intent", "R&D expenses; headcount/staff")
    same = Workspace(workspace, tmp_path / "state").read(name)
    assert same.text == read


async def _errors(workspace: Path, state: Path) -> dict[str, Any]:
    params = StdioServerParameters(command=sys.executable, args=["-m", "sparsefs", "mcp", "--root", str(workspace),
                                                                 "--state-dir", str(state)])
    calls = {
        "anchor": ("sro_read", {"path": "annual-report.md", "mode": "focus", "intent": "L99999"}),
        "typo": ("sro_read", {"path": "annual-report.md", "mode": "intnet", "intent": "R&D expenses"}),
        "binary": ("sro_preview", {"path": "blob.bin"}),
        "missing": ("sro_read", {"path": "nope.md", "intent": "x"}),
        "slash": ("sro_read", {"path": "annual-report.md", "intent": "revenue 2023/2022 &k=3&wher=x",
                               "slots": ["R&D/headcount"]}),
    }
    async with Client(params, read_timeout_seconds=60) as client:
        return {key: await client.call_tool(tool, arguments) for key, (tool, arguments) in calls.items()}


def test_errors_are_tool_errors_and_text_is_taken_literally(workspace: Path, tmp_path: Path) -> None:
    (workspace / "blob.bin").write_bytes(bytes(range(256)) * 64)
    out = anyio.run(_errors, workspace, tmp_path / "state")
    for key in ("anchor", "typo", "binary"):  # error packs: isError set, the error pack as the text
        assert out[key].is_error, key
        first, hint = _text(out[key]).splitlines()
        assert ": error: " in first and hint.startswith("try: ") and len(hint) > 5, key
    assert "did you mean @intent?" in _text(out["typo"])
    assert out["missing"].is_error
    read = out["slash"]  # '/', '&k=3' and a near-miss option in a parameter are text, never grammar
    assert not read.is_error, _text(read)
    pack = _text(read)
    assert is_pack(pack) and "revenue 2023/2022 &k=3&wher=x" in pack and "R&D/headcount" in pack


def test_ranges_and_arguments() -> None:
    assert parse_range(None) == (0, MAX_RAW_BYTES)
    assert parse_range("10-20") == (10, 20) and parse_range("5-") == (5, 5 + MAX_RAW_BYTES)
    assert parse_range("0-99999999") == (0, MAX_RAW_BYTES)
    for bad in ("-5", "a-b", "9-3"):
        with pytest.raises(Exception, match="range"):
            parse_range(bad)
    assert read_argument("intent", "revenue", ["margin", " "]) == "revenue; margin"
    assert read_argument("full", None, None) is None


def test_raw_text_cut_inside_a_character_is_shortened_not_base64() -> None:
    data = ("x" * 10 + "€").encode()  # the window ends 2 bytes into the 3-byte euro sign
    cut = orjson.loads(raw_json("a.txt", 100, data[:12]))
    assert cut == {"path": "a.txt", "range": [100, 110], "encoding": "utf-8", "content": "x" * 10}
    assert orjson.loads(raw_json("a.txt", 0, data))["content"] == "x" * 10 + "€"
    assert orjson.loads(raw_json("b.bin", 0, b"\xff\xfe\x00abc"))["encoding"] == "base64"


def test_without_the_mcp_extra_the_command_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)  # as if `pip install sparsefs` without [mcp]
    monkeypatch.setitem(sys.modules, "sparsefs.app.mcp_server", None)
    assert main(["mcp", "--root", "."]) == 2
    assert "pip install 'sparsefs[mcp]'" in capsys.readouterr().err
