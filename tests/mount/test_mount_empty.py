"""Empty folders and files through a real mount, both backends (issue 25.9): a proper small pack that says so,
never a 0-byte pack; `@full` of an empty artifact is its faithful full view (0 bytes, as `cat` of it)."""

from __future__ import annotations

from tests import mountutil
from tests.conftest import is_pack

Mount = mountutil.Mount


def test_an_empty_folder_or_file_reads_as_a_pack_that_says_it_is_empty(mirror: Mount) -> None:
    mnt = mirror.mountpoint
    (mnt / "empty").mkdir()
    (mnt / "blank.txt").write_text("")
    for name in ("empty@scout", "empty@intent=zeppelin fleet size", "empty@focus=a.md", "empty@collect=budget",
                 "blank.txt@scout", "blank.txt@intent=zeppelin fleet size", "blank.txt@refine=budget"):
        text = (mnt / name).read_text()
        assert (mnt / name).stat().st_size == len(text.encode()) > 0, name
        assert is_pack(text) and " · empty" in text.split("\n", 1)[0], (name, text)
    assert "folder: 0 files" in (mnt / "empty@scout").read_text()
    assert "0 chars" in (mnt / "blank.txt@scout").read_text()
    assert (mnt / "empty@full").read_bytes() == b"" and (mnt / "blank.txt@full").read_bytes() == b""
