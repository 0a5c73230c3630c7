"""git's fsmonitor hook answered by the mount (issue 26, item 5): git status lstat's only what changed.

``sparsefs fsmonitor install`` writes the hook and sets ``core.fsmonitor``;
the daemon answers from its change journal. The status with the hook must
always equal the status without it (``-c core.fsmonitor=``), for changes
through the mount (at once) and outside it (within the watcher's latency).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests import mountutil

Mount = mountutil.Mount
IDENTITY = ["-c", "user.name=t", "-c", "user.email=t@example.com"]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *IDENTITY, *args], cwd=repo, capture_output=True, text=True, timeout=60,
                          check=True).stdout


def both(repo: Path) -> tuple[str, str]:
    """(status with the hook, status scanning everything)."""
    return git(repo, "status", "--porcelain"), git(repo, "-c", "core.fsmonitor=", "status", "--porcelain")


def settled(repo: Path, timeout: float = 2.0) -> tuple[str, str]:
    """Both statuses once the hook's agrees with a full scan (outside changes take the watcher's latency)."""
    deadline = time.monotonic() + timeout
    while True:
        hooked, full = both(repo)
        if hooked == full or time.monotonic() > deadline:
            return hooked, full
        time.sleep(0.05)


def test_git_status_through_the_hook_equals_a_full_scan(mirror: Mount) -> None:
    repo, outside = mirror.mountpoint / "repo", mirror.source / "repo"
    for index in range(40):
        (repo / f"d{index % 4}").mkdir(parents=True, exist_ok=True)
        (repo / f"d{index % 4}" / f"f{index}.txt").write_text(f"{index}\n")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "one")
    done = subprocess.run([sys.executable, "-m", "sparsefs", "fsmonitor", "install", str(repo)], capture_output=True,
                          text=True, timeout=60, check=True)
    assert "core.fsmonitor" in done.stdout and git(repo, "config", "core.fsmonitorHookVersion").strip() == "2"
    assert both(repo) == ("", "")
    with open(repo / "d1" / "f1.txt", "a") as out:  # through the mount: in the journal at once
        out.write("more\n")
    assert both(repo) == (" M d1/f1.txt\n", " M d1/f1.txt\n")
    (outside / "d2" / "f2.txt").write_text("changed outside\n")
    (outside / "d3" / "new.txt").write_text("untracked\n")
    hooked, full = settled(repo)
    assert hooked == full and " M d2/f2.txt" in full and "?? d3/new.txt" in full
    os.unlink(repo / "d0" / "f0.txt")
    (repo / "d0" / "f4.txt").rename(repo / "d0" / "moved.txt")
    hooked, full = settled(repo)
    assert hooked == full and " D d0/f0.txt" in full and " D d0/f4.txt" in full and "?? d0/moved.txt" in full


def test_the_hook_asks_for_a_full_scan_when_it_cannot_know(mirror: Mount) -> None:
    repo = mirror.mountpoint / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    subprocess.run([sys.executable, "-m", "sparsefs", "fsmonitor", "install", str(repo)], capture_output=True,
                   timeout=60, check=True)
    hook = Path(git(repo, "config", "core.fsmonitor").strip())
    for token in ("", "someone-else:12", "sparsefs:1.2:3"):
        out = subprocess.run([str(hook), "2", token], cwd=repo, capture_output=True, timeout=30, check=True).stdout
        new, *paths = out.split(b"\0")[:-1]
        assert new.startswith(b"sparsefs:") and paths == [b"/"]
    current = subprocess.run([str(hook), "2", ""], cwd=repo, capture_output=True, timeout=30,
                             check=True).stdout.split(b"\0")[0]
    (repo / "later.txt").write_text("x\n")
    out = subprocess.run([str(hook), "2", current.decode()], cwd=repo, capture_output=True, timeout=30,
                         check=True).stdout.split(b"\0")[1:-1]
    assert b"later.txt" in out and b"/" not in out
    elsewhere = subprocess.run([str(hook), "2", ""], cwd="/", capture_output=True, timeout=30, check=False)
    assert elsewhere.returncode != 0  # not on a mount: git scans everything itself
