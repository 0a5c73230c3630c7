"""Project rules that code review would otherwise have to remember."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("package", ["readers", "gate"])
def test_evidence_plane_and_gate_never_import_sparsefs(package: str) -> None:
    for path in (ROOT / package).rglob("*.py"):
        offenders = {m for m in imported_modules(path) if m == "sparsefs" or m.startswith("sparsefs.")}
        assert not offenders, f"{path} imports {offenders}"


def test_gate_does_no_io() -> None:
    for path in (ROOT / "gate").rglob("*.py"):
        assert not imported_modules(path) & {"os", "io", "pathlib", "subprocess", "socket", "shutil"}, path


def test_modules_stay_under_500_lines() -> None:
    for package in ("sparsefs", "readers", "gate"):
        for path in (ROOT / package).rglob("*.py"):
            assert len(path.read_text().splitlines()) <= 500, path


def test_no_test_changes_a_machine_wide_setting() -> None:
    """Tests share the machine with other suites: no test names a path under /proc/sys (reading a limit is
    the product's job: sparsefs.source.freshness), and none runs ``sysctl -w``. The watch-limit tests lowered
    fs.inotify.max_user_watches for the whole machine until issue 28; they inject the daemon's own limit now.
    /sys/fs/fuse/connections (mountutil's abort of a hung mount of our own) is this suite's own."""
    forbidden = re.compile(r"""["'](/proc/sys\b|/proc/sys/)|sysctl["', ]+-w""")
    offenders = [f"{path.name}:{n}" for path in sorted((ROOT / "tests").rglob("*.py")) if path != Path(__file__)
                 for n, line in enumerate(path.read_text().splitlines(), 1) if forbidden.search(line)]
    assert not offenders, offenders


def test_ruff_clean() -> None:
    result = subprocess.run([sys.executable, "-m", "ruff", "check", str(ROOT)], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_clean() -> None:
    result = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml")],
                            cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
