"""Every `sparsefs` command appears in --help and the README, and some test runs it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from sparsefs.app.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]


def commands() -> list[str]:
    sub = next(action for action in build_parser()._actions if action.dest == "command")
    assert isinstance(sub.choices, dict)
    return sorted(sub.choices)


def _invoked(command: str, tests: str) -> bool:
    """A test runs the command: through the CLI module, a helper named after it, or the console script."""
    patterns = (rf'"-m", "sparsefs", "{command}"', rf'run_cli\(\s*"{command}"', rf'sparsefs\(\s*"{command}"',
                rf'run_{command}\(', rf'main\(\[\s*"{command}"', rf'"sparsefs", "{command}"')
    return any(re.search(pattern, tests) for pattern in patterns)


def test_every_command_is_in_help_and_readme() -> None:
    help_text = subprocess.run([sys.executable, "-m", "sparsefs", "--help"], capture_output=True, text=True,
                               timeout=60, check=True).stdout
    readme = (ROOT / "README.md").read_text()
    missing = [c for c in commands() if not re.search(rf"\b{c}\b", help_text) or f"sparsefs {c}" not in readme]
    assert not missing, f"undocumented commands (add them to --help and the README): {missing}"


def test_every_command_has_a_test() -> None:
    tests = "\n".join(path.read_text() for path in sorted((ROOT / "tests").rglob("test_*.py")))
    untested = [command for command in commands() if not _invoked(command, tests)]
    assert not untested, f"commands no test runs: {untested}"
