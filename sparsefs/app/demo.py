"""``sparsefs demo``: mount a bundled sample workspace and show what SparseFS does."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import tempfile
from importlib import resources
from pathlib import Path

from sparsefs.app.isolation import python_argv
from sparsefs.fuse import mounts

STEPS = [
    ("ls -la", "the mount looks like the workspace (virtual paths never appear)"),
    ("head -c 400 annual-report.md", "a plain read: faithful bytes"),
    ("wc -c annual-report.md", "what a full read would cost"),
    ("cat 'annual-report.md@intent=R&D expenses 2023; headcount at year end'", "an evidence read"),
    ("cat .sparsefs/stats.json", "what was served"),
]


def _copy_workspace(target: Path) -> None:
    source = resources.files("sparsefs").joinpath("demo")
    with resources.as_file(source) as path:
        shutil.copytree(path, target)


def _sh(command: str, cwd: Path) -> int:
    print(f"\n$ {command}", flush=True)
    return subprocess.run(command, shell=True, cwd=cwd, timeout=60, check=False).returncode


def run_demo(keep: bool = False) -> int:
    base = Path(tempfile.mkdtemp(prefix="sparsefs-demo-"))
    workspace, state = base / "workspace", base / "state"
    _copy_workspace(workspace)
    print(f"# SparseFS demo: mounting a sample workspace in place at {workspace}")
    mount = python_argv("mount", str(workspace), "--state-dir", str(state))
    if subprocess.run(mount, timeout=60, check=False, cwd="/").returncode != 0:
        return 1
    try:
        return _show(workspace)
    finally:
        if not keep:
            subprocess.run(python_argv("umount", str(workspace)), timeout=30, check=False, cwd="/")
        else:
            print(f"\nstill mounted; unmount with: sparsefs umount {shlex.quote(str(workspace))}")


def _show(workspace: Path) -> int:
    failures = 0
    for command, why in STEPS:
        print(f"\n# {why}")
        failures += _sh(command, workspace) != 0
    if not mounts.is_sparsefs_mount(workspace):
        failures += 1
    return 1 if failures else 0
