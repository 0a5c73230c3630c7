"""Every command the README shows is run here, as a newcomer would run it (issue 28).

The README's code blocks are read from the file itself, never copied: a command edited there is the command
run here. Each block is run by bash in a sandbox (a temporary ``$HOME`` holding ``~/ws``, a workspace with one
file of each kind the README reads; the working directory is the checkout, as after ``bash scripts/setup``),
with ``.venv/bin`` first on the path as ``source .venv/bin/activate`` puts it. Claude Code is the real CLI
(scripts/setup installs it in ``.venv/node``); Codex's configuration and any MCP host's are started exactly as
they would start them, by the MCP SDK's client. The two set-up commands are CI's own (``.ci/run``) and the demo
(tests/clients/test_cli.py). A block that no rule here runs fails the test.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path

import anyio
import openpyxl
import pymupdf
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from sparsefs.fuse import mounts

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
CLAUDE = ROOT / ".venv" / "node" / "node_modules" / ".bin" / "claude"
SECTION = re.compile(r"^## (.+)$", re.M)


def blocks() -> dict[str, list[str]]:
    """Each README section's code: indented blocks as shell lines, fenced ones whole."""
    found: dict[str, list[str]] = {}
    for title, body in _sections():
        code = [m.group(0) for m in re.finditer(r"```\w*\n.*?```", body, re.S)]
        plain = re.sub(r"```\w*\n.*?```", "", body, flags=re.S)
        indented = re.findall(r"(?:^(?: {4}.*)?\n)*?((?:^ {4}\S.*\n)+)", plain, re.M)
        found[title] = code + [line[4:] for chunk in indented for line in chunk.splitlines()]
    return found


def _sections() -> Iterator[tuple[str, str]]:
    marks = list(SECTION.finditer(README))
    yield "intro", README[: marks[0].start()]
    for mark, after in zip(marks, [*marks[1:], None], strict=True):
        yield mark.group(1), README[mark.end() : after.start() if after else len(README)]


def _commands(lines: list[str]) -> list[str]:
    return [line for line in lines if not line.startswith(("```", "annual-report.md@", "[L", "1. ", "2. ", "next:"))]


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    """A newcomer's $HOME with ``~/ws``: the demo's files and one of each other kind the README reads."""
    home = tmp_path / "home"
    ws = home / "ws"
    shutil.copytree(ROOT / "sparsefs" / "demo", ws)
    _fill(ws)
    try:
        yield home
    finally:
        for mnt in (home / "view", ws):
            if mounts.is_sparsefs_mount(mnt):
                subprocess.run(["fusermount3", "-u", "-z", str(mnt)], timeout=30, check=False)


def _fill(ws: Path) -> None:
    doc = pymupdf.open()
    doc.new_page().insert_text((72, 72), "Item 8. Financial statements\nTotal revenue was $4.2 billion in 2023.")
    doc.save(ws / "filing.pdf")
    (ws / "sales.csv").write_text("region,revenue\nEU,10\nUS,5\nEU,7\n")
    book = openpyxl.Workbook()
    sheet = book.active
    assert sheet is not None
    sheet.title = "Sales"
    for row in (("Item", "Total"), ("a", 3), ("b", 9)):
        sheet.append(row)
    book.save(ws / "book.xlsx")
    (ws / "api.json").write_text(json.dumps({"items": [{"id": i, "state": "open"} for i in range(3)]}))
    (ws / "app.log").write_text("".join(f"2024-01-0{i} 10:00:00 {lvl} request {i}\n"
                                        for i, lvl in enumerate(("INFO", "ERROR", "INFO"), 1)))
    (ws / "src" / "app.py").write_text("class Client:\n    def send(self, data):\n        return len(data)\n")
    (ws / "page.html").write_text("<html><body><nav>menu</nav><main><h1>Install</h1><p>Run it.</p></main></body>")
    (ws / "docs").mkdir()
    (ws / "docs" / "policy.md").write_text("# Retention\n\nLogs are kept for 30 days, then deleted.\n")


