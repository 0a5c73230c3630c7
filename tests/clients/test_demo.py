"""`sparsefs demo`: it shows a plain and an evidence read, explains the pack header, ends on the saving in one
sentence and what to try next, and leaves nothing behind: not at its end, not after Ctrl-C or SIGTERM."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from sparsefs.fuse import mounts

MOUNTING = re.compile(r"mounting a sample workspace in place at (/tmp/sparsefs-demo-[^/\s]+)/workspace")
HEADER = re.compile(r"^annual-report\.md@intent (\w+) ([0-9a-f]{8}) · (\d+ sentences \w+) · E ([\d,]+)/L ([\d,]+)$",
                    re.MULTILINE)


def run_cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sparsefs", *args], capture_output=True, text=True,
                          timeout=timeout, check=False, cwd="/")


def _left_behind(base: Path) -> list[str]:
    mounted = [e.mountpoint for e in mounts.mount_entries() if e.mountpoint.startswith(str(base))]
    return mounted + ([str(base)] if base.exists() else [])


def test_demo_explains_the_header_says_the_saving_and_leaves_nothing() -> None:
    result = run_cli("demo")
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    base = Path(MOUNTING.search(out).group(1))  # type: ignore[union-attr]
    assert not _left_behind(base) and f"removed {base}" in out
    assert "48.2 million" in out and "1,184 employees" in out and "packs_served" not in out  # no stats.json dump
    header = HEADER.search(out)
    assert header, out
    episode, version, scope, exposed, length = header.groups()
    for field in (f"#   {episode}: the episode", f"#   {version}: the file's version",
                  f"#   {scope}: what was searched",
                  f"#   E {exposed}: characters the agent has read in this episode so far",
                  f"#   L {length}: characters of the whole file's text, what a full read costs"):
        assert field in out, field
    e, full = int(exposed.replace(",", "")), int(length.replace(",", ""))
    saved = f"Saved {full - e:,} characters ({(full - e) / full:.1%}): the agent read {e:,} through SparseFS where " \
            f"full reads of the same files would have cost {full:,}."
    assert f"# What it saved\n{saved}\n" in out
    assert re.search(r"^  \S*sparsefs\S* mount ~/project ", out, re.MULTILINE) and "umount ~/project" in out
    assert "docs/agents/README.md" in out and "skill" in out


def test_demo_cleans_up_after_ctrl_c_and_sigterm() -> None:
    """A signal while it mounts (held until the mount is up, then cleaned), and one while it reads."""
    for sig, after in ((signal.SIGINT, ""), (signal.SIGTERM, "# the mount looks like"), (signal.SIGHUP, "")):
        demo = subprocess.Popen([sys.executable, "-m", "sparsefs", "demo"], stdout=subprocess.PIPE, text=True,
                                cwd="/")
        assert demo.stdout is not None
        first = demo.stdout.readline()  # printed just before the mount starts
        base = Path(MOUNTING.search(first).group(1))  # type: ignore[union-attr]
        while after and (line := demo.stdout.readline()) and not line.startswith(after):
            pass
        time.sleep(0.3)
        demo.send_signal(sig)
        try:
            rest = demo.communicate(timeout=120)[0]
        finally:
            if demo.poll() is None:
                demo.kill()
        assert demo.returncode == 130, rest
        assert "stopped: cleaning up" in rest and f"removed {base}" in rest
        assert not _left_behind(base)


def test_demo_keep_leaves_it_mounted_and_prints_the_commands_that_remove_it() -> None:
    result = run_cli("demo", "--keep")
    base = Path(MOUNTING.search(result.stdout).group(1))  # type: ignore[union-attr]
    try:
        assert result.returncode == 0, result.stdout + result.stderr
        assert mounts.is_sparsefs_mount(base / "workspace")
        removal = result.stdout.strip().splitlines()[-1]
        assert removal.startswith("still mounted; to remove it: "), removal
        done = subprocess.run(removal.partition(": ")[2], shell=True, capture_output=True, text=True, timeout=120,
                              check=False, cwd="/")
        assert done.returncode == 0, done.stderr
    finally:
        if mounts.find_mount(base / "workspace"):
            subprocess.run(["umount", "-l", str(base / "workspace")], timeout=30, check=False)
        shutil.rmtree(base, ignore_errors=True)
    assert not _left_behind(base)
