"""``--no-open`` (issue 26, item 3): a read-only mount whose opens and closes never reach the daemon.

The first OPEN is answered ENOSYS; from then on the kernel opens every file
itself (no OPEN, no RELEASE) and keeps its pages, and READs come by node.
Plain files, packs and control files must still read exactly, outside edits
must still show, and everything that needs an open must be refused up front.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import mountutil
from tests.conftest import is_pack, skip_unless_available

Mount = mountutil.Mount


@pytest.fixture
def unopened(workspace: Path, tmp_path: Path) -> Iterator[Mount]:
    skip_unless_available("kernel")
    (tmp_path / "mnt").mkdir()
    with mountutil.mounted(workspace, tmp_path / "mnt", tmp_path / "state", "--no-open", backend="kernel") as mount:
        yield mount
    assert "Traceback" not in mount.stderr()


def stats(mount: Mount) -> dict[str, Any]:
    return dict(json.loads((mount.mountpoint / ".sparsefs" / "stats.json").read_text()))


def test_reads_cost_no_open_and_no_release(unopened: Mount) -> None:
    mnt, src = unopened.mountpoint, unopened.source
    for _ in range(3):
        for name in ("notes.txt", "README.md", "nested/deeper/leaf.txt"):
            assert (mnt / name).read_bytes() == (src / name).read_bytes()
    grep = subprocess.run(["grep", "-rl", "Priya", str(mnt)], capture_output=True, text=True, timeout=30, check=True)
    assert f"{mnt}/notes.txt" in grep.stdout.split()
    requests = stats(unopened)["kernel_requests"]
    assert requests.get("OPEN", 0) <= 1 and requests.get("RELEASE", 0) == 0  # the one ENOSYS
    assert requests.get("READ", 0) <= 8  # each file filled the page cache once (stats.json aside)


def test_packs_and_control_files_read_whole_and_fresh(unopened: Mount) -> None:
    mnt = unopened.mountpoint
    name = mnt / "annual-report.md@intent=R&D expenses in 2023"
    pack = name.read_bytes()
    assert is_pack(pack) and os.stat(name).st_size == len(pack) and name.read_bytes() == pack
    served = stats(unopened)["packs_served"]
    (mnt / "annual-report.md@intent=headcount at year end").read_bytes()
    assert mountutil.wait_for(lambda: stats(unopened)["packs_served"] == served + 1, timeout=3)
    log = (mnt / ".sparsefs" / "log.jsonl").read_text().splitlines()
    assert all(json.loads(line) for line in log)  # whole lines, never a snapshot cut by a later one


def test_outside_edits_show_and_writes_are_refused(unopened: Mount) -> None:
    mnt, src = unopened.mountpoint, unopened.source
    assert (mnt / "notes.txt").read_text()
    (src / "notes.txt").write_text("edited outside\n")
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and (mnt / "notes.txt").read_text() != "edited outside\n":
        time.sleep(0.02)
    assert (mnt / "notes.txt").read_text() == "edited outside\n"
    for attempt in (lambda: (mnt / "new.txt").write_text("x"), lambda: (mnt / "notes.txt").unlink(),
                    lambda: (mnt / ".sparsefs" / "session").write_text("x")):
        with pytest.raises(OSError) as refused:
            attempt()
        assert refused.value.errno == 30  # EROFS


def test_no_open_is_refused_where_it_cannot_work(workspace: Path, tmp_path: Path) -> None:
    (tmp_path / "mnt").mkdir()
    base = [sys.executable, "-m", "sparsefs", "mount", str(workspace), str(tmp_path / "mnt"), "--state-dir",
            str(tmp_path / "state"), "--no-open"]
    for extra, says in ((["--backend", "mfusepy"], "--no-open needs the kernel backend"),
                        (["--backend", "kernel", "--guard-pid", str(os.getpid())], "cannot be combined"),
                        (["--backend", "kernel", "--allow-other"], "shares a pack's pages between users")):
        done = subprocess.run([*base, *extra], capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 2 and says in done.stderr
