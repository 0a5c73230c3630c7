"""The kernel backend's pure parts: protocol structs, the node table, and per-request error handling."""

from __future__ import annotations

import errno
import os
import stat
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from sparsefs.fuse import features
from sparsefs.fuse.kernel import keeping as kernel_keeping
from sparsefs.fuse.kernel import proto as k
from sparsefs.fuse.kernel.nodes import ROOT, NodeTable
from sparsefs.fuse.kernel.session import Session
from sparsefs.fuse.kernel.standby import Standby
from sparsefs.source.rootfs import SourceRoot
from sparsefs.store.stats import Stats
from sparsefs.vfs.binding import LateBinding
from sparsefs.vfs.core import Core

# ---- struct layouts (sizes from include/uapi/linux/fuse.h, 7.40) -------------


def test_struct_sizes_match_the_kernel_abi() -> None:
    assert k.IN_HEADER.size == 40 and k.OUT_HEADER.size == 16
    assert k.ATTR.size == 88
    assert len(k.pack_entry(5, {"st_ino": 1, "st_mode": stat.S_IFREG}, 1.0)) == 128
    assert len(k.pack_attr_out({"st_ino": 1, "st_mode": stat.S_IFREG}, 1.0)) == 104
    assert k.INIT_OUT.size == 64 and k.OPEN_OUT.size == 16 and k.STATFS_OUT.size == 80
    assert k.SETATTR_IN.size == 88 and k.WRITE_IN.size == 40 and k.BACKING_MAP.size == 16


def test_ioctl_numbers_encode_direction_size_and_magic() -> None:
    def ioc(direction: int, nr: int, size: int) -> int:
        return direction << 30 | size << 16 | 229 << 8 | nr

    assert ioc(2, 0, 4) == k.DEV_IOC_CLONE
    assert ioc(1, 1, k.BACKING_MAP.size) == k.DEV_IOC_BACKING_OPEN
    assert ioc(1, 2, 4) == k.DEV_IOC_BACKING_CLOSE


def test_dirents_are_padded_to_eight_bytes() -> None:
    for name in (b"a", b"abcdefgh", b"x" * 13):
        record = k.pack_dirent(7, 1, name, stat.S_IFDIR | 0o755)
        assert len(record) % 8 == 0
        ino, off, namelen, kind = k.DIRENT_HEAD.unpack_from(record)
        assert (ino, off, namelen, kind) == (7, 1, len(name), stat.S_IFDIR >> 12)


def test_attr_splits_nanosecond_times() -> None:
    packed = k.pack_attr({"st_ino": 3, "st_mode": 0o100644, "st_size": 10, "st_mtime": 1_700_000_000_123_456_789})
    fields = k.ATTR.unpack(packed)
    assert fields[0] == 3 and fields[1] == 10 and fields[4] == 1_700_000_000 and fields[7] == 123_456_789


def test_request_parse_drops_extensions_from_the_body() -> None:
    body = b"name\0" + b"\0" * 3
    ext = b"E" * 16
    raw = k.IN_HEADER.pack(40 + len(body) + len(ext), k.LOOKUP, 9, 1, 0, 0, 123, 2, 0) + body + ext
    request = k.Request.parse(raw)
    assert (request.opcode, request.unique, request.pid) == (k.LOOKUP, 9, 123)
    assert bytes(request.body) == body
    assert k.split_names(request.body, 1) == ["name"]


def test_split_names_rejects_a_missing_terminator() -> None:
    with pytest.raises(ValueError):
        k.split_names(b"old\0new", 2)
    assert k.split_names(b"old\0new\0", 2) == ["old", "new"]
    assert k.split_names("caf\xe9".encode("latin-1") + b"\0", 1) == [os.fsdecode(b"caf\xe9")]


