"""Every test that finds the shared data by counting folders up from its own file counts right.

Why: tests skip when the shared data is absent (a checkout without it), so a path counted from the wrong
depth does not fail, it skips: the 3M filing test skipped silently for a session after the tests moved
one folder down. This check resolves each such path (``Path(__file__)...parents[N] / "shared"``) the way
the test does and compares it with the one place the data is (tests/conftest.py ``SHARED``), whether or
not the data is present here.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import SHARED

TESTS = Path(__file__).resolve().parents[1]
COUNTED = re.compile(r"Path\(__file__\)\.resolve\(\)\.parents\[(\d+)\]((?:\s*/\s*\"[^\"]+\")*)")


def counted_paths(path: Path) -> list[tuple[int, Path]]:
    """(line, resolved path) of each folder-counted path in one file that goes through "shared"."""
    found = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        for match in COUNTED.finditer(line):
            parts = re.findall(r"\"([^\"]+)\"", match.group(2))
            if parts and parts[0] == "shared":
                found.append((number, path.resolve().parents[int(match.group(1))].joinpath(*parts)))
    return found


def test_every_counted_shared_path_is_the_shared_folder() -> None:
    wrong = [f"{path.relative_to(TESTS)}:{line}: {resolved}"
             for path in sorted(TESTS.rglob("*.py")) if path.resolve() != Path(__file__).resolve()
             for line, resolved in counted_paths(path) if not resolved.is_relative_to(SHARED)]
    assert not wrong, "paths counted from the wrong folder:\n" + "\n".join(wrong)


def test_the_check_sees_a_wrong_count(tmp_path: Path) -> None:
    deep = tmp_path / "tests" / "unit" / "readers"
    deep.mkdir(parents=True)
    probe = deep / "test_probe.py"
    probe.write_text('DATA = Path(__file__).resolve().parents[2] / "shared" / "data"\n')
    ((line, resolved),) = counted_paths(probe)
    assert line == 1 and resolved == tmp_path / "tests" / "shared" / "data"
