"""What ``sparsefs demo`` says besides the commands it runs: the pack header explained field by field (from
the header it just printed), the saving in one sentence, and what to try next.

The header's layout is :func:`sparsefs.protocol.pack_text._sparse_header`'s (docs/SEMANTICS.md, "Virtual
paths", Accounting): ``NAME@ACTION EPISODE VERSION · SCOPE · E n/L n[ · COVERAGE][ · FLAGS]``.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from sparsefs.app.report import headline, load

_DOCS = Path(__file__).resolve().parents[2] / "docs"


def _prog() -> str:
    """How to run sparsefs from here: the bare name when it is on PATH, else this install's own script."""
    if shutil.which("sparsefs"):
        return "sparsefs"
    script = Path(sys.executable).parent / "sparsefs"
    return str(script) if script.exists() else f"{sys.executable} -m sparsefs"


PROG = _prog()


def legend(header: str) -> str:
    """Each field of a compact pack header, said once, with the values of ``header``."""
    fields = header.split(" · ")
    head = fields[0].split()
    if len(fields) < 3 or len(head) < 2 or not fields[2].startswith("E "):
        return "\n# (the pack's first line is its header: see docs/SEMANTICS.md, 'Virtual paths')"
    name, version, episode = head[0], head[-1], head[1] if len(head) > 2 else ""
    exposed, _, length = fields[2][2:].partition("/L ")
    lines = ["", "# The pack's first line is its header. Field by field:",
             f"#   {name}: the file and what was asked of it (@intent: passages for the words after '=')"]
    if episode:
        lines.append(f"#   {episode}: the episode, this file's reading session: refines, focuses and a fallback "
                     "to the whole file share it and its budget")
    lines += [f"#   {version}: the file's version (its content fingerprint): a changed file gets a new one",
              f"#   {fields[1]}: what was searched (units of the file, and the method that ranked them)",
              f"#   E {exposed}: characters the agent has read in this episode so far, this pack included",
              f"#   L {length}: characters of the whole file's text, what a full read costs. E stays below L; "
              "a read that would pass it gets the whole file once instead, so an episode never costs more than "
              "2 x L"]
    lines += _coverage(fields[3:])
    return "\n".join(lines)


def _coverage(rest: list[str]) -> list[str]:
    if rest:
        return [f"#   {rest[0]}: whether the need was found: matched, candidate (best passages, not certain) or "
                "unresolved (not found); then any flags"]
    return ["#   (several needs: each gets a coverage line under the passages, '1. need: matched L65-67'; "
            "matched, candidate = best passages, not certain, unresolved = not found)"]


def closing(log: Path, workspace: Path) -> str:
    """The saving the demo's reads made, counted from its pack log, then what to try next."""
    totals = load(log).totals()
    return "\n".join(["", "# What it saved", headline(totals), "", *next_steps(workspace)])


def next_steps(workspace: Path) -> list[str]:
    """Mount your own folder, connect an agent: the exact commands, and where the docs are."""
    agents = _DOCS / "agents" / "README.md"
    where = str(agents) if agents.exists() else "docs/agents/README.md in the SparseFS checkout"
    return [
        "# Next: try it on your own folder",
        f"  {PROG} mount ~/project                    # in place: every program sees it at its own path",
        f"  mkdir -p ~/view && {PROG} mount ~/project ~/view   # or a mirror at an empty folder",
        "  cat ~/project/'report.pdf@intent=what you are looking for'",
        f"  {PROG} stats ~/project                    # what it saved",
        f"  {PROG} umount ~/project",
        "# Connect an agent (Claude Code, Codex, any MCP host):",
        f"  {where}; the agent's own guide: {PROG} skill",
        f"# (the sample at {workspace} is unmounted and removed as the demo ends; --keep leaves it)",
    ]