def test_init_grants_only_what_was_offered_and_stack_depth_follows_passthrough() -> None:
    def offer(flags: int) -> k.InitOffer:
        body = k.INIT_IN.pack(7, 45, 131072, flags & 0xFFFFFFFF, flags >> 32) + b"\0" * 44
        return k.InitOffer.parse(memoryview(body))

    full = offer(k.INIT_EXT | k.PASSTHROUGH | k.ASYNC_READ)
    assert full.flags & k.PASSTHROUGH
    out = k.INIT_OUT.unpack(k.pack_init_reply(full, k.PASSTHROUGH | k.ASYNC_READ | k.MAX_PAGES, 1 << 20))
    major, minor, _, flags, _, _, max_write, _, max_pages, _, flags2, depth = out
    assert (major, minor, max_write, max_pages) == (7, 40, 1 << 20, 256)
    assert flags == k.ASYNC_READ and flags2 == k.PASSTHROUGH >> 32 and depth == 1
    bare = offer(k.ASYNC_READ)  # no INIT_EXT: flags2 is not even read
    out = k.INIT_OUT.unpack(k.pack_init_reply(bare, k.PASSTHROUGH | k.ASYNC_READ, 1 << 20))
    assert out[10] == 0 and out[11] == 0


# ---- node table ----------------------------------------------------------------


def test_lookups_count_and_the_same_inode_keeps_its_node() -> None:
    nodes = NodeTable(root_ino=2)
    first = nodes.remember(ROOT, "a", ino=10)
    again = nodes.remember(ROOT, "a", ino=10)
    assert first is again and first.nlookup == 2
    assert nodes.forget(first.nodeid, 1) is None
    assert nodes.forget(first.nodeid, 1) is first
    assert nodes.peek(first.nodeid) is None and nodes.find("/a") is None


def test_a_replaced_file_gets_a_new_node_and_the_old_one_detaches() -> None:
    nodes = NodeTable(root_ino=2)
    old = nodes.remember(ROOT, "f", ino=10)
    new = nodes.remember(ROOT, "f", ino=11)
    assert new.nodeid != old.nodeid
    assert nodes.path(old.nodeid) is None and nodes.path(new.nodeid) == "/f"
    assert nodes.forget(old.nodeid, 1) is old
    assert nodes.find("/f") is new  # forgetting the old node leaves the new name alone


def test_renaming_a_directory_moves_everything_below_it() -> None:
    nodes = NodeTable(root_ino=2)
    folder = nodes.remember(ROOT, "dir", ino=20)
    leaf = nodes.remember(folder.nodeid, "leaf.txt", ino=21)
    other = nodes.remember(ROOT, "other", ino=22)
    nodes.rename(ROOT, "dir", other.nodeid, "moved")
    assert nodes.path(leaf.nodeid) == "/other/moved/leaf.txt"
    assert nodes.find("/other/moved/leaf.txt") is leaf and nodes.find("/dir") is None


def test_rename_over_detaches_the_target_and_exchange_swaps() -> None:
    nodes = NodeTable(root_ino=2)
    a, b = nodes.remember(ROOT, "a", ino=1), nodes.remember(ROOT, "b", ino=2)
    nodes.rename(ROOT, "a", ROOT, "b", exchange=True)
    assert (nodes.path(a.nodeid), nodes.path(b.nodeid)) == ("/b", "/a")
    nodes.rename(ROOT, "b", ROOT, "a")
    assert nodes.path(a.nodeid) == "/a" and nodes.path(b.nodeid) is None


def test_unlink_detaches_and_children_of_a_detached_directory_have_no_path() -> None:
    nodes = NodeTable(root_ino=2)
    folder = nodes.remember(ROOT, "d", ino=5)
    child = nodes.remember(folder.nodeid, "c", ino=6)
    nodes.detach(ROOT, "d")
    assert nodes.path(folder.nodeid) is None and nodes.path(child.nodeid) is None
    assert nodes.child_path(folder.nodeid, "x") is None


