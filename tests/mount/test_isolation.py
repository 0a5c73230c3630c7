"""Nothing planted in a workspace runs (issue 24, item 1): every surface started from inside a planted corpus.

The corpus shadows our own packages (``sparsefs/__main__.py``, ``readers``, ``gate``), the libraries our
Readers import lazily (``pymupdf``, ``fitz``, ``openpyxl``, ``bm25s``, ``Stemmer``) or at start (``xxhash``,
``orjson``, ``pydantic``, ``mfusepy``), and Python's own hooks (``sitecustomize``, ``usercustomize``,
a ``.pth``). Each planted module writes a marker file when executed; every test asserts no marker appears
while SparseFS mounts (in place and mirror, both backends), serves packs that need those lazy imports,
reads (``sparsefs read``), answers MCP and runs the demo, each started with the workspace as its working
directory.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import openpyxl
import pymupdf
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from sparsefs.app import isolation
from sparsefs.fuse import mounts
from tests.mountutil import backend_args

SPARSEFS = str(Path(sys.executable).with_name("sparsefs"))
PLANTED_MODULES = ("xxhash", "orjson", "pydantic", "mfusepy", "pymupdf", "fitz", "openpyxl", "bm25s", "Stemmer",
                   "sitecustomize", "usercustomize", "numpy")
PLANTED_PACKAGES = ("sparsefs", "readers", "gate", "sparsefs/app")


def _plant(code: str, marks: Path, what: str) -> str:
    return f"open({str(marks / what)!r} + '-' + str(__import__('os').getpid()), 'w').write('ran')\n{code}"


@pytest.fixture
def planted(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(workspace, marker directory): a workspace whose every planted module leaves a marker if run."""
    marks = tmp_path / "marks"
    marks.mkdir()
    ws = tmp_path / "ws"
    ws.mkdir()
    for name in PLANTED_MODULES:
        (ws / f"{name}.py").write_text(_plant("", marks, name))
    for package in PLANTED_PACKAGES:
        (ws / package).mkdir(parents=True, exist_ok=True)
        (ws / package / "__init__.py").write_text(_plant("", marks, package.replace("/", ".")))
    (ws / "sparsefs" / "__main__.py").write_text(_plant("", marks, "sparsefs.__main__"))
    (ws / "__main__.py").write_text(_plant("", marks, "__main__"))
    (ws / "evil.pth").write_text(f"import os; open({str(marks / 'pth')!r}, 'w').write('ran')\n")
    (ws / "notes.md").write_text("# Notes\n\nThe harbor budget for 2023 was 4.2 million.\n" * 40)
    doc = pymupdf.open()
    doc.new_page().insert_text((72, 72), "Quarterly revenue was 12 million in the harbor region.")
    (ws / "doc.pdf").write_bytes(doc.tobytes())
    book = openpyxl.Workbook()
    sheet = book.active
    assert sheet is not None
    sheet.append(["region", "revenue"])
    for row in range(40):
        sheet.append([f"r{row}", row])
    book.save(ws / "sheet.xlsx")
    yield ws, marks


def _ran(marks: Path) -> list[str]:
    return sorted(os.listdir(marks))


def _run(command: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)


def _cleanup(mountpoint: Path) -> None:
    """Leave nothing mounted, whatever the test did."""
    if mounts.find_mount(mountpoint) is None:
        return
    for command in (["fusermount3", "-u", str(mountpoint)], ["umount", "-l", str(mountpoint)]):
        subprocess.run(command, capture_output=True, timeout=20, check=False)
        if mounts.find_mount(mountpoint) is None:
            return


def _read_packs(view: Path) -> None:
    """Packs whose Readers import lazily (pdf, xlsx, bm25 over markdown), read from outside the workspace."""
    for name in ("doc.pdf@scout", "sheet.xlsx@sum=revenue", "notes.md@intent=harbor budget 2023"):
        done = subprocess.run(["cat", str(view / name)], capture_output=True, timeout=120, check=False, cwd="/")
        assert done.returncode == 0 and done.stdout, (name, done.stderr)


def test_mount_in_place_from_inside_a_planted_workspace_runs_nothing(
    planted: tuple[Path, Path], tmp_path: Path, backend: str
) -> None:
    ws, marks = planted
    try:
        done = _run([SPARSEFS, "mount", ".", *backend_args(backend), "--state-dir", str(tmp_path / "state")], ws)
        assert done.returncode == 0, done.stderr
        _read_packs(ws)
        assert _run([SPARSEFS, "umount", str(ws)], Path("/")).returncode == 0
    finally:
        _cleanup(ws)
    assert _ran(marks) == []


def test_mirror_and_python_m_from_inside_a_planted_workspace_run_nothing(
    planted: tuple[Path, Path], tmp_path: Path, backend: str
) -> None:
    """Mirror mode, started the way a developer might: ``python -I -m sparsefs`` (``-I``: Python's own rule
    otherwise imports ``sparsefs`` from the working directory before SparseFS runs at all)."""
    ws, marks = planted
    view = tmp_path / "view"
    view.mkdir()
    try:
        done = _run([sys.executable, "-I", "-m", "sparsefs", "mount", ".", str(view), *backend_args(backend),
                     "--state-dir", str(tmp_path / "state")], ws)
        assert done.returncode == 0, done.stderr
        _read_packs(view)
        assert _run([SPARSEFS, "umount", str(view)], ws).returncode == 0
    finally:
        _cleanup(view)
    assert _ran(marks) == []


