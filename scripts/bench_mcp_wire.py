#!/usr/bin/env python3
"""What an MCP answer costs on the wire, before and after issue 25.7.

For each revision (a snapshot of its committed packages, imported ahead of the editable install), `sparsefs
mcp` runs behind a relay that copies every JSON-RPC message it writes to a file, and the MCP SDK's own client
makes the calls of tests/clients/test_mcp_wire.py over stdio on the demo workspace. Per answer: the message's characters
on the wire, the characters of the text it carries, what the log counted (``exposed``), the pack's size as the
Gate counts it (the compact text; the JSON pack's ``exposure.pack_chars`` before), and wire / pack.

    .venv/bin/python scripts/bench_mcp_wire.py --revs 6d5ab4e,HEAD
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO))
from bench_fuse import snapshot_dir  # noqa: E402

from tests.clients.test_mcp_wire import CALLS, RELAY  # noqa: E402

DEMO = REPO / "sparsefs" / "demo"


async def _calls(workspace: Path, state: Path, relay: Path, wire: Path, code: Path) -> None:
    server = [sys.executable, "-m", "sparsefs", "mcp", "--root", str(workspace), "--state-dir", str(state)]
    params = StdioServerParameters(command=sys.executable, args=[str(relay), str(wire), *server],
                                   env=dict(os.environ) | {"PYTHONPATH": str(code)}, cwd="/")
    async with Client(params, read_timeout_seconds=120) as client:
        for tool, arguments in CALLS:
            await client.call_tool(tool, arguments)


def measure(rev: str) -> list[dict[str, Any]]:
    _, code = snapshot_dir(rev)
    with tempfile.TemporaryDirectory(prefix="sparsefs-mcp-wire-") as tmp:
        work = Path(tmp)
        shutil.copytree(DEMO, work / "ws")
        rows = [f"{'EU' if i % 2 else 'US'},{i},row {i} with some padding text" for i in range(300)]
        (work / "ws" / "sales.csv").write_text("\n".join(["region,revenue,note", *rows]) + "\n")
        (work / "relay.py").write_text(RELAY)
        anyio.run(_calls, work / "ws", work / "state", work / "relay.py", work / "wire.jsonl", code)
        lines = (work / "wire.jsonl").read_text().splitlines()
        logged = [json.loads(line) for line in (work / "state" / "log.jsonl").read_text().splitlines()]
    answers = [(line, json.loads(line)["result"]) for line in lines if '"content"' in line and '"result"' in line]
    out = []
    for (line, result), entry in zip(answers, logged, strict=True):
        text = result["content"][0]["text"]
        pack = json.loads(text)["exposure"]["pack_chars"] if text.startswith("{") else len(text)
        out.append({"call": entry["path"], "wire": len(line), "text": len(text), "counted": entry["exposed"],
                    "pack": pack, "structured": "structuredContent" in result})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--revs", default="6d5ab4e,HEAD")
    args = parser.parse_args()
    for rev in args.revs.split(","):
        rows = measure(rev)
        print(f"\n{rev}\n\n| call | wire | text | counted | pack (E) | wire / pack | structured copy |")
        print("|---|---:|---:|---:|---:|---:|---|")
        for r in rows:
            print(f"| `{r['call'][:60]}` | {r['wire']:,} | {r['text']:,} | {r['counted']:,} | {r['pack']:,} | "
                  f"{r['wire'] / r['pack']:.2f} | {'yes' if r['structured'] else 'no'} |")
        big = [r["wire"] / r["pack"] for r in rows if r["pack"] >= 700]
        print(f"\nmedian wire/pack {statistics.median(r['wire'] / r['pack'] for r in rows):.2f}; "
              f"max over packs of 700+ chars {max(big):.2f}; wire total {sum(r['wire'] for r in rows):,} for packs "
              f"of {sum(r['pack'] for r in rows):,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
