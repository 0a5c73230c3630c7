"""``sparsefs demo``: mount a bundled sample workspace, show what SparseFS does, say what it saved, clean up.

The demo copies the sample into a fresh ``/tmp/sparsefs-demo-*`` folder, mounts it in place, runs a few
commands a person or an agent would run, explains the evidence pack's header from the header it just
printed (:mod:`sparsefs.app.demo_text`), and ends with the saving in one sentence, counted from the pack
log by the function ``sparsefs stats`` uses (:func:`sparsefs.app.report.headline`), and what to try next.
Whatever happens (a failed step, Ctrl-C, SIGTERM, SIGHUP) it unmounts and removes its folder; ``--keep``
leaves both and says how to remove them.
"""

from __future__ import annotations

import shlex
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from types import FrameType

from sparsefs.app import demo_text
from sparsefs.app.isolation import python_argv
from sparsefs.fuse import mounts

EVIDENCE_READ = "cat 'annual-report.md@intent=R&D expenses 2023; headcount at year end'"
STEPS = [
    ("ls -la", "the mount looks like the workspace (virtual paths never appear)"),
    ("head -c 400 annual-report.md", "a plain read: faithful bytes"),
    ("wc -c annual-report.md", "what a full read would cost (bytes; the pack's L counts characters)"),
    (EVIDENCE_READ, "an evidence read: the passages for two needs, not the whole file"),
]
PREFIX = "sparsefs-demo-"


class Stopped(Exception):
    """A signal asked the demo to stop: it unwinds through the cleanup."""


def run_demo(keep: bool = False) -> int:
    """The ``sparsefs demo`` command; returns its exit code."""
    base = Path(tempfile.mkdtemp(prefix=PREFIX))
    workspace, state = base / "workspace", base / "state"
    try:
        with _signals_stop():
            return _mounted_demo(workspace, state, keep)
    except (KeyboardInterrupt, Stopped):
        print("\n# stopped: cleaning up", flush=True)
        keep = False
        return 130
    finally:
        if keep and mounts.is_sparsefs_mount(workspace):
            print(f"\nstill mounted; to remove it: {demo_text.PROG} umount {shlex.quote(str(workspace))} && "
                  f"rm -rf {shlex.quote(str(base))}")
        else:
            _clean_up(workspace, base)


def _mounted_demo(workspace: Path, state: Path, keep: bool) -> int:
    _copy_workspace(workspace)
    print(f"# SparseFS demo: mounting a sample workspace in place at {workspace}", flush=True)
    mount = python_argv("mount", str(workspace), "--state-dir", str(state))
    with _deferred_signals():  # a mount half made when Ctrl-C came would come up after the cleanup looked
        mounted = subprocess.run(mount, timeout=60, check=False, cwd="/", start_new_session=True)
    if mounted.returncode != 0:
        return 1
    failures = _show(workspace)
    print(demo_text.closing(state / "log.jsonl", workspace), flush=True)
    return 1 if failures else 0


@contextmanager
def _signals_stop() -> Iterator[None]:
    """SIGTERM and SIGHUP unwind like Ctrl-C does, so the cleanup runs; the old handlers come back after."""

    def stop(signum: int, frame: FrameType | None) -> None:
        raise Stopped(signal.Signals(signum).name)

    old = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


@contextmanager
def _deferred_signals() -> Iterator[None]:
    """Hold Ctrl-C, SIGTERM and SIGHUP until the block ends (the mount has come up or failed), then stop."""
    came: list[int] = []
    old = {sig: signal.signal(sig, lambda signum, frame: came.append(signum))
           for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    if came:
        raise Stopped(signal.Signals(came[0]).name)


def _copy_workspace(target: Path) -> None:
    source = resources.files("sparsefs").joinpath("demo")
    with resources.as_file(source) as path:
        shutil.copytree(path, target)


def _show(workspace: Path) -> int:
    """Run the steps; explain the header of the evidence read's pack. The number of steps that failed."""
    failures = 0
    for command, why in STEPS:
        print(f"\n# {why}\n$ {command}", flush=True)
        result = subprocess.run(command, shell=True, cwd=workspace, timeout=60, check=False, capture_output=True,
                                text=True, errors="replace")
        print(result.stdout + result.stderr, end="" if result.stdout.endswith("\n") else "\n", flush=True)
        failures += result.returncode != 0
        if command == EVIDENCE_READ:
            print(demo_text.legend(result.stdout.partition("\n")[0]), flush=True)
    return failures + (not mounts.is_sparsefs_mount(workspace))


def _clean_up(workspace: Path, base: Path) -> None:
    """Unmount (waiting for the daemon; lazily if something still holds it), then remove the demo's folder.
    Signals are ignored meanwhile: a second Ctrl-C must not leave a mount or a folder behind."""
    old = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        if mounts.find_mount(workspace):
            done = subprocess.run(python_argv("umount", str(workspace)), timeout=150, check=False, cwd="/")
            if done.returncode != 0 and mounts.find_mount(workspace):
                subprocess.run(python_argv("umount", "-z", str(workspace)), timeout=30, check=False, cwd="/")
        if mounts.find_mount(workspace):
            print(f"sparsefs demo: {workspace} is still mounted; its folder {base} is kept", flush=True)
            return
        shutil.rmtree(base, ignore_errors=True)
        print(f"removed {base}", flush=True)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
