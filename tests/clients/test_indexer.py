"""`sparsefs index`: warms the parsed store so the next read parses nothing; resumable; a summary."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparsefs.app import indexer
from sparsefs.app.indexer import FileResult, Summary, index_files, index_one, render_summary
from sparsefs.app.reading import plan_read
from sparsefs.artifacts.cache import ArtifactCache
from sparsefs.source.rootfs import SourceRoot
from tests import mountutil
from tests.conftest import DATA, is_pack

PDF = "pdf/filings/BOEING_2022_10K.pdf"
CORPUS = (PDF, "pdf/filings/3M_2022_10K.pdf", "pdf/papers/2304.02623v1.pdf",
          "pdf/financebench/FOOTLOCKER_2022_8K_dated-2022-05-20.pdf", "xlsx/sheetcopilot", "csv/datasets-covid-19",
          "json/octokit-fixtures", "logs/elastic-examples/kafka0_controller.log.2016-12-19-16")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of every kind in the shared data (PDF, XLSX, CSV, JSON, log), small enough that indexing it
    twice stays a few seconds: the whole data folder (its 24 MB of QA sets and 36 filings) took minutes."""
    root = tmp_path_factory.mktemp("corpus")
    for rel in CORPUS:
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if (DATA / rel).is_dir():
            shutil.copytree(DATA / rel, target)
        else:
            shutil.copy2(DATA / rel, target)
    return root


def run_index(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sparsefs", "index", *args, "--no-progress"], capture_output=True,
                          text=True, timeout=240, check=False)


def test_index_shared_data_then_an_intent_read_is_warm(tmp_path: Path, corpus: Path) -> None:
    state = tmp_path / "state"
    first = run_index(str(corpus), "--state-dir", str(state), "-j", "2")
    assert first.returncode == 0, first.stderr + first.stdout
    assert "pdf/pdf" in first.stdout and "table/xlsx" in first.stdout, first.stdout
    assert first.stdout.splitlines()[-1].startswith("total"), first.stdout
    plan = plan_read(corpus, state, timeout=5)
    assert plan.local is not None
    try:
        pack = plan.local.read(f"{PDF}@intent=commercial airplane deliveries 2022").decode()
        assert is_pack(pack) and ": error: " not in pack.splitlines()[0]
        assert plan.local.core.artifacts.parses == 0 and plan.local.core.artifacts.disk_loads == 1
    finally:
        plan.local.close()
    again = run_index(str(corpus), "--state-dir", str(state))  # resumable: what is stored is loaded, not parsed
    assert again.returncode == 0
    rows = {line.split()[0]: line.split()[1:] for line in again.stdout.splitlines()[2:]}
    assert rows["pdf/pdf"][1] == "0" and rows["pdf/pdf"][2] == rows["pdf/pdf"][0], again.stdout  # files, parsed, warm
    assert rows["total"][0] == first.stdout.splitlines()[-1].split()[1]


def test_index_one_reports_what_it_could_not_read(workspace: Path) -> None:
    (workspace / "blob.bin").write_bytes(bytes(range(256)) * 64)
    root = SourceRoot.open(str(workspace))
    try:
        cache = ArtifactCache(root)
        good, bad = index_one(cache, "annual-report.md"), index_one(cache, "blob.bin")
        assert good.status == "parsed" and good.kind.startswith("text/") and good.chars > 20_000
        assert index_one(cache, "annual-report.md").status == "warm"
        assert bad.status in ("unsupported", "error") and bad.note
    finally:
        root.close()
    text = render_summary(Summary(files=[good, bad], seconds=1.0), workspace, workspace / "state")
    assert "not indexed: blob.bin" in text and "total" in text


def _hang_or_die(cache: ArtifactCache, rel: str, embed: bool = False) -> FileResult:
    if rel == "hang.txt":
        time.sleep(60)
    if rel == "die.txt":
        os._exit(3)
    return FileResult(rel, "parsed", "text/x", 1)


