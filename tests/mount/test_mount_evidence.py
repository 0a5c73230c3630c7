"""Evidence reads through a real mount, with real clients."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from tests import mountutil
from tests.clients.test_mount_clients import sh

Mount = mountutil.Mount
INTENT = "annual-report.md@intent=R&D expenses 2023; headcount at year end"


def test_cat_python_and_head_agree_on_a_pack(mirror: Mount) -> None:
    path = mirror.mountpoint / INTENT
    via_cat = sh(["cat", str(path)]).encode()
    assert path.read_bytes() == via_cat
    assert path.stat().st_size == len(via_cat)
    assert sh(["head", "-c", "200", str(path)]).encode() == via_cat[:200]
    assert b"48.2 million" in via_cat and b"1,184" in via_cat
    assert len(via_cat) < 6000 < (mirror.source / "annual-report.md").stat().st_size


def test_shell_quoting_percent_encoding_and_json(mirror: Mount) -> None:
    out = sh("cat 'annual-report.md@intent=revenue 2023 %2F 2022&format=json'", cwd=mirror.mountpoint)
    pack = json.loads(out)
    assert pack["intent"] == "revenue 2023 / 2022" and pack["decision"] == "sparse"


def test_virtual_paths_are_invisible_to_ls_find_grep(mirror: Mount) -> None:
    (mirror.mountpoint / INTENT).read_bytes()
    assert "@" not in sh(["ls", "-a"], cwd=mirror.mountpoint)
    assert "@" not in sh(["find", "."], cwd=mirror.mountpoint)
    assert "@" not in sh(["grep", "-rl", "million", "."], cwd=mirror.mountpoint)


def test_pack_follows_a_write_through_the_mount(mirror: Mount) -> None:
    path = mirror.mountpoint / "annual-report.md@intent=zeppelin fleet"
    before = path.read_text()
    with open(mirror.mountpoint / "annual-report.md", "a") as f:
        f.write("\n## Zeppelin fleet\nThe zeppelin fleet grew to 14 airships in 2023.\n")
    after = path.read_text()
    assert "14 airships" in after and "14 airships" not in before
    assert path.stat().st_size == len(after.encode())


def test_pack_follows_an_outside_change_in_mirror_mode(mirror: Mount) -> None:
    path = mirror.mountpoint / "annual-report.md@intent=zeppelin fleet"
    path.read_text()
    with open(mirror.source / "annual-report.md", "a") as f:
        f.write("\n## Zeppelin fleet\nThe zeppelin fleet grew to 14 airships in 2023.\n")
    assert mountutil.wait_for(lambda: "14 airships" in path.read_text(), timeout=3)
    text = path.read_text()
    assert path.stat().st_size == len(text.encode())


def test_error_packs_keep_the_mount_alive(mirror: Mount) -> None:
    mnt = mirror.mountpoint
    assert "unknown action" in (mnt / "annual-report.md@bogus=x").read_text().lower()
    assert ": error: " in (mnt / "annual-report.md@focus=L99999").read_text()
    result = subprocess.run(["cat", str(mnt / "nope.md@intent=x")], capture_output=True, text=True, timeout=10)
    assert result.returncode != 0 and "No such file" in result.stderr
    fits = "robots " * 140  # ~1,000 bytes: a few sentences fit in one component
    assert "\n[L" in (mnt / f"annual-report.md@intent={fits}").read_text()  # an anchored passage
    result = subprocess.run(["cat", f"{mnt}/annual-report.md@intent={'x' * 1500}"], capture_output=True,
                            text=True, timeout=10)
    assert "too long" in result.stderr.lower()
    assert (mnt / "notes.txt").read_text()


def test_control_tree_with_shell_commands(mirror: Mount) -> None:
    mnt = mirror.mountpoint
    (mnt / INTENT).read_bytes()
    stats = json.loads(sh(["cat", str(mnt / ".sparsefs" / "stats.json")]))
    assert stats["packs_served"] >= 1 and stats["chars_exposed"] > 0 and stats["plain_bytes_read"] >= 0
    log_lines = sh(["tail", "-n", "1", str(mnt / ".sparsefs" / "log.jsonl")])
    assert json.loads(log_lines)["intent"] == "R&D expenses 2023; headcount at year end"
    assert any(name.endswith(".json") for name in os.listdir(mnt / ".sparsefs" / "episodes"))
    assert "@intent=" in sh(["cat", str(mnt / ".sparsefs" / "SKILL.md")])
    copied = mirror.state_dir / "stats-copy.json"
    shutil.copyfile(mnt / ".sparsefs" / "stats.json", copied)
    assert json.loads(copied.read_text())["packs_served"] >= 1


def _node_length(path: Path) -> int:
    return int(sh(["node", "-e", f"process.stdout.write(String(require('fs').readFileSync({str(path)!r}).length))"]))


def test_stat_right_after_a_change_reports_the_new_pack(mirror: Mount) -> None:
    path = mirror.mountpoint / "annual-report.md@intent=zeppelin fleet"
    old_size = path.stat().st_size
    path.read_bytes()
    with open(mirror.mountpoint / "annual-report.md", "a") as f:
        f.write("\n## Zeppelin fleet\nThe zeppelin fleet grew to 14 airships in 2023.\n")
    new_size = path.stat().st_size  # stat first: the kernel must not keep the old size
    assert new_size != old_size
    assert _node_length(path) == new_size == len(path.read_bytes())


def test_outside_change_then_node_reads_the_whole_pack(mirror: Mount) -> None:
    path = mirror.mountpoint / "annual-report.md@intent=zeppelin fleet"
    path.read_bytes()
    with open(mirror.source / "annual-report.md", "a") as f:
        f.write("\n## Zeppelin fleet\nThe zeppelin fleet grew to 14 airships in 2023.\n")
    assert mountutil.wait_for(lambda: "14 airships" in sh(["cat", str(path)]), timeout=3)
    assert _node_length(path) == path.stat().st_size == len(sh(["cat", str(path)]).encode())


def test_control_snapshots_match_their_size_for_every_reader(mirror: Mount) -> None:
    stats = mirror.mountpoint / ".sparsefs" / "stats.json"
    stats.stat()
    (mirror.mountpoint / INTENT).read_bytes()  # counters change between stat and read
    out = sh(["node", "-e", f"JSON.parse(require('fs').readFileSync({str(stats)!r}, 'utf8')); console.log('ok')"])
    assert out.strip() == "ok"


def test_watcher_echo_of_our_own_write_rebuilds_nothing(mirror: Mount) -> None:
    path = mirror.mountpoint / "annual-report.md@intent=zeppelin fleet"
    path.read_bytes()
    with open(mirror.mountpoint / "annual-report.md", "a") as f:
        f.write("\n## Zeppelin fleet\nThe zeppelin fleet grew to 14 airships in 2023.\n")
    after_write = path.read_bytes()
    time.sleep(0.5)  # the inotify events of that write reach the watcher meanwhile
    assert path.read_bytes() == after_write
    log = (mirror.mountpoint / ".sparsefs" / "log.jsonl").read_text().splitlines()
    assert len(log) == 2


def test_raw_via_node_after_an_append(mirror: Mount) -> None:
    raw = mirror.mountpoint / "notes.txt@raw"
    raw.stat()
    with open(mirror.mountpoint / "notes.txt", "a") as f:
        f.write("one more line for the raw view\n")
    assert _node_length(raw) == (mirror.source / "notes.txt").stat().st_size


def test_node_never_reads_a_pack_short_while_its_file_changes(mirror: Mount) -> None:
    script = """
const fs=require('fs'); let bad=0, n=0; const end=Date.now()+3000;
const paths=['annual-report.md@intent=gross margin','annual-report.md@intent=robots'];
while(Date.now()<end){ for(const p of paths){ const fd=fs.openSync(p,'r'); const size=fs.fstatSync(fd).size;
  const b=Buffer.alloc(1<<20); let off=0,r; while((r=fs.readSync(fd,b,off,b.length-off,off))>0) off+=r;
  fs.closeSync(fd); n++; if(off!==size) bad++; } }
console.log(n, bad);"""
    reader = subprocess.Popen(["node", "-e", script], cwd=mirror.mountpoint, stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 3
    i = 0
    while time.monotonic() < deadline:
        with open(mirror.mountpoint / "annual-report.md", "a") as f:
            f.write(f"Gross margin robots line {i}\n")
        i += 1
        time.sleep(0.02)
    out, _ = reader.communicate(timeout=30)
    opens, short = (int(x) for x in out.split())
    assert opens > 20 and short == 0  # 20+ packs rebuilt under a live writer (idle: ~150; 46 under a loaded CI)
