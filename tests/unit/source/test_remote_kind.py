"""What inotify can see (sparsefs.source.remote) and what the freshness mode makes of it: pure logic, no mount
(the mounts are in tests/mount/test_mount_remote.py)."""

from __future__ import annotations

import os
from pathlib import Path

from sparsefs.app import doctor
from sparsefs.source import remote
from sparsefs.source.freshness import INOTIFY, ON_ACCESS, Freshness
from sparsefs.source.remote import BlindMount, SourceKind

MOUNTINFO = """\
22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
30 22 0:40 / /ws rw shared:2 - fuse.sparsefs sparsefs rw
31 22 0:41 / /ws/data rw shared:3 - nfs4 server:/export rw
32 31 0:42 / /ws/data/inner rw shared:4 - tmpfs tmpfs rw
33 22 0:43 / /ws/bucket rw shared:5 - fuse.rclone remote: rw
34 22 0:44 / /ws/ntfs rw shared:6 - fuseblk /dev/sdb1 rw
35 22 0:45 / /ws/with\\040space rw shared:7 - cifs //host/share rw
36 22 0:46 / /ws/scratch rw shared:8 - nfs4 server:/scratch rw
37 22 0:47 / /ws/scratch rw shared:9 - tmpfs tmpfs rw
38 22 0:48 / /wsx/other rw shared:10 - nfs4 server:/other rw
"""


def test_mounts_under_the_root_that_inotify_is_blind_to(tmp_path: Path) -> None:
    table = tmp_path / "mountinfo"
    table.write_text(MOUNTINFO)
    found = remote.blind_mounts("/ws", table)
    assert found == (BlindMount("bucket", "fuse.rclone"), BlindMount("data", "nfs4"),
                     BlindMount("with space", "cifs"))  # the root itself (ours), fuseblk, a tmpfs over an
    # nfs4 on the same point, a mount under a blind one, and /wsx (not under /ws) are left out
    assert found[1].covers("data/a.txt") and found[1].covers("data") and not found[1].covers("database")


def test_the_roots_own_filesystem_comes_from_its_fd(tmp_path: Path) -> None:
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        kind = remote.classify(fd, str(tmp_path), tmp_path / "missing-mountinfo")
    finally:
        os.close(fd)
    assert kind.root_type == "local" and not kind.root_blind and kind.blind_mounts == ()
    assert kind.magic is not None and kind.magic not in remote.BLIND_MAGIC
    nfs = SourceKind("nfs", 0x6969)
    assert nfs.root_blind and nfs.describe().startswith("the source is on nfs (statfs f_type 0x6969)")


def test_type_names() -> None:
    for blind in ("nfs", "nfs4", "cifs", "smb3", "ceph", "9p", "virtiofs", "fuse", "fuse.sshfs", "fuse.s3fs"):
        assert remote.is_blind_type(blind), blind
    for local in ("ext4", "xfs", "btrfs", "tmpfs", "overlay", "fuseblk", "fuse.sparsefs"):
        assert not remote.is_blind_type(local), local


def test_blind_paths_are_checked_on_open_and_never_cached_long() -> None:
    changes: list[str] = []
    sizes = {"shared/a.txt": 1, "local.txt": 1}
    freshness = Freshness(changes.append, lambda rel: os.stat_result((0o100644, 1, 1, 1, 0, 0, sizes[rel],
                                                                       0, 0, 0)))
    freshness.watching(lambda: 3, lambda: None)
    freshness.set_blind((BlindMount("shared", "nfs4"),))
    assert freshness.mode == INOTIFY
    assert freshness.watched("/local.txt") and not freshness.watched("/shared/a.txt")
    assert not freshness.watched(None)  # a name not known: could be under the share
    assert freshness.checks_on_open("shared/a.txt") and not freshness.checks_on_open("local.txt")
    freshness.check_open("shared/a.txt")
    freshness.check_open("local.txt")  # watched: no stat at all
    sizes["shared/a.txt"] = 2
    freshness.check_open("shared/a.txt")
    assert changes == ["shared/a.txt"] and freshness.checks == 2
    freshness.check_on_access("inotify watch limit reached: ...")
    assert freshness.mode == ON_ACCESS and not freshness.watched("/local.txt")


def test_a_share_that_appears_while_serving_distrusts_what_it_has_not_seen() -> None:
    changes: list[str] = []
    freshness = Freshness(changes.append, lambda rel: os.stat_result((0o100644, 1, 1, 1, 0, 0, 5, 0, 0, 0)))
    freshness.watching(lambda: 1, lambda: None)
    freshness.set_blind((BlindMount("later", "nfs4"),), while_serving=True)
    freshness.check_open("later/x.txt")  # pages of it may have been cached before the share was noticed
    assert changes == ["later/x.txt"]


def test_doctor_says_which_mode_and_why() -> None:
    on_nfs = doctor._watcher_check("m", {"mode": "on-access", "watches": 0, "filesystem": "nfs",
                                         "reason": SourceKind("nfs", 0x6969).describe()})
    assert on_nfs.ok and "checked on each open: the source is on nfs" in on_nfs.detail
    mixed = doctor._watcher_check("m", {"mode": "inotify", "watches": 4, "max_user_watches": 8192,
                                        "checked_on_access": [{"path": "data", "fs": "nfs4"}],
                                        "reason": SourceKind("local", 0xEF53, (BlindMount("data", "nfs4"),))
                                        .describe()})
    assert mixed.ok and "watched by inotify" in mixed.detail and "'data' (nfs4)" in mixed.detail
    capped = doctor._watcher_check("m", {"mode": "on-access", "watches": 0, "reason": (
        "inotify watch limit reached: SPARSEFS_MAX_WATCHES=1 (this daemon's own share of "
        "fs.inotify.max_user_watches=8192), 1 directories watched, could not watch 'a'")})
    assert not capped.ok and "raise SPARSEFS_MAX_WATCHES" in capped.fix