def test_read_and_index_from_inside_a_planted_workspace_run_nothing(planted: tuple[Path, Path], tmp_path: Path) -> None:
    ws, marks = planted
    state = str(tmp_path / "state")
    for name in ("doc.pdf@scout", "sheet.xlsx@sum=revenue", "notes.md@intent=harbor budget"):
        done = _run([SPARSEFS, "read", name, "--state-dir", state], ws)
        assert done.returncode == 0 and done.stdout, (name, done.stderr)
    assert _run([SPARSEFS, "index", ".", "--state-dir", str(tmp_path / "index"), "--no-progress"], ws).returncode == 0
    assert _ran(marks) == []


async def _mcp(ws: Path, state: Path) -> list[str]:
    params = StdioServerParameters(command=SPARSEFS, args=["mcp", "--root", ".", "--state-dir", str(state)],
                                   cwd=str(ws))
    texts = []
    async with Client(params, read_timeout_seconds=120) as client:
        for path in ("doc.pdf", "sheet.xlsx", "notes.md"):
            result = await client.call_tool("sro_preview", {"path": path})
            texts.append("".join(part.text for part in result.content if part.type == "text"))
    return texts


def test_mcp_from_inside_a_planted_workspace_runs_nothing(planted: tuple[Path, Path], tmp_path: Path) -> None:
    ws, marks = planted
    texts = anyio.run(_mcp, ws, tmp_path / "state")
    assert "harbor region" in texts[0] and "region" in texts[1] and "harbor budget" in texts[2], texts
    assert _ran(marks) == []


def test_demo_from_inside_a_planted_workspace_runs_nothing(planted: tuple[Path, Path]) -> None:
    ws, marks = planted
    done = _run([SPARSEFS, "demo"], ws, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "annual-report.md@intent" in done.stdout
    assert _ran(marks) == []


def test_a_tree_holding_our_own_code_is_refused(tmp_path: Path) -> None:
    """The agent could rewrite what the daemon (root) runs, and in place it would import through itself."""
    home = isolation.own_code_dirs()[0]
    view = Path(tempfile.mkdtemp(prefix="sparsefs-iso-view-"))
    try:
        done = _run([SPARSEFS, "mount", home, str(view), "--state-dir", str(tmp_path / "state")], Path("/"))
        assert done.returncode != 0 and "inside the served tree" in done.stderr, done.stderr
        assert mounts.find_mount(view) is None
        assert isolation.served_code([Path(sys.prefix).parent]) is not None  # holds the interpreter's prefix
        assert isolation.served_code([Path(home) / "sparsefs" / "demo"]) is not None  # inside our own code
        assert isolation.served_code([tmp_path]) is None
    finally:
        _cleanup(view)
        view.rmdir()


SCRUB = """
import sys
from sparsefs.app.isolation import scrub_import_path
scrub_import_path()
try:
    import planted_lazy
except ImportError:
    print("not found")
"""


def test_the_cli_drops_the_working_directory_from_the_import_path(tmp_path: Path) -> None:
    """``python -c`` and ``-m`` put the working directory first; a lazy import after the scrub never finds
    what the agent planted there."""
    marks = tmp_path / "marks"
    marks.mkdir()
    (tmp_path / "planted_lazy.py").write_text(_plant("", marks, "planted_lazy"))
    done = _run([sys.executable, "-c", SCRUB], tmp_path)
    assert done.stdout.strip() == "not found", done.stderr
    assert _ran(marks) == []


def test_daemons_are_started_isolated() -> None:
    argv = isolation.python_argv("mount", "-f", "x")
    assert argv[:3] == [sys.executable, "-I", "-c"] and argv[-3:] == ["mount", "-f", "x"]
    done = subprocess.run([*isolation.python_argv("--help")], capture_output=True, text=True, timeout=60,
                          check=False, cwd="/", env={**os.environ, "PYTHONPATH": "/nonexistent-planted"})
    assert done.returncode == 0 and "sparsefs" in done.stdout


def test_system_tools_never_come_from_a_planted_path(planted: tuple[Path, Path], tmp_path: Path,
                                                     backend: str) -> None:
    """The daemon (root) runs fusermount3, umount and cat; a workspace folder on $PATH (a node_modules/.bin, a
    ``.``) that plants them must not be run: they are taken from the system's own directories."""
    ws, marks = planted
    tools = ws / "bin"
    tools.mkdir()
    for name in ("fusermount3", "fusermount", "umount", "cat"):
        (tools / name).write_text(f"#!/bin/sh\necho ran > {marks / name}\nexit 1\n")
        (tools / name).chmod(0o755)
    view = tmp_path / "view"
    view.mkdir()
    env = {**os.environ, "PATH": f"{tools}:{os.environ['PATH']}"}
    try:
        for args in (["mount", str(ws), str(view), *backend_args(backend), "--state-dir", str(tmp_path / "s")],
                     ["doctor"], ["umount", str(view)]):
            done = subprocess.run([SPARSEFS, *args], capture_output=True, text=True, timeout=120, check=False,
                                  cwd="/", env=env)
            assert done.returncode in (0, 1) and "Traceback" not in done.stderr, (args, done.stderr)
        assert mounts.find_mount(view) is None
    finally:
        _cleanup(view)
    assert _ran(marks) == []
