"""A real full filesystem for a test: a small tmpfs mounted under the test's own directory, always unmounted.

Nothing machine-wide changes: the tmpfs lives under the test's tmp path, is filled by one file, and is
unmounted when the block ends (lazily if something still holds it open). Needs root (to mount); tests that
use it skip otherwise.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

FILLER = ".filler"


class SmallFS:
    """A mounted tmpfs that can be filled to the last page and given its space back."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fill(self) -> int:
        """Write one file until the disk refuses more (ENOSPC); returns the bytes it took."""
        fd = os.open(self.path / FILLER, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        taken, chunk = 0, b"\0" * 65536
        try:
            while True:
                try:
                    taken += os.write(fd, chunk)
                except OSError as err:
                    if err.errno != errno.ENOSPC:
                        raise
                    break
        finally:
            os.close(fd)
        assert os.statvfs(self.path).f_bavail == 0, "the filesystem must be full"
        return taken

    def free(self) -> None:
        (self.path / FILLER).unlink(missing_ok=True)


@contextmanager
def small_fs(path: Path, size: str = "4m") -> Iterator[SmallFS]:
    """A ``size`` tmpfs at ``path`` (created), unmounted afterwards whatever happens."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem needs root")
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "sparsefs-test", str(path)],
                          capture_output=True, text=True, timeout=10, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield SmallFS(path)
    finally:
        unmounted = subprocess.run(["umount", str(path)], capture_output=True, timeout=10, check=False)
        if unmounted.returncode != 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=10, check=False)
