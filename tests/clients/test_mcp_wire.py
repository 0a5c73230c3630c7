"""What an MCP answer costs on the wire (issue 25.7): the JSON-RPC messages `sparsefs mcp` writes, captured between
the server and the MCP SDK's own client over stdio, against the packs they carry and what the stats count."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

MAX_RATIO = 1.3
MIN_PACK = 700  # below it the fixed envelope dominates (docs/BENCHMARKS.md, "Savings, the MCP wire, the live log")
MAX_ENVELOPE = 200  # the JSON-RPC envelope around the escaped text: ids, flags, the SDK's serverInfo stamp
RELAY = """
import subprocess, sys
wire = open(sys.argv[1], "wb")
server = subprocess.Popen(sys.argv[2:], stdout=subprocess.PIPE)
for line in server.stdout:
    wire.write(line)
    wire.flush()
    sys.stdout.buffer.write(line)
    sys.stdout.buffer.flush()
sys.exit(server.wait())
"""
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("sro_preview", {"path": "annual-report.md"}),
    ("sro_read", {"path": "annual-report.md", "intent": "R&D expenses 2023", "slots": ["headcount at year end"]}),
    ("sro_read", {"path": "annual-report.md", "mode": "refine", "intent": "Kent operations center"}),
    ("sro_read", {"path": "annual-report.md", "mode": "verify", "intent": "R&D expenses were $48.2 million"}),
    ("sro_read", {"path": "annual-report.md", "mode": "focus", "intent": "L60-90"}),
    ("sro_read", {"path": "sales.csv", "mode": "sum", "intent": "revenue", "options": {"by": "region"}}),
    ("sro_read", {"path": "notes.txt", "intent": "product sync decisions"}),  # the whole file: a native fit
    ("sro_read", {"path": "annual-report.md", "mode": "full"}),
    ("sro_read", {"path": "annual-report.md", "mode": "focus", "intent": "L99999"}),  # an error pack
]


async def _session(workspace: Path, state: Path, relay: Path, wire: Path) -> list[Any]:
    server = [sys.executable, "-m", "sparsefs", "mcp", "--root", str(workspace), "--state-dir", str(state)]
    params = StdioServerParameters(command=sys.executable, args=[str(relay), str(wire), *server])
    async with Client(params, read_timeout_seconds=60) as client:
        return [await client.call_tool(tool, arguments) for tool, arguments in CALLS]


def test_an_answer_is_the_pack_once_and_what_the_stats_count(workspace: Path, tmp_path: Path) -> None:
    rows = [f"{'EU' if i % 2 else 'US'},{i},row {i} with some padding text" for i in range(300)]
    (workspace / "sales.csv").write_text("\n".join(["region,revenue,note", *rows]) + "\n")
    relay, wire = tmp_path / "relay.py", tmp_path / "wire.jsonl"
    relay.write_text(RELAY)
    results = anyio.run(_session, workspace, tmp_path / "state", relay, wire)
    answers = [json.loads(line) for line in wire.read_bytes().splitlines()]
    answers = [(line, message["result"]) for line, message in zip(wire.read_text().splitlines(), answers, strict=True)
               if "content" in message.get("result", {})]
    assert len(answers) == len(CALLS) and results[-1].is_error and not any(r.is_error for r in results[:-1])
    logged = [json.loads(line) for line in (tmp_path / "state" / "log.jsonl").read_bytes().splitlines()]
    assert len(logged) == len(CALLS)
    ratios = []
    for (line, result), entry in zip(answers, logged, strict=True):
        (block,) = result["content"]  # the pack, once: no structured copy, no null field
        assert "structuredContent" not in result and "null" not in json.dumps({k: v for k, v in result.items()
                                                                                if k != "content"})
        text = block["text"]
        assert entry["exposed"] == len(text), entry["path"]  # what the agent reads is what is counted
        escaped = len(json.dumps(text, ensure_ascii=False))
        assert len(line) - escaped <= MAX_ENVELOPE, (entry["path"], len(line), escaped)
        if len(text) >= MIN_PACK:
            ratios.append(len(line) / len(text))
            assert len(line) <= MAX_RATIO * len(text), (entry["path"], len(line), len(text))
    assert len(ratios) >= 6, ratios