def test_hard_links_share_one_node_and_keep_it_while_a_name_is_left() -> None:
    nodes = NodeTable(root_ino=2)
    reg, folder = stat.S_IFREG | 0o644, nodes.remember(ROOT, "d", ino=5, dev=1, mode=stat.S_IFDIR | 0o755)
    a = nodes.remember(ROOT, "a", ino=10, dev=1, mode=reg, nlink=1)
    b = nodes.remember(folder.nodeid, "b", ino=10, dev=1, mode=reg, nlink=2)  # `ln a d/b`
    c = nodes.remember(ROOT, "c", ino=10, dev=1, mode=reg, nlink=3)
    assert a is b is c and a.nlookup == 3
    assert nodes.find("/d/b") is a and nodes.path(a.nodeid) == "/a"
    assert nodes.remember(ROOT, "x", ino=10, dev=2, mode=reg, nlink=2) is not a  # another device
    assert nodes.detach(ROOT, "a") is a and nodes.path(a.nodeid) in ("/d/b", "/c")  # another name leads
    nodes.rename(ROOT, "c", ROOT, "c2")
    assert nodes.find("/c2") is a and nodes.find("/c") is None
    nodes.rename(ROOT, "c2", folder.nodeid, "b")  # two names of one inode: rename(2) changes nothing
    assert nodes.find("/c2") is a and nodes.find("/d/b") is a
    nodes.detach(folder.nodeid, "b")
    nodes.detach(ROOT, "c2")
    assert a.parent == 0 and nodes.path(a.nodeid) is None
    assert nodes.remember(ROOT, "a", ino=10, dev=1, mode=reg, nlink=2) is not a  # a detached node is never reused
    assert nodes.forget(a.nodeid, 3) is a
    same_dir = nodes.remember(ROOT, "d2", ino=5, dev=1, mode=stat.S_IFDIR | 0o755, nlink=2)
    assert same_dir is not folder  # directories are never shared


def test_the_root_is_never_forgotten() -> None:
    nodes = NodeTable(root_ino=2)
    assert nodes.forget(ROOT, 100) is None and nodes.path(ROOT) == "/"


# ---- session: one request's failure never ends the loop ---------------------------


class FakeDevice:
    """Records what the session sends instead of writing to /dev/fuse."""

    def __init__(self) -> None:
        self.fd = -1
        self.sent: list[bytes] = []
        self.notes: list[tuple[int, bytes]] = []
        self.lock = threading.Lock()

    def send(self, fd: int, data: bytes) -> None:
        with self.lock:
            self.sent.append(data)

    def send_parts(self, fd: int, unique: int, payload: memoryview) -> None:
        self.send(fd, k.reply(unique, bytes(payload)))

    def backing_open(self, fd: int) -> int:
        raise OSError(errno.EPERM, "not in a unit test")

    def backing_close(self, backing_id: int) -> None:
        return None

    def notify(self, code: int, payload: bytes) -> bool:
        with self.lock:
            self.notes.append((code, payload))
        return True

    def replies(self) -> dict[int, int]:
        """unique -> error (0 for success)."""
        with self.lock:
            return {k.OUT_HEADER.unpack_from(m)[2]: -k.OUT_HEADER.unpack_from(m)[1] for m in self.sent}


@contextmanager
def session_over(tmp_path: Path, files: dict[str, str], device: FakeDevice) -> Iterator[Session]:
    """A session (never mounted) over a source holding ``files``, talking to ``device``."""
    src = tmp_path / "src"
    src.mkdir()
    for name, text in files.items():
        (src / name).write_text(text)
    root = SourceRoot.open(str(src))
    stats = Stats(tmp_path / "state" / "log.jsonl", backend="kernel")
    binding = LateBinding()
    session = Session(Core(root, stats, binding=binding), binding, str(tmp_path / "mnt"),
                      device=device)  # type: ignore[arg-type]
    try:
        yield session
    finally:
        session.dispatcher.shutdown()
        stats.close()
        root.close()


@pytest.fixture
def session(tmp_path: Path) -> Iterator[tuple[Session, FakeDevice]]:
    device = FakeDevice()
    with session_over(tmp_path, {"file.txt": "hello\n"}, device) as sess:
        yield sess, device


def _raw(opcode: int, unique: int, nodeid: int = ROOT, body: bytes = b"") -> bytes:
    return k.IN_HEADER.pack(40 + len(body), opcode, unique, nodeid, 0, 0, os.getpid(), 0, 0) + body


def _request(opcode: int, unique: int, nodeid: int = ROOT, body: bytes = b"") -> k.Request:
    return k.Request.parse(_raw(opcode, unique, nodeid, body))


