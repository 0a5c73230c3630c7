"""The worked example of docs/SEMANTICS.md ("Savings: the worked example"), through a real mount on both backends:
stats.json, `sparsefs stats` and `sparsefs report` count the full reads the definition says, and a name nothing
reads opens and charges no episode (issue 25.5)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import mountutil
from tests.conftest import DEMO

Mount = mountutil.Mount

# (name, what the definition charges it) in the order the example reads them; L from each pack's header
REPORT_L, SALES_L, LOG_L, GROWN_L, LISTING, ALPHA_L = 29_991, 19_952, 25_048, 31_328, 26, 1_507
EXAMPLE = [
    ("report.md@intent=R&D expenses 2023", REPORT_L),  # the first read of report.md's version: one full read
    ("report.md@refine=headcount at year end", 0),  # same episode
    ("report.md@intent=Kent operations center", 0),  # another objective, same version, same window
    ("report.md@scout", 0),  # a preview of a version already read
    ("sales.csv@sum=revenue", SALES_L),  # three exact operations, one full read of the table
    ("sales.csv@count=units&where=region:EU", 0),
    ("sales.csv@mean=revenue&by=region", 0),
    ("app.log@intent=disk errors", LOG_L),
    ("GROW", 0),  # 100 lines appended to app.log
    ("app.log@intent=disk errors", GROWN_L - LOG_L),  # a grown log: only its new tail
    ("docs@intent=zeppelin fleet size", LISTING + ALPHA_L),  # the listing and the one member it carries
    ("report.md@focus=L99999", 0),  # an error: nothing served, nothing charged
]
FULL_READ_CHARS = 82_804  # docs/SEMANTICS.md states it; the definition before counted 202,750


def write_example(src: Path) -> None:
    """The example's files: deterministic, so every L is the one the docs state."""
    (src / "docs").mkdir(parents=True)
    shutil.copy(DEMO / "annual-report.md", src / "report.md")
    rows = ["region,revenue,units"] + [f"{['EU', 'US', 'APAC'][i % 3]},{(i * 37) % 1000},{i % 17}" for i in range(2000)]
    (src / "sales.csv").write_text("\n".join(rows) + "\n")
    lines = [f"2024-03-01T10:{i // 60:02d}:{i % 60:02d} INFO worker-{i % 4} processed batch {i} in {i % 90} ms"
             for i in range(400)]
    lines[123] = "2024-03-01T10:02:03 ERROR worker-3 disk error on /dev/sdb: I/O timeout"
    (src / "app.log").write_text("\n".join(lines) + "\n")
    (src / "docs" / "alpha.md").write_text(
        "# Airships\n\nThe zeppelin fleet size grew to twelve airships in 2023, each with a crew of forty.\n"
        + "Hangar notes and maintenance schedules follow. " * 30 + "\n")
    (src / "docs" / "beta.md").write_text("# Gardening\n\n" + "Tomatoes need sun and regular watering in summer. " * 100
                                          + "\n")
    (src / "docs" / "gamma.md").write_text(
        "# Recipes\n\n" + "Bake the bread at two hundred degrees for forty minutes. " * 350 + "\n")


def grow_log(path: Path) -> None:
    lines = [f"2024-03-01T11:{i // 60:02d}:{i % 60:02d} INFO worker-{i % 4} processed batch {400 + i} in {i % 90} ms"
             for i in range(100)]
    with path.open("a") as log:
        log.write("\n".join(lines) + "\n")


@pytest.fixture
def example(tmp_path: Path, backend: str) -> Iterator[Mount]:
    src, mnt = tmp_path / "src", tmp_path / "mnt"
    write_example(src)
    mnt.mkdir()
    with mountutil.mounted(src, mnt, tmp_path / "state", backend=backend) as mount:
        yield mount
    assert "Traceback" not in mount.stderr()



def _sparsefs(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "sparsefs", *args], capture_output=True, text=True, timeout=120,
                          check=True)
    return done.stdout