def bash(script: str, home: Path, cwd: Path = ROOT, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """``script`` as a newcomer's shell runs it: their $HOME, the activated virtualenv, Claude Code on PATH."""
    path = f"{ROOT / '.venv' / 'bin'}:{CLAUDE.parent}:{os.environ['PATH']}"
    env = {**os.environ, "HOME": str(home), "PATH": path, "VIRTUAL_ENV": str(ROOT / ".venv")}
    return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


def test_the_two_commands_are_what_ci_and_the_demo_run() -> None:
    two = blocks()["Two commands"]
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert two[0] == "bash scripts/setup && .venv/bin/sparsefs demo"  # run by tests/clients/test_cli.py's demo test
    assert two[1] == ci == "bash scripts/setup && .venv/bin/python -m pytest"
    assert two[2] == "source .venv/bin/activate" and len(two) == 3


def test_activating_the_virtualenv_puts_sparsefs_on_the_path(home: Path) -> None:
    done = bash("source .venv/bin/activate && command -v sparsefs", home)
    assert done.returncode == 0 and done.stdout.strip() == str(ROOT / ".venv" / "bin" / "sparsefs")


def test_mount_commands(home: Path) -> None:
    done = bash("\n".join(_commands(blocks()["Mount a workspace"])), home)
    assert done.returncode == 0, done.stderr
    assert "mounted" in done.stdout and not mounts.is_sparsefs_mount(home / "ws")


def test_every_read_example_answers_a_pack(home: Path) -> None:
    assert bash("sparsefs mount ~/ws", home).returncode == 0
    try:
        for line in _commands(blocks()["Read sparsely"]):
            done = bash(line, home, cwd=home / "ws")
            assert done.returncode == 0 and done.stdout.strip(), (line, done.stderr)
            header = done.stdout.splitlines()[0]
            assert "error" not in header and "did you mean" not in done.stdout, (line, done.stdout[:400])
    finally:
        bash("sparsefs umount ~/ws", home)


def test_the_pack_shown_is_the_pack_served(home: Path) -> None:
    """The README's example pack is real: its header and coverage lines are what the demo file gets."""
    shown = blocks()["Reading a pack"]
    done = bash("sparsefs read 'annual-report.md@intent=R&D expenses 2023; headcount at year end'", home,
                cwd=home / "ws")
    assert done.returncode == 0, done.stderr
    served = done.stdout.splitlines()
    assert served[0] == shown[0]
    for line in shown[2:]:
        assert line in served, line
    assert served[1].startswith(shown[1].removesuffix(" ..."))


def test_claude_code_set_up(home: Path) -> None:
    commands = _commands(blocks()["Connect an agent"])
    mcp = [line for line in commands if line.startswith("claude ")]
    done = bash("\n".join(mcp), home)
    assert done.returncode == 0, done.stderr
    assert re.search(r"sparsefs: .*sparsefs mcp --root .*ws - . Connected", done.stdout), done.stdout
    _mounted_with_guard(home, [line for line in commands if "CLAUDE.md" in line or "guard-comm claude" in line],
                        "CLAUDE.md")


def test_codex_set_up(home: Path) -> None:
    commands = _commands(blocks()["Connect an agent"])
    done = bash("\n".join(line for line in commands if ".codex" in line), home)
    assert done.returncode == 0, done.stderr
    server = tomllib.loads((home / ".codex" / "config.toml").read_text())["mcp_servers"]["sparsefs"]
    assert "pack" in anyio.run(_ask, server["command"], server["args"], home)
    _mounted_with_guard(home, [line for line in commands if "AGENTS.md" in line or "guard-comm codex" in line],
                        "AGENTS.md")


def test_any_mcp_host_configuration(home: Path) -> None:
    (fenced,) = [line for line in blocks()["Connect an agent"] if line.startswith("```json")]
    text = fenced.removeprefix("```json").removesuffix("```")
    text = text.replace("/path/to/checkout", str(ROOT)).replace("/path/to/ws", str(home / "ws"))
    server = json.loads(text)["mcpServers"]["sparsefs"]
    assert "pack" in anyio.run(_ask, server["command"], server["args"], home)


def test_what_it_saved_commands(home: Path) -> None:
    assert bash("sparsefs mount ~/ws && cat ~/ws/'annual-report.md@intent=headcount'", home).returncode == 0
    try:
        done = bash("\n".join(_commands(blocks()["What it saved"])), home)
        assert done.returncode == 0, done.stderr
        assert (home / "report" / "index.html").is_file()
    finally:
        bash("sparsefs umount ~/ws", home)


def test_clean_up_commands(home: Path) -> None:
    assert bash("sparsefs read 'annual-report.md@intent=headcount'", home, cwd=home / "ws").returncode == 0
    cache = home / ".cache" / "sparsefs"
    assert any(cache.iterdir())
    done = bash("\n".join(_commands(blocks()["Clean up"])), home)
    assert done.returncode == 0, done.stderr
    assert not cache.exists() or not any(cache.iterdir())


def test_every_code_block_is_run_here() -> None:
    covered = {"intro", "Two commands", "Mount a workspace", "Read sparsely", "Reading a pack",
               "Connect an agent", "What it saved", "Clean up"}
    assert {title for title, lines in blocks().items() if lines} == covered


def _mounted_with_guard(home: Path, lines: list[str], snippet: str) -> None:
    assert len(lines) == 2
    done = bash("\n".join(lines), home)
    try:
        assert done.returncode == 0, done.stderr
        assert (home / "ws" / snippet).read_text() == (ROOT / "docs" / "agents" / snippet).read_text()
        assert mounts.is_sparsefs_mount(home / "ws")
    finally:
        bash("sparsefs umount ~/ws", home)


async def _ask(command: str, args: list[str], home: Path) -> str:
    """Start the server as a host would and read one pack through it; its text with a marker."""
    params = StdioServerParameters(command=command, args=args, env={**os.environ, "HOME": str(home)}, cwd="/")
    async with Client(params, read_timeout_seconds=120) as client:
        result = await client.call_tool("sro_read", {"path": "annual-report.md", "mode": "intent",
                                                     "intent": "headcount at year end"})
    text = "".join(part.text for part in result.content if part.type == "text")
    return "pack" if not result.is_error and text.startswith("annual-report.md@intent") else text