def test_a_hung_or_dead_worker_costs_its_file_not_the_run(workspace: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(indexer, "index_one", _hang_or_die)  # the forked workers inherit it
    members = ["a.txt", "hang.txt", "b.txt", "die.txt", "c.txt", "d.txt"]
    started = time.monotonic()
    results = list(index_files(workspace, tmp_path / "state", members, jobs=2, file_timeout=1.0))
    assert time.monotonic() - started < 20
    files = {r.rel: r for r in results if isinstance(r, FileResult)}
    assert set(files) == set(members)
    assert files["hang.txt"].status == "error" and "timed out" in files["hang.txt"].note
    assert files["die.txt"].status == "error" and "died" in files["die.txt"].note
    assert all(files[rel].status == "parsed" for rel in ("a.txt", "b.txt", "c.txt", "d.txt"))


def test_index_of_a_mount_warms_the_mounts_own_store(workspace: Path, tmp_path: Path) -> None:
    """In place, the mount hides its source and its state is elsewhere: both come from the daemon."""
    state = tmp_path / "state"
    mount = mountutil.start(workspace, None, state)
    try:
        env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
        result = subprocess.run([sys.executable, "-m", "sparsefs", "index", str(workspace / "nested"),
                                 "--no-progress", "-j", "1"], capture_output=True, text=True, timeout=120, env=env,
                                check=False)
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"store: {state / 'index'}" in result.stdout and "total" in result.stdout
        assert not (tmp_path / "cache").exists()  # nothing went to the default state dir of the path
        refused = subprocess.run([sys.executable, "-m", "sparsefs", "index", str(workspace), "--state-dir",
                                  str(tmp_path / "other")], capture_output=True, text=True, timeout=60, check=False)
        assert refused.returncode == 1 and f"whose state directory is {state}" in refused.stdout
    finally:
        mountutil.stop(mount)


GATED_INDEX = """
import sys, time
from pathlib import Path
from sparsefs.app import cli, indexer
keep, parsed, real = sys.argv[1], Path(sys.argv[2]), indexer.index_one
def stored():
    return any(parsed.rglob("*.pdf-pdf/meta.json"))
def gated(cache, rel, embed=False):
    while stored():  # once the PDF is on disk every later file waits for the ^C: the run cannot end before it
        time.sleep(0.05)
    result = real(cache, rel, embed)
    while rel == keep and not stored():  # this worker takes no other file before the PDF is on disk
        time.sleep(0.05)
    return result
indexer.index_one = gated  # the forked workers inherit it
sys.exit(cli.main(sys.argv[3:]))
"""


def test_an_interrupted_index_resumes(tmp_path: Path, corpus: Path) -> None:
    """^C while the index is provably mid-run: once a PDF (costly enough to be stored) is on disk, every later
    file is held, and the worker that indexes the 190-page PDF takes no other file before that, so the signal
    cannot come after the run ended (it did under load, when the test signalled as soon as the store's folder
    existed). The next run finds what was stored warm."""
    state = tmp_path / "state"
    command = [sys.executable, "-c", GATED_INDEX, PDF, str(state / "index" / "parsed"), "index", str(corpus),
               "--state-dir", str(state), "-j", "2", "--no-progress"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        assert mountutil.wait_for(lambda: any((state / "index" / "parsed").rglob("*.pdf-pdf/meta.json")), 240)
        os.killpg(process.pid, signal.SIGINT)  # as a terminal's ^C: the whole process group
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
    assert process.returncode == 1 and "interrupted" in out, out + err
    again = run_index(str(corpus), "--state-dir", str(state))
    assert again.returncode == 0, again.stdout + again.stderr
    rows = {line.split()[0]: line.split()[1:] for line in again.stdout.splitlines()[2:] if line[:1].strip()}
    assert rows["pdf/pdf"][2] != "0", again.stdout  # files, parsed, warm: what was stored before ^C is warm now
