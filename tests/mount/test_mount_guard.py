"""The plain-read guard on a real mount, both backends: real cat, cp, bash, Python and Node as the clients.

A stand-in agent harness (``HARNESS``) is the guarded root: a Python process that
runs each shell command with its output captured through a pipe it reads (as
agent harnesses do) and reads or writes files in-process (its Read/Write tools).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from readers.kit.source import MemorySource
from readers.pdf.reader import PdfReader
from sparsefs.guard.card import END, MARK
from sparsefs.guard.policy import REOPEN_S
from tests import mountutil
from tests.conftest import DATA, HANG_GUARD_S, kernel_family

FILING = DATA / "pdf" / "filings" / "3M_2022_10K.pdf"  # 252 pages
PAPER = DATA / "pdf" / "papers" / "2304.02623v1.pdf"
Mount = mountutil.Mount
HARNESS = r"""
import base64, json, subprocess, sys
for line in sys.stdin:
    op = json.loads(line)
    if op["op"] == "sh":
        done = subprocess.run(["bash", "-c", op["cmd"]], cwd=op["cwd"], capture_output=True, timeout=60)
        out, rc = done.stdout, done.returncode
    elif op["op"] == "read":
        with open(op["path"], "rb") as f:
            out, rc = f.read(), 0
    else:
        with open(op["path"], "wb") as f:
            out, rc = b"", f.write(base64.b64decode(op["data"])) * 0
    print(json.dumps({"out": base64.b64encode(out).decode(), "rc": rc}), flush=True)
"""


class Harness:
    """Drives the harness process: one request, one reply."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", HARNESS], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def _ask(self, **op: str) -> bytes:
        import base64

        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(op) + "\n")
        self.process.stdin.flush()
        reply = json.loads(self.process.stdout.readline())
        assert reply["rc"] == 0, reply
        return base64.b64decode(reply["out"])

    def sh(self, cmd: str, cwd: Path) -> bytes:
        return self._ask(op="sh", cmd=cmd, cwd=str(cwd))

    def read(self, path: Path) -> bytes:
        return self._ask(op="read", path=str(path))

    def write(self, path: Path, data: bytes) -> None:
        import base64

        self._ask(op="write", path=str(path), data=base64.b64encode(data).decode())

    def close(self) -> None:
        self.process.kill()
        self.process.wait()


@pytest.fixture(scope="module")
def filing_text() -> bytes:
    """The 250-page filing's text, as its PdfReader full view."""
    return PdfReader().parse(MemorySource(FILING.name, FILING.read_bytes())).full_view.encode()


@pytest.fixture
def source(tmp_path: Path, filing_text: bytes) -> Path:
    src = tmp_path / "src"
    (src / "docs").mkdir(parents=True)
    (src / "docs" / "filing.txt").write_bytes(filing_text)
    (src / "docs" / "filing-copy.txt").write_bytes(filing_text)
    (src / "docs" / "small.md").write_text("# Notes\n\nA short note.\n")
    lines = "".join(f"row {n}, value {n * 7}\n" for n in range(4000))
    (src / "docs" / "a.txt").write_text(lines)
    (src / "docs" / "b.txt").write_text(lines.upper())
    (src / "loader.py").write_text("# generated\n" + "X = 1\n" * 5000)
    (src / "run.txt").write_text("#!/bin/sh\n" + "echo hello\n" * 3000)
    shutil.copy(FILING, src / "docs" / "3m.pdf")
    shutil.copy(PAPER, src / "docs" / "paper.pdf")
    return src


@pytest.fixture
def harness() -> Iterator[Harness]:
    driver = Harness()
    try:
        yield driver
    finally:
        driver.close()


def _mount(source: Path, tmp_path: Path, backend: str, *guard: str) -> Mount:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    return mountutil.start(source, mnt, tmp_path / "state", *guard, backend=backend)


def _stats(mount: Mount) -> dict[str, Any]:
    return dict(json.loads((mount.mountpoint / ".sparsefs" / "stats.json").read_text()))


def _is_card(data: bytes) -> bool:
    return data.startswith(MARK.encode()) and data.endswith((END + "\n").encode()) and len(data) < 12_000


def _stop(mount: Mount) -> None:
    mountutil.stop(mount)
    assert "Traceback" not in mount.stderr(), mount.stderr()


