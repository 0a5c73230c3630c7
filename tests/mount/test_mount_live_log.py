"""`tail -f .sparsefs/log.jsonl` through a real mount, both backends (issue 25.9): a pack's line shows within the
poll interval of tail. With mfusepy it lagged about 5 s: the kernel kept the live log's size for libfuse's 5 s
attribute timeout, so tail's fstat saw no growth; every line written now drops that cached size."""

from __future__ import annotations

import json
import os
import subprocess
import time

from tests import mountutil

Mount = mountutil.Mount
POLL_S = 0.1  # `tail -f -s 0.1`: GNU tail polls a FUSE file (it treats it as remote)
MAX_LAG_S = 2.0  # from the line's own time stamp to tail printing it; was up to 5 s on mfusepy


def test_tail_f_of_the_log_shows_a_pack_at_once(mirror: Mount) -> None:
    mnt = mirror.mountpoint
    (mnt / "annual-report.md@scout").read_bytes()  # parsed: each pack below is quick to build
    tail = subprocess.Popen(["tail", "-n", "0", "-s", str(POLL_S), "-f", str(mnt / ".sparsefs" / "log.jsonl")],
                            stdout=subprocess.PIPE)
    assert tail.stdout is not None
    os.set_blocking(tail.stdout.fileno(), False)
    try:
        time.sleep(0.5)  # tail has opened the log and polls it
        lags = []
        for n in range(4):
            started = time.monotonic()
            (mnt / f"annual-report.md@intent=revenue question {n}").read_bytes()
            got, wanted = b"", f"revenue question {n}".encode()
            while wanted not in got and time.monotonic() - started < 10:
                got += tail.stdout.read() or b""
                time.sleep(0.01)
            arrived = time.time()
            line = next(json.loads(one) for one in got.splitlines() if wanted in one)
            lags.append(arrived - line["time"])  # the pack's build time (a loaded machine) is not tail's lag
            time.sleep(0.4)  # within the 5 s the kernel used to keep the size
    finally:
        tail.kill()
        tail.wait(timeout=5)
    assert max(lags) < MAX_LAG_S, lags


def test_stats_json_is_fresh_at_every_open(mirror: Mount) -> None:
    """With mfusepy a second `cat stats.json` within 5 s served the first one's snapshot (its cached size kept the
    kernel from asking again); `sparsefs stats` reading it for its note made the guard's numbers look stale."""
    mnt = mirror.mountpoint
    before = mountutil.stats_json(mnt)
    (mnt / "annual-report.md@intent=R&D expenses").read_bytes()
    data = (mnt / "notes.txt").read_bytes()
    after = mountutil.stats_json(mnt)  # at once: no wait
    assert after["packs_served"] == before["packs_served"] + 1
    if not after["passthrough"]:
        assert after["plain_bytes_read"] >= before["plain_bytes_read"] + len(data)
