"""The test mount helper itself: a hung daemon fails a test, it never hangs the suite."""

from __future__ import annotations

import errno
import os
import signal
import time
from pathlib import Path

import pytest

from sparsefs.fuse import mounts
from tests import mountutil


def test_hung_daemon_is_aborted_and_cleaned_up(workspace: Path, tmp_path: Path, backend: str) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    mount = mountutil.start(workspace, mnt, tmp_path / "state", backend=backend)
    try:
        (mnt / "notes.txt").read_text()
        os.kill(mount.process.pid, signal.SIGSTOP)  # the daemon stops answering
        started = time.monotonic()
        with mountutil.hang_guard(mount, 1.0), pytest.raises(OSError) as raised:
            (mnt / "annual-report.md@intent=never answered").read_bytes()
        assert raised.value.errno in (errno.ECONNABORTED, errno.ENOTCONN)
        assert time.monotonic() - started < 30
    finally:
        mountutil.stop(mount, deadline_s=2.0)
    assert not mounts.find_mount(mnt)
    assert mount.process.poll() is not None