def test_guarded_cat_gets_the_card_then_the_bytes_and_cp_outside_is_faithful(
    source: Path, tmp_path: Path, backend: str, harness: Harness
) -> None:
    mount = _mount(source, tmp_path, backend, f"--guard-pid={harness.process.pid}", "--guard-kinds=pdf,text")
    docs, original = mount.mountpoint / "docs", (source / "docs" / "filing.txt").read_bytes()
    try:
        with mountutil.hang_guard(mount, HANG_GUARD_S):
            copied = tmp_path / "copied"
            subprocess.run(["cp", str(docs / "filing.txt"), str(copied)], check=True, timeout=30)
            first, second = harness.sh("cat filing.txt", docs), harness.sh("cat filing.txt", docs)
            lines, stats = _log_and_stats(mount, 2)
            kept = {name: harness.sh(f"cat {name}", mount.mountpoint) for name in ("docs/small.md", "loader.py")}
            kept["run.txt"] = harness.sh("cat run.txt", mount.mountpoint)
            grep = harness.sh("grep -c Minnesota filing-copy.txt", docs)  # not a display tool
            scout = harness.sh("cat 'filing-copy.txt@scout'", docs)  # what the card suggests works for cat
            started = time.monotonic()
            pdf = harness.sh("cat 3m.pdf", docs)  # cold: decided without waiting for the 250-page parse
            pdf_took = time.monotonic() - started
            pdf_again = harness.sh("cat 3m.pdf", docs)
            report = _stats(mount)
    finally:
        _stop(mount)
    assert copied.read_bytes() == original  # unguarded cp
    assert _is_card(first) and b"filing.txt@intent=" in first and b"@raw" in first and b"@full" in first
    assert second == original
    for name, data in kept.items():
        assert data == (source / name).read_bytes(), name
    assert int(grep) > 0 and scout.decode().startswith("docs/filing-copy.txt@scout")
    assert _is_card(pdf) and b"252 pages" in pdf and pdf_took < 2.0, pdf_took
    assert pdf_again == FILING.read_bytes()
    assert report["guard_cards"] == 2 and report["guard_insisted_reads"] == 2 and report["guard_fail_open"] == 0
    length = lines[0]["L"]  # the log and `sparsefs stats` count the card and the insisted read as exposure
    assert [line["decision"] for line in lines] == ["guard-card", "insisted"] and lines[1]["L"] == length
    assert lines[0]["fingerprint"] == lines[1]["fingerprint"] and lines[1]["episode"]
    assert stats["bad_lines"] == 0 and stats["decisions"] == {"guard-card": 1, "insisted": 1}
    assert stats["chars_exposed"] == len(first.decode()) + length and stats["full_read_chars"] == length


