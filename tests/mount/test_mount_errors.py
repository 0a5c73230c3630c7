"""Errors a user can act on, through a real mount (issue 18): error packs in the format asked for, "did you
mean" for a typo of an action or an option, text that keeps its '&', and a '/' in a question."""

from __future__ import annotations

import errno
import json
import subprocess
from pathlib import Path

import pytest

from tests import mountutil
from tests.clients.test_mount_clients import sh
from tests.conftest import is_pack

Mount = mountutil.Mount
REPORT = "annual-report.md"
SALES = "region,revenue,population,note\n" + "".join(
    f"{'EU' if i % 2 else 'US'},{i},{i * 10},row {i} with some padding text\n" for i in range(300))


def _json(path: Path) -> dict[str, object]:
    data = json.loads(path.read_bytes())
    assert isinstance(data, dict)
    return data


def _error(path: Path) -> dict[str, str]:
    """The error of a JSON error pack."""
    pack = _json(path)
    assert pack["decision"] == "error", pack
    error = pack["error"]
    assert isinstance(error, dict)
    return error


def test_error_packs_answer_in_the_format_asked_for(mirror: Mount) -> None:
    mnt = mirror.mountpoint
    assert "lines" in _error(mnt / f"{REPORT}@focus=L99999&format=json")["message"]  # a Reader's error
    assert "did you mean @intent?" in _error(mnt / f"{REPORT}@intnet=R&D&format=json")["message"]
    assert "k=" in _error(mnt / f"{REPORT}@intent=R&D&k=many&format=json")["message"]  # the format still parses
    assert "&format=" in _error(mnt / f"{REPORT}@intent=R&D&formt=json")["hint"]  # asked for, if mistyped
    assert "%zz" in _error(mnt / f"{REPORT}@intent=50%zz&format=json")["message"]  # a bad escape elsewhere
    (mnt / "blob.bin").write_bytes(bytes(range(256)) * 64)
    assert "@raw" in _error(mnt / "blob.bin@intent=x&format=json")["hint"]  # no Reader for it
    text = (mnt / f"{REPORT}@intent=R&D&format=jsn").read_text()  # the format itself is what is wrong
    assert is_pack(text) and ": error: bad format='jsn'" in text
    verbose = (mnt / f"{REPORT}@intnet=x&format=verbose").read_text()
    assert "did you mean @intent?" in verbose and not verbose.startswith("{")


def test_typos_ask_did_you_mean_and_text_keeps_its_ampersands(mirror: Mount) -> None:
    mnt = mirror.mountpoint
    (mnt / "sales.csv").write_text(SALES)
    for name, meant, fixed in [
        (f"{REPORT}@intnet=R&D expenses", "@intent", "@intent=R&D expenses"),
        (f"{REPORT}@scuot", "@scout", "@scout"),
        ("sales.csv@summ=population", "@sum", "@sum=population"),
        ("sales.csv@summ", "@sum", "@sum"),
    ]:
        text = (mnt / name).read_text()
        assert f"did you mean {meant}?" in text and f"try: write {fixed}\n" in text, text
        assert "@verify" not in text, text  # not the list of every action
    for name, meant in [("sales.csv@sum=revenue&wher=region:EU", "&where="),
                        (f"{REPORT}@intent=R&D&scpoe=L1-9", "&scope=")]:
        text = (mnt / name).read_text()
        assert f"did you mean {meant}?" in text and "%26" in text, text
    assert "sum(revenue) = 22,500" in (mnt / "sales.csv@sum=revenue&where=region:EU").read_text()
    pack = _json(mnt / f"{REPORT}@intent=R&D expenses; S&P 500 a&b; 50%25 of staff%26wher=x&format=json")
    assert pack["slots"] == ["R&D expenses", "S&P 500 a&b", "50% of staff&wher=x"]
    assert pack["decision"] != "error"


def test_a_name_with_at_that_is_no_request_stays_free(mirror: Mount) -> None:
    mnt = mirror.mountpoint
    for name in ("notes.txt@old", "notes.txt@v2", f"{REPORT}@backup"):
        with pytest.raises(FileNotFoundError):
            (mnt / name).stat()
        (mnt / name).write_text("kept\n")
        assert (mirror.source / name).read_text() == "kept\n"


def test_a_slash_in_a_question(mirror: Mount) -> None:
    """A raw '/' splits the path: the kernel answers ENOTDIR, which the daemon never sees. So every place that
    suggests a question says how to write it, and %2F works."""
    mnt = mirror.mountpoint
    with pytest.raises(NotADirectoryError) as raised:
        (mnt / f"{REPORT}@intent=revenue 2023/2022").read_bytes()
    assert raised.value.errno == errno.ENOTDIR
    pack = _json(mnt / f"{REPORT}@intent=revenue 2023%2F2022&format=json")
    assert pack["intent"] == "revenue 2023/2022" and pack["decision"] != "error"
    assert "%2F" in (mnt / ".sparsefs" / "SKILL.md").read_text()
    preview = (mnt / f"{REPORT}@scout").read_text()  # the pack that suggests a question says how
    assert "next: @intent=<what you need; a second need; / as %2F>" in preview
    unknown = (mnt / f"{REPORT}@bogus=x").read_text()
    assert "unknown action 'bogus'" in unknown and "%2F" in unknown


def test_next_steps_copied_in_a_subdirectory_work(mirror: Mount) -> None:
    """Each step is a suffix to append to the path read, from wherever it was read."""
    mnt, sub = mirror.mountpoint, mirror.mountpoint / "nested" / "deeper"
    (sub / "report.md").write_bytes((mnt / REPORT).read_bytes())
    text = sh(["cat", "report.md@intent=R&D expenses 2023; zeppelin%2Fairship fleet size"], cwd=sub)
    steps = next(line for line in text.splitlines() if line.startswith("next: "))[6:].split(" · ")
    assert "'@refine=zeppelin%2Fairship fleet size'" in steps and any(s.startswith("@focus=") for s in steps)
    for step in steps:  # pasted after the path in a shell (a step with the agent's words is shell-quoted)
        if "<" in step:
            continue
        result = subprocess.run(["sh", "-c", "cat report.md" + step], cwd=sub, capture_output=True, text=True,
                                timeout=60)
        assert result.returncode == 0 and is_pack(result.stdout) and ": error: " not in result.stdout, (step, result)
