"""An ordinary user's mount (issue 26): no root, no CAP_SYS_ADMIN, mounted with fusermount3, on both backends.

The daemon and every client run as nobody (tests/usermount.py says how, and why
in a private mount namespace). The kernel backend then mounts through
fusermount3 and serves plain reads through the page cache (no passthrough
without CAP_SYS_ADMIN); mfusepy mounts through libfuse, which runs the same
fusermount3.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import usermount
from tests.conftest import DEMO, skip_unless_available

USER_BACKENDS = ("kernel", "mfusepy")


@pytest.fixture(params=USER_BACKENDS)
def user_mount(request: pytest.FixtureRequest) -> Iterator[usermount.UserMount]:
    blocker = usermount.blocker()
    if blocker:
        pytest.skip(f"user mounts cannot run here: {blocker}")
    backend = skip_unless_available(str(request.param))
    with usermount.user_home() as base:
        source = base / "src"
        shutil.copytree(DEMO, source)
        (source / "nested").mkdir()
        (source / "nested" / "leaf.txt").write_text("leaf\n")
        for path in [source, *source.rglob("*")]:
            os.chown(path, usermount.USER, usermount.USER)
        mount = usermount.start(base, source, backend=backend)
        try:
            yield mount
        finally:
            usermount.stop(mount)
        log = mount.stderr()
        assert "Traceback" not in log and " ERROR " not in log, log


def test_the_users_mount_is_made_by_fusermount3_and_only_the_user_reaches_it(
        user_mount: usermount.UserMount) -> None:
    stats = json.loads(user_mount.run("cat", f"{user_mount.mountpoint}/.sparsefs/stats.json").stdout)
    if stats["backend"] == "kernel":
        assert stats["kernel_features"]["mounted_by"] == "fusermount3"
        assert stats["passthrough"] is False  # no CAP_SYS_ADMIN: plain reads through the page cache
    mountinfo = Path(f"/proc/{user_mount.process.pid}/mountinfo").read_text()
    assert f"{user_mount.mountpoint} " in mountinfo and "user_id=65534" in mountinfo
    assert "nosuid" in mountinfo.split(f"{user_mount.mountpoint} ")[1].split("\n")[0]


def test_the_user_reads_writes_and_asks_for_evidence(user_mount: usermount.UserMount) -> None:
    mnt, src, run = user_mount.mountpoint, user_mount.source, user_mount.run
    assert run("cat", f"{mnt}/notes.txt").stdout == (src / "notes.txt").read_text()
    assert run("grep", "-rl", "Priya", str(mnt)).stdout.split() == [f"{mnt}/notes.txt"]
    assert sorted(run("find", str(mnt), "-name", "*.txt").stdout.split()) == [
        f"{mnt}/nested/leaf.txt", f"{mnt}/notes.txt"]
    run("sh", "-c", f"echo one > {mnt}/new.txt && echo two >> {mnt}/new.txt && mv {mnt}/new.txt {mnt}/nested/ "
                    f"&& mkdir {mnt}/made && rm {mnt}/nested/leaf.txt")
    assert (src / "nested" / "new.txt").read_text() == "one\ntwo\n" and (src / "made").is_dir()
    assert not (src / "nested" / "leaf.txt").exists() and (src / "nested" / "new.txt").stat().st_uid == 65534
    pack = run("cat", f"{mnt}/annual-report.md@intent=R&D expenses in 2023").stdout
    assert pack.startswith("annual-report.md@intent") and "R&D" in pack
    python = run(str(usermount.user_python()), "-I", "-c", f"print(open('{mnt}/nested/new.txt').read())").stdout
    assert python == "one\ntwo\n\n"


def test_the_user_sees_outside_edits(user_mount: usermount.UserMount) -> None:
    mnt, src, run = user_mount.mountpoint, user_mount.source, user_mount.run
    assert run("cat", f"{mnt}/notes.txt").stdout
    (src / "notes.txt").write_text("changed outside\n")
    (src / "later.txt").write_text("made outside\n")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and run("cat", f"{mnt}/notes.txt").stdout != "changed outside\n":
        time.sleep(0.05)
    assert run("cat", f"{mnt}/notes.txt").stdout == "changed outside\n"
    assert run("cat", f"{mnt}/later.txt").stdout == "made outside\n"


def test_git_works_for_the_user_through_the_mount(user_mount: usermount.UserMount) -> None:
    mnt, run = str(user_mount.mountpoint), user_mount.run
    identity = ["-c", "user.name=u", "-c", "user.email=u@example.com"]
    run("git", "-C", mnt, "init", "-q")
    run("git", "-C", mnt, "add", "-A")
    run("git", "-C", mnt, *identity, "commit", "-qm", "all")
    assert run("git", "-C", mnt, "status", "--porcelain").stdout == ""
    run("sh", "-c", f"echo more >> {mnt}/notes.txt")
    assert run("git", "-C", mnt, "status", "--porcelain").stdout.split() == ["M", "notes.txt"]
    run("git", "-C", mnt, "checkout", "-q", "--", "notes.txt")
    assert run("git", "-C", mnt, "status", "--porcelain").stdout == ""