def test_lookup_getattr_and_missing_names(session: tuple[Session, FakeDevice]) -> None:
    sess, device = session
    sess._dispatch(-1, _request(k.LOOKUP, 1, body=b"file.txt\0"))
    sess._dispatch(-1, _request(k.LOOKUP, 2, body=b"absent\0"))
    assert device.replies() == {1: 0, 2: errno.ENOENT}
    nodeid = k.ENTRY_HEAD.unpack_from(device.sent[0], k.OUT_HEADER.size)[0]
    sess._dispatch(-1, _request(k.GETATTR, 3, nodeid, k.GETATTR_IN.pack(0, 0, 0)))
    attr = k.ATTR.unpack_from(device.sent[-1], k.OUT_HEADER.size + k.ATTR_OUT_HEAD.size)
    assert attr[1] == len("hello\n")


def test_a_bug_in_one_request_answers_eio_and_the_next_request_works(
        session: tuple[Session, FakeDevice], caplog: pytest.LogCaptureFixture) -> None:
    sess, device = session
    sess._dispatch(-1, _request(k.GETATTR, 1, nodeid=424242, body=k.GETATTR_IN.pack(0, 0, 0)))  # unknown node
    sess._dispatch(-1, _request(k.LOOKUP, 2, body=b"no terminator"))  # malformed
    sess._dispatch(-1, _request(k.GETLK, 3))  # not implemented
    sess._dispatch(-1, _request(k.LOOKUP, 4, body=b"file.txt\0"))
    assert device.replies() == {1: errno.EIO, 2: errno.EIO, 3: errno.ENOSYS, 4: 0}
    assert "internal error" in caplog.text


def test_forget_gets_no_reply_and_release_does(session: tuple[Session, FakeDevice]) -> None:
    sess, device = session
    sess._dispatch(-1, _request(k.LOOKUP, 1, body=b"file.txt\0"))
    nodeid = k.ENTRY_HEAD.unpack_from(device.sent[0], k.OUT_HEADER.size)[0]
    sess._dispatch(-1, _request(k.FORGET, 2, nodeid, k.U64.pack(1)))
    sess._dispatch(-1, _request(k.RELEASE, 3, nodeid, k.RELEASE_IN.pack(99, 0, 0) + b"\0" * 8))
    assert device.replies() == {1: 0, 3: 0}
    assert sess.ops.nodes.peek(nodeid) is None


def test_an_interrupted_request_still_queued_answers_eintr(session: tuple[Session, FakeDevice]) -> None:
    sess, device = session
    release = threading.Event()
    blockers = [sess.dispatcher.pool.submit(release.wait, 10) for _ in range(8)]  # every slow worker busy
    sess._dispatch(-1, _request(k.LOOKUP, 7, body=b"file.txt@intent=hello\0"))  # '@': goes to the pool
    sess._dispatch(-1, _request(k.INTERRUPT, 8, body=k.U64.pack(7)))
    release.set()
    for blocker in blockers:
        blocker.result(timeout=10)
    deadline = time.monotonic() + 5
    while 7 not in device.replies() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert device.replies() == {7: errno.EINTR}


def test_open_falls_back_to_daemon_reads_when_passthrough_is_refused(session: tuple[Session, FakeDevice]) -> None:
    sess, device = session
    sess.ops.files.passthrough = True  # the fake device refuses BACKING_OPEN, as a kernel without it would
    sess._dispatch(-1, _request(k.LOOKUP, 1, body=b"file.txt\0"))
    nodeid = k.ENTRY_HEAD.unpack_from(device.sent[0], k.OUT_HEADER.size)[0]
    sess._dispatch(-1, _request(k.OPEN, 2, nodeid, k.OPEN_IN.pack(os.O_RDONLY, 0)))
    fh, flags, backing = k.OPEN_OUT.unpack_from(device.sent[-1], k.OUT_HEADER.size)
    assert flags == k.FOPEN_KEEP_CACHE and backing == 0 and not sess.ops.nodes.get(nodeid).passthrough
    sess._dispatch(-1, _request(k.READ, 3, nodeid, k.READ_IN.pack(fh, 0, 100, 0) + b"\0" * 16))
    assert device.sent[-1][k.OUT_HEADER.size:] == b"hello\n"
    sess._dispatch(-1, _request(k.RELEASE, 4, nodeid, struct.pack("=QIIQ", fh, 0, 0, 0)))
    assert device.replies()[4] == 0 and sess.ops.open_handles() == 0


