"""The protocol through a real mount: the writable session file, state across unmount/mount, `sparsefs episodes`."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests import mountutil
from tests.clients.test_mount_clients import sh
from tests.conftest import DATA, HANG_GUARD_S

REPORT = "annual-report.md"
FILING = DATA / "pdf" / "filings" / "3M_2022_10K.pdf"


def test_session_intent_written_with_the_shell(mirror: mountutil.Mount) -> None:
    mnt = mirror.mountpoint
    sh("echo 'R&D expenses' > .sparsefs/session", cwd=mnt)
    assert sh(["cat", ".sparsefs/session"], cwd=mnt) == "R&D expenses\n"
    pack = json.loads(sh(["cat", f"{REPORT}@intent&format=json"], cwd=mnt))
    assert "session-intent-used" in pack["flags"] and "48.2 million" in json.dumps(pack["evidence"])
    sh("printf 'headcount at year end' > .sparsefs/session", cwd=mnt)  # no newline, longer than before
    assert sh(["cat", ".sparsefs/session"], cwd=mnt) == "headcount at year end\n"
    sh("echo 'staff' > .sparsefs/session", cwd=mnt)  # shorter: nothing of the old text may survive
    assert sh(["cat", ".sparsefs/session"], cwd=mnt) == "staff\n"
    sh("echo ' turnover' >> .sparsefs/session && echo 'hires' | tee -a .sparsefs/session >/dev/null", cwd=mnt)
    assert sh(["cat", ".sparsefs/session"], cwd=mnt) == "staff turnover hires\n"
    before = (mnt / f"{REPORT}@intent&k=2").read_bytes()
    sh("echo 'R&D expenses' > .sparsefs/session", cwd=mnt)
    after = mnt / f"{REPORT}@intent&k=2"
    assert after.stat().st_size == len(after.read_bytes()) and after.read_bytes() != before  # no stale size
    sh(": > .sparsefs/session", cwd=mnt)
    assert sh(["cat", ".sparsefs/session"], cwd=mnt) == ""
    assert json.loads(sh(["cat", f"{REPORT}@intent&format=json"], cwd=mnt))["decision"] == "preview"
    denied = subprocess.run(["sh", "-c", "echo x > .sparsefs/stats.json"], cwd=mnt, capture_output=True)
    assert denied.returncode != 0


def test_episodes_and_packs_survive_unmount_and_mount(workspace: Path, tmp_path: Path, backend: str) -> None:
    mnt, state = tmp_path / "mnt", tmp_path / "state"
    mnt.mkdir()
    mount = mountutil.start(workspace, mnt, state, backend=backend)
    try:
        with mountutil.hang_guard(mount, HANG_GUARD_S):
            first_bytes = (mnt / f"{REPORT}@intent=revenue").read_bytes()
            first = json.loads((mnt / f"{REPORT}@intent=revenue&format=json").read_bytes())
            live = _episodes_cli(str(mnt))
    finally:
        mountutil.stop(mount)
    assert first["episode"] in live
    saved = _episodes_cli("--state-dir", str(state), "--id", first["episode"])
    assert json.loads(saved)["exposed_sparse"] == first["exposure"]["episode_exposed"]
    mount = mountutil.start(workspace, mnt, state, backend=backend)
    try:
        with mountutil.hang_guard(mount, HANG_GUARD_S):
            assert (mnt / f"{REPORT}@intent=revenue").read_bytes() == first_bytes
            refined = json.loads((mnt / f"{REPORT}@refine=revenue&format=json").read_bytes())
            episode = json.loads((mnt / ".sparsefs" / "episodes" / f"{first['episode']}.json").read_bytes())
    finally:
        mountutil.stop(mount)
    assert refined["episode"] == first["episode"]
    delivered = [tuple(item["span"]) for item in first["evidence"]]
    for item in refined["evidence"]:
        assert all(item["span"][1] <= s or e <= item["span"][0] for s, e in delivered)
    assert episode["exposed_sparse"] == first["exposure"]["episode_exposed"] + refined["exposure"]["pack_chars"]


def _episodes_cli(*args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "sparsefs", "episodes", *args], capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_concurrent_agent_processes_keep_one_consistent_episode(mirror: mountutil.Mount) -> None:
    mnt = mirror.mountpoint
    names = [f"{REPORT}@intent=revenue"] + [f"{REPORT}@refine={w}" for w in ("staff", "Lantern", "margin", "risk")]
    script = ("import sys, pathlib\n"
              "for name in sys.argv[2:]:\n"
              "    size = len((pathlib.Path(sys.argv[1]) / name).read_bytes())\n"
              "    sys.stdout.write(name + '\\t' + str(size) + '\\n')\n")
    order = [names[n % len(names) :] + names[: n % len(names)] for n in range(6)]
    procs = [subprocess.Popen([sys.executable, "-c", script, str(mnt), *o], stdout=subprocess.PIPE, text=True)
             for o in order]
    sizes: dict[str, set[int]] = {}
    for proc in procs:
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0
        for line in out.splitlines():
            name, size = line.split("\t")
            sizes.setdefault(name, set()).add(int(size))
    assert all(len(s) == 1 for s in sizes.values()), sizes  # every process got the same frozen pack
    texts = [(mnt / name).read_text() for name in names]
    # Which pack opened the episode depends on arrival order (a refine first starts one of its own);
    # whatever the order, each episode's E is exactly the sum of its packs: no update was lost.
    by_episode: dict[str, list[int]] = {}
    for text in texts:  # the header names the episode; E counts every character of the pack
        episode = text.split("\n", 1)[0].split("@", 1)[1].split()[1]
        by_episode.setdefault(episode, []).append(len(text))
    for episode_id, shown in by_episode.items():
        episode = json.loads((mnt / ".sparsefs" / "episodes" / f"{episode_id}.json").read_bytes())
        assert episode["exposed_sparse"] == sum(shown) and episode["reads"] == len(shown)


def _field(text: str, label: str) -> str:
    line = next(line for line in text.splitlines() if label in line)
    return line.split(label, 1)[1]


def test_a_remount_starts_warm_from_the_parsed_store(tmp_path: Path, backend: str) -> None:
    src, mnt, state = tmp_path / "src", tmp_path / "mnt", tmp_path / "state"
    src.mkdir()
    mnt.mkdir()
    shutil.copyfile(FILING, src / "filing.pdf")
    for round_ in range(2):
        mount = mountutil.start(src, mnt, state, backend=backend)
        try:
            with mountutil.hang_guard(mount, HANG_GUARD_S):
                pack = (mnt / f"filing.pdf@intent=research and development expenses round {round_}").read_text()
                stats = json.loads((mnt / ".sparsefs" / "stats.json").read_bytes())
        finally:
            mountutil.stop(mount)
        assert " · E " in pack.splitlines()[0] and "\n[p" in pack  # a sparse pack with page anchors
        if round_ == 0:
            assert (stats["artifacts_parsed"], stats["artifacts_loaded_from_disk"]) == (1, 0)
        else:  # the second mount never parsed the PDF: it loaded the first mount's parse
            assert (stats["artifacts_parsed"], stats["artifacts_loaded_from_disk"]) == (0, 1)
