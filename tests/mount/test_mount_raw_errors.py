"""Issue 25, items 6 and 9 (the part in this code), on both backends.

``@raw`` of something without bytes (a FIFO, a socket, a directory, a symlink out of the root) answers an
error pack of exact size like every other action, not a bare errno; and each pack line of
``.sparsefs/log.jsonl`` says whom it was served to (pid, uid, comm), as guard lines do.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

from tests.mountutil import Mount


def test_raw_of_what_has_no_bytes_is_an_error_pack(mirror: Mount, tmp_path: Path) -> None:
    src, mnt = mirror.source, mirror.mountpoint
    os.mkfifo(src / "pipe")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(src / "sock"))
    (tmp_path / "outside.txt").write_text("TOP-SECRET\n")
    (src / "out.txt").symlink_to(tmp_path / "outside.txt")
    try:
        for name, why in (("pipe", "a FIFO"), ("sock", "a socket"), ("nested", "a directory"),
                          ("out.txt", "outside the mounted source root")):
            path = mnt / f"{name}@raw"
            size = os.stat(path).st_size
            data = subprocess.run(["cat", str(path)], capture_output=True, timeout=30, check=True).stdout
            assert len(data) == size and data.startswith(f"{name}@raw: error: ".encode()), data
            assert why.encode() in data and b"TOP-SECRET" not in data
    finally:
        listener.close()


def test_pack_lines_in_the_log_say_whom_they_were_served_to(mirror: Mount) -> None:
    mnt = mirror.mountpoint
    reader = subprocess.run(["cat", str(mnt / "annual-report.md@intent=R&D expenses")], capture_output=True,
                            timeout=60, check=True)
    assert reader.stdout
    lines = [json.loads(line) for line in (mnt / ".sparsefs" / "log.jsonl").read_text().splitlines()]
    pack = next(line for line in lines if line.get("path") == "annual-report.md@intent=R&D expenses")
    assert pack["uid"] == os.getuid() and pack["comm"] == "cat" and pack["pid"] > 0