class GrantingDevice(FakeDevice):
    """A device that grants backing ids and remembers which are open."""

    def __init__(self) -> None:
        super().__init__()
        self.backings: set[int] = set()
        self.next_id = 1

    def backing_open(self, fd: int) -> int:
        self.next_id += 1
        self.backings.add(self.next_id)
        return self.next_id

    def backing_close(self, backing_id: int) -> None:
        self.backings.remove(backing_id)


def test_kept_files_reopen_without_a_system_call_and_idle_ones_are_let_go(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for index in range(5):
        (src / f"f{index}").write_text(str(index))
    root = SourceRoot.open(str(src))
    stats = Stats(tmp_path / "state" / "log.jsonl", backend="kernel")
    device = GrantingDevice()
    binding = LateBinding()
    session = Session(Core(root, stats, binding=binding), binding, str(tmp_path / "mnt"),
                      device=device)  # type: ignore[arg-type]
    files = session.ops.files
    files.passthrough, files.idle_limit = True, 2
    monkeypatch.setattr(kernel_keeping, "BACKED_LIMIT", 1)
    try:
        nodes = [session.ops.nodes.remember(ROOT, f"f{index}", (src / f"f{index}").stat().st_ino)
                 for index in range(5)]
        for node in nodes:
            fh = k.OPEN_OUT.unpack(files.open(node, os.O_RDONLY))[0]
            files.release(fh)
        # two keep their fd and backing id, the next one its backing id alone (no fd), the two oldest nothing
        assert files.kept_idle() == 3 and len(device.backings) == 3
        assert all(node.keeper_fd < 0 and node.backing_id is None for node in nodes[:2])
        assert nodes[2].keeper_fd < 0 and nodes[2].backing_id is not None
        opens = []
        monkeypatch.setattr(files.core, "open", lambda *args: opens.append(args))
        fh = k.OPEN_OUT.unpack(files.open(nodes[2], os.O_RDONLY))[0]  # reopened from its backing id alone
        assert not opens and files.on_open_file(nodes[2], os.fsync)  # fsync goes by path
        files.release(fh)
        monkeypatch.undo()
        monkeypatch.setattr(kernel_keeping, "BACKED_LIMIT", 1)
        (src / "f4").unlink()  # a kept file's name goes away: its fd keeps answering
        fh = k.OPEN_OUT.unpack(files.open(nodes[4], os.O_RDONLY))[0]
        assert files.with_keeper(nodes[4], os.fstat) is not None
        files.release(fh)
        files.gone_from_tree(nodes[4])
        assert nodes[4].keeper_fd < 0 and files.kept_idle() == 2
        for node in nodes:
            files.forgotten(node)
        assert not device.backings and files.kept_idle() == 0
    finally:
        session.dispatcher.shutdown()
        stats.close()
        root.close()


class PipeDevice(FakeDevice):
    """Requests come through pipes: the main fd and each clone get their own."""

    def __init__(self) -> None:
        super().__init__()
        self.fd, self.main_writer = os.pipe()
        self.clone_writers: list[int] = []

    def clone(self) -> int:
        read_end, write_end = os.pipe()
        self.clone_writers.append(write_end)
        return read_end


def test_the_standby_answers_while_the_reader_is_stuck_in_one_request(tmp_path: Path) -> None:
    device = PipeDevice()
    with session_over(tmp_path, {"file.txt": "hello\n"}, device) as session:
        plain_lookup = session.handlers[k.LOOKUP]

        def lookup(request: k.Request) -> bytes | None:
            if bytes(request.body).startswith(b"slow-disk"):
                time.sleep(1.0)  # a cold stat on a slow disk, answered by the reader itself
            return plain_lookup(request)

        session.handlers[k.LOOKUP] = lookup
        threads = session._start_threads()
        try:
            os.write(device.main_writer, _raw(k.LOOKUP, 1, body=b"slow-disk\0"))
            time.sleep(0.1)
            started = time.monotonic()
            os.write(device.clone_writers[-1], _raw(k.LOOKUP, 2, body=b"file.txt\0"))
            while 2 not in device.replies() and time.monotonic() - started < 5:
                time.sleep(0.005)
            assert device.replies() == {2: 0}, "the standby did not answer while the reader was stuck"
            assert time.monotonic() - started < 0.5 and session.standby.rescued == 1
        finally:
            session.stopping.set()
            session.notifier.stop()
            for writer in (device.main_writer, *device.clone_writers):
                os.close(writer)
            for thread in threads:
                thread.join(timeout=5)
    assert device.replies()[1] == errno.ENOENT


def test_the_standby_watcher_dozes_on_an_idle_mount_and_wakes_with_the_next_request() -> None:
    stopping = threading.Event()
    standby = Standby(stopping)
    standby.last_busy -= 10  # idle for a while
    watcher = threading.Thread(target=standby.watch, daemon=True)
    watcher.start()
    try:
        deadline = time.monotonic() + 2
        while not standby.dozing and time.monotonic() < deadline:
            time.sleep(0.005)
        assert standby.dozing
        standby.started()  # a request that then hangs
        time.sleep(0.1)
        assert not standby.dozing and standby._needed.is_set()
    finally:
        stopping.set()
        watcher.join(timeout=5)


def _offer(minor: int, flags: int) -> k.InitOffer:
    body = k.INIT_IN.pack(7, minor, 131072, flags & 0xFFFFFFFF, flags >> 32) + b"\0" * 44
    return k.InitOffer.parse(memoryview(body))


def test_features_are_granted_one_by_one_from_what_the_kernel_offers(
        session: tuple[Session, FakeDevice], monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 26: a kernel (or a daemon) lacking a feature costs that feature, never the backend."""
    sess, _ = session
    monkeypatch.setattr(features, "passthrough_blocker", lambda: None)
    everything = k.INIT_EXT | k.PASSTHROUGH | k.HANDLE_KILLPRIV_V2 | k.ASYNC_READ | k.MAX_PAGES
    granted = sess.grant(_offer(45, everything))
    assert granted & k.PASSTHROUGH and granted & k.HANDLE_KILLPRIV_V2
    assert sess.ops.files.passthrough and sess.ops.files.killpriv
    old = sess.grant(_offer(31, k.ASYNC_READ | k.MAX_PAGES))  # Linux 5.4: neither offered
    assert not old & (k.PASSTHROUGH | k.HANDLE_KILLPRIV_V2) and old & k.MAX_PAGES
    assert not sess.ops.files.passthrough and not sess.ops.files.killpriv
    report = sess.core.stats.snapshot()["kernel_features"]
    assert report["protocol"] == "7.31" and report["passthrough"] is False and report["killpriv_v2"] is False
    monkeypatch.setattr(features, "passthrough_blocker", lambda: "no CAP_SYS_ADMIN")  # an ordinary user
    assert not sess.grant(_offer(45, everything)) & k.PASSTHROUGH and sess.ops.files.killpriv
    sess.want_passthrough = False  # --no-passthrough
    monkeypatch.setattr(features, "passthrough_blocker", lambda: None)
    assert not sess.grant(_offer(45, everything)) & k.PASSTHROUGH


def test_posix_acls_are_taken_only_where_other_users_read(session: tuple[Session, FakeDevice]) -> None:
    """With --allow-other the kernel must hold other users to the source's ACLs (FUSE_POSIX_ACL); without it
    only the mounting user reaches the mount, and no ACL is asked (issue 24: no byte a caller could not cat)."""
    sess, _ = session
    offered = k.INIT_EXT | k.POSIX_ACL | k.ASYNC_READ
    assert not sess.grant(_offer(45, offered)) & k.POSIX_ACL
    sess.allow_other = True
    assert sess.grant(_offer(45, offered)) & k.POSIX_ACL
    assert sess.core.stats.snapshot()["kernel_features"]["posix_acl"] is True
    assert not sess.grant(_offer(45, k.INIT_EXT | k.ASYNC_READ)) & k.POSIX_ACL  # a kernel before 4.9
