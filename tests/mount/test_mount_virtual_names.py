"""The virtual namespace cannot be planted (issue 24, item 5), on both backends.

A name that reads as a request (``x@scout``, ``y@intent=...``, a typo like ``@scuot``) is never created in
the source, whether its base exists yet or not: create, rename onto it, link, symlink, mknod and mkdir all
answer EROFS. A virtual file that ``stat`` shows answers EROFS to being renamed away, unlinked or changed.
Names whose suffix is no request (``notes.txt@old``) and real files that already have a reserved name keep
working.
"""

from __future__ import annotations

import ctypes
import errno
import os
import subprocess
from pathlib import Path

import pytest

from tests.mountutil import Mount

RENAME_NOREPLACE, RENAME_EXCHANGE = 1, 2
_LIBC = ctypes.CDLL(None, use_errno=True)


def _errno(call: object, *args: object) -> int:
    try:
        call(*args)  # type: ignore[operator]
    except OSError as err:
        return err.errno or 0
    return 0


def _renameat2(old: Path, new: Path, flags: int) -> int:
    done = _LIBC.renameat2(-100, os.fsencode(old), -100, os.fsencode(new), flags)
    return 0 if done == 0 else ctypes.get_errno()


@pytest.mark.parametrize("target", ["annual-report.md@scout", "later.md@scout", "later.md@intent=budget",
                                    "notes.txt@scuot", "src@intent=forecast"])
def test_nothing_creates_a_virtual_name(mirror: Mount, target: str) -> None:
    mnt, src = mirror.mountpoint, mirror.source
    (mnt / "tmp.txt").write_text("planted\n")
    virtual = mnt / target
    assert _errno(os.rename, mnt / "tmp.txt", virtual) == errno.EROFS
    assert _renameat2(mnt / "tmp.txt", virtual, RENAME_NOREPLACE) in (errno.EROFS, errno.EEXIST)
    assert _errno(os.link, mnt / "tmp.txt", virtual) in (errno.EROFS, errno.EEXIST)
    assert _errno(os.symlink, "tmp.txt", virtual) in (errno.EROFS, errno.EEXIST)
    assert _errno(os.mkdir, virtual) in (errno.EROFS, errno.EEXIST)
    assert _errno(os.mkfifo, virtual) in (errno.EROFS, errno.EEXIST)
    assert _errno(lambda: os.close(os.open(virtual, os.O_WRONLY | os.O_CREAT, 0o644))) == errno.EROFS
    assert not (src / target).exists() and not os.path.lexists(src / target)  # nothing landed in the source


def test_a_reserved_name_stays_free_of_shadows_until_its_base_exists(mirror: Mount) -> None:
    """``touch 'x@scout'`` before ``x`` exists must not plant a shadow of the pack to come."""
    mnt = mirror.mountpoint
    assert _errno(lambda: (mnt / "later.md@scout").touch()) == errno.EROFS
    (mnt / "later.md").write_text("# Later\n\nA harbor budget of 4 million.\n" * 200)
    assert (mnt / "later.md@scout").read_text().startswith("later.md@scout")  # the pack, not a planted file
    assert not os.path.lexists(mirror.source / "later.md@scout")


def test_a_virtual_file_cannot_be_renamed_away_or_changed(mirror: Mount) -> None:
    mnt = mirror.mountpoint
    pack = mnt / "annual-report.md@scout"
    assert pack.stat().st_size > 0  # stat shows it ...
    assert _errno(os.rename, pack, mnt / "copy.md") == errno.EROFS  # ... so it is read-only, not absent
    assert _renameat2(mnt / "notes.txt", pack, RENAME_EXCHANGE) == errno.EROFS
    for change in (os.unlink, lambda p: os.chmod(p, 0o600), lambda p: os.utime(p, (1, 1)),
                   lambda p: os.truncate(p, 0), lambda p: os.setxattr(p, "user.x", b"1")):
        assert _errno(change, pack) == errno.EROFS
    assert not (mnt / "copy.md").exists() and (mnt / "notes.txt").read_text()


def test_names_that_are_no_request_and_existing_reserved_files_keep_working(mirror: Mount) -> None:
    mnt, src = mirror.mountpoint, mirror.source
    (mnt / "notes.txt@old").write_text("old notes\n")
    (mnt / "src@v2").mkdir()
    (mnt / "tmp.txt").write_text("backup\n")
    os.rename(mnt / "tmp.txt", mnt / "annual-report.md@backup")
    assert (src / "notes.txt@old").read_text() == "old notes\n" and (src / "src@v2").is_dir()
    assert (src / "annual-report.md@backup").read_text() == "backup\n"
    assert _errno(os.stat, mnt / "notes.txt@ancient") == errno.ENOENT  # absent, not generated
    (src / "notes.txt@scout").write_text("a real file made before the rule\n")  # outside the mount
    real = mnt / "notes.txt@scout"
    assert real.read_text() == "a real file made before the rule\n"  # a real name always wins
    real.write_text("still writable\n")
    os.rename(real, mnt / "renamed.txt")
    assert (src / "renamed.txt").read_text() == "still writable\n" and not (src / "notes.txt@scout").exists()


# What the MCP filesystem server's write_file does (@modelcontextprotocol/server-filesystem, writeFileContent):
# an exclusive create, and on EEXIST a temporary file renamed over the target.
MCP_WRITE_FILE = """
const fs = require("fs");
const [target, content] = process.argv.slice(1);
try {
  fs.writeFileSync(target, content, { encoding: "utf-8", flag: "wx" });
  console.log("created");
} catch (error) {
  if (error.code !== "EEXIST") { console.log(error.code); process.exit(0); }
  const temp = `${target}.${require("crypto").randomBytes(16).toString("hex")}.tmp`;
  fs.writeFileSync(temp, content, "utf-8");
  try { fs.renameSync(temp, target); console.log("replaced"); }
  catch (renamed) { fs.unlinkSync(temp); console.log(renamed.code); }
}
"""


@pytest.mark.parametrize("target", ["annual-report.md@scout", "later.md@intent=x"])
def test_the_mcp_filesystem_servers_write_file_is_refused(mirror: Mount, target: str) -> None:
    mnt, src = mirror.mountpoint, mirror.source
    done = subprocess.run(["node", "-e", MCP_WRITE_FILE, str(mnt / target), "planted"], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.stdout.strip() == "EROFS", (done.stdout, done.stderr)  # an error, never a reported success
    assert not os.path.lexists(src / target) and not [p for p in os.listdir(src) if p.endswith(".tmp")]