def test_the_worked_example_counts_what_the_definition_says_everywhere(example: Mount, tmp_path: Path) -> None:
    mnt = example.mountpoint
    for name, _ in EXAMPLE:
        if name == "GROW":
            grow_log(mnt / "app.log")
        else:
            assert (mnt / name).read_bytes(), name
    lines = [json.loads(line) for line in (mnt / ".sparsefs" / "log.jsonl").read_bytes().splitlines()]
    assert [line["path"] for line in lines] == [name for name, _ in EXAMPLE if name != "GROW"]
    assert sum(cost for _, cost in EXAMPLE) == FULL_READ_CHARS
    exposed = sum(line["exposed"] for line in lines)
    packs = len(lines)
    assert mountutil.wait_for(lambda: mountutil.stats_json(mnt)["packs_served"] == packs, timeout=10)  # mfusepy
    live = mountutil.stats_json(mnt)
    assert (live["full_read_chars"], live["chars_exposed"]) == (FULL_READ_CHARS, exposed)
    assert live["chars_saved_vs_full_reads"] == FULL_READ_CHARS - exposed and live["full_reads"] == 6
    summary = json.loads(_sparsefs("stats", str(mnt), "--json"))
    assert (summary["full_read_chars"], summary["chars_exposed"], summary["chars_saved"]) == (
        FULL_READ_CHARS, exposed, FULL_READ_CHARS - exposed)
    assert summary["full_reads"] == 6 and summary["packs_served"] == packs
    text = _sparsefs("report", str(mnt), "-o", str(tmp_path / "report"))
    assert f"characters exposed: {exposed:,} of {FULL_READ_CHARS:,}" in text
    assert f"saved {FULL_READ_CHARS - exposed:,}" in text and "full reads: 6 " in text
    page = (tmp_path / "report" / "index.html").read_text()
    assert f"{exposed:,} of {FULL_READ_CHARS:,} that full reads would have cost" in page
    _plain_bytes_say_what_they_count(mnt)


def _plain_bytes_say_what_they_count(mnt: Path) -> None:
    """Under kernel passthrough the daemon never sees plain reads: stats.json says so instead of a silent 0."""
    size = len((mnt / "sales.csv").read_bytes())
    live = mountutil.stats_json(mnt)
    if live["passthrough"]:
        assert live["plain_bytes_counted"].startswith("only what passes through the daemon")
    else:
        assert live["plain_bytes_counted"].startswith("all")
        assert mountutil.wait_for(lambda: mountutil.stats_json(mnt)["plain_bytes_read"] >= size, timeout=10)


def test_a_name_nothing_reads_opens_and_charges_no_episode(example: Mount) -> None:
    mnt = example.mountpoint
    assert (mnt / "report.md@intent=R&D expenses 2023").read_bytes()
    before = _episodes(mnt)
    with pytest.raises(FileExistsError):
        (mnt / "report.md@intent=quarterly margin").mkdir()
    with pytest.raises(NotADirectoryError):
        (mnt / "report.md@intent=revenue 2023" / "2022").read_bytes()  # a '/' in a question
    assert (mnt / "report.md@intent=net loss").stat().st_size > 0  # a stat builds the pack; nothing reads it
    error = (mnt / "report.md@focus=L99999").read_text()  # read, but it failed: an error pack
    assert ": error: " in error
    after = _episodes(mnt)
    assert after == before, "a lookup nothing read, or a failed read, changed the episodes"
    lines = (mnt / ".sparsefs" / "log.jsonl").read_bytes().splitlines()
    assert len(lines) == 2 and json.loads(lines[-1])["reads"] == []  # the error is logged, and costs nothing
    # the pack only stat-ed is charged when it is read, against the episode as it is then
    text = (mnt / "report.md@intent=net loss").read_text()
    assert _episodes(mnt) != before and text.split(" ")[1] in _episodes(mnt)


def _episodes(mnt: Path) -> dict[str, tuple[int, int, str]]:
    """Each episode's id -> (reads, E, objective)."""
    out = {}
    for path in (mnt / ".sparsefs" / "episodes").iterdir():
        record = json.loads(path.read_bytes())
        out[record["id"]] = (record["reads"], record["exposed_sparse"], record["objective"])
    return out