def _log_and_stats(mount: Mount, count: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The guard's log lines (written in the background once L is known) and `sparsefs stats --json`."""
    log = mount.mountpoint / ".sparsefs" / "log.jsonl"
    assert mountutil.wait_for(lambda: log.read_text().count('"plain-read"') >= count, timeout=30)
    done = subprocess.run(
        [sys.executable, "-m", "sparsefs", "stats", str(mount.mountpoint), "--json"],
        capture_output=True,
        timeout=60,
        check=True,
    )
    return [json.loads(line) for line in log.read_text().splitlines()], json.loads(done.stdout)


def test_pipes_redirects_and_shell_reads_get_the_bytes(source: Path, tmp_path: Path, backend: str) -> None:
    """Only output a person or the harness reads is carded: data flowing on is never a card."""
    shell = subprocess.Popen(["bash", "-s"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=tmp_path)
    harness = Harness()
    mount = _mount(source, tmp_path, backend, f"--guard-pid={harness.process.pid}", f"--guard-pid={shell.pid}")
    docs, out = mount.mountpoint / "docs", tmp_path / "out"
    out.mkdir()
    a, b = (source / "docs" / "a.txt").read_bytes(), (source / "docs" / "b.txt").read_bytes()
    script = f"cd {docs}\nn=0; while read -r l; do n=$((n+1)); done < a.txt; echo $n > {out}/loop\ncat b.txt\n"
    try:
        with mountutil.hang_guard(mount, HANG_GUARD_S):
            by_root_shell, _ = shell.communicate(script.encode(), timeout=60)
            counted = harness.sh("cat a.txt | wc -l", docs)
            harness.sh(f"cat a.txt b.txt > {out}/merged; cat a.txt > {out}/one; nl a.txt > {out}/nl", docs)
            captured = harness.sh('x=$(cat a.txt); printf %s "$x" | wc -c', docs)
            with open(docs / "b.txt", "rb") as held:  # an unguarded reader holds it (kernel: by passthrough)
                held.read(1)
                beside = harness.sh("cat b.txt", docs)
            viewed = harness.sh("cat a.txt", docs)  # the card was not spent on any of the above
            report = _stats(mount)
    finally:
        _stop(mount)
        shell.kill()
        shell.wait()
        harness.close()
    assert int((out / "loop").read_text()) == 4000 and by_root_shell == b
    assert int(counted) == 4000 and (out / "merged").read_bytes() == a + b and (out / "one").read_bytes() == a
    assert len((out / "nl").read_bytes().splitlines()) == 4000 and int(captured) == len(a) - 1
    # kernel: a card beside a passthrough open would be refused (EIO), so the guard serves the bytes
    assert beside == b if kernel_family(backend) else _is_card(beside)
    assert _is_card(viewed)
    assert report["guard_cards"] == (1 if kernel_family(backend) else 2) and report["guard_insisted_reads"] == 0


def test_a_harness_that_reads_modifies_and_writes_never_writes_a_card(
    source: Path, tmp_path: Path, backend: str, harness: Harness
) -> None:
    mount = _mount(source, tmp_path, backend, f"--guard-pid={harness.process.pid}")
    docs, a = mount.mountpoint / "docs", (source / "docs" / "a.txt").read_bytes()
    try:
        with mountutil.hang_guard(mount, HANG_GUARD_S):
            first, sniffed = harness.read(docs / "a.txt"), harness.read(docs / "a.txt")  # same pid, at once
            time.sleep(REOPEN_S + 0.2)
            insisted = harness.read(docs / "a.txt")
            for n in range(2):  # two read-modify-write edits, as an Edit tool makes them
                harness.write(docs / "a.txt", harness.read(docs / "a.txt").replace(b"row", b"Row", 1 + n))
                time.sleep(0.1)
            created = docs / "new.md"
            harness.write(created, a)  # written first, then read: never carded
            new = harness.read(created)
            report = _stats(mount)
    finally:
        _stop(mount)
    assert _is_card(first) and sniffed == first and insisted == a
    assert (source / "docs" / "a.txt").read_bytes() == a.replace(b"row", b"Row", 3)
    assert new == a and report["guard_cards"] == 1 and report["guard_insisted_reads"] == 1


def test_guarded_python_and_node_read_a_complete_card(source: Path, tmp_path: Path, backend: str) -> None:
    if not shutil.which("node"):
        pytest.fail("node is not installed (scripts/setup installs nodejs)")
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "guardedpy").symlink_to(os.path.realpath(sys.executable))
    (tools / "guardednode").symlink_to(os.path.realpath(shutil.which("node") or "node"))
    mount = _mount(source, tmp_path, backend, "--guard-comm=guardedpy,guardednode")
    docs = mount.mountpoint / "docs"
    py = (
        "import os, sys\n"
        "with open(sys.argv[1], encoding='utf-8') as f:\n"
        "    text = f.read(); size = os.fstat(f.fileno()).st_size\n"
        "sys.stdout.write(f'{size}\\n' + text)\n"
    )
    node = "const fs = require('fs'); process.stdout.write(fs.readFileSync(process.argv[1]));"
    try:
        with mountutil.hang_guard(mount, HANG_GUARD_S):
            by_python = _run([str(tools / "guardedpy"), "-c", py, str(docs / "filing.txt")])
            by_node = _run([str(tools / "guardednode"), "-e", node, str(docs / "filing-copy.txt")])
            small = _run([str(tools / "guardedpy"), "-c", py, str(docs / "small.md")])
            again = _run([str(tools / "guardednode"), "-e", node, str(docs / "filing-copy.txt")])
    finally:
        _stop(mount)
    size, _, card = by_python.partition(b"\n")
    assert _is_card(card) and int(size) == len(source.joinpath("docs/filing.txt").read_bytes())
    assert _is_card(by_node)
    assert small.partition(b"\n")[2] == (source / "docs" / "small.md").read_bytes()
    assert again == (source / "docs" / "filing-copy.txt").read_bytes()


def _run(command: list[str]) -> bytes:
    done = subprocess.run(command, capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout
