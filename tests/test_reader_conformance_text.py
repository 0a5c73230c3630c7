"""The Text Reader opts into the Reader conformance suite."""

from __future__ import annotations

from pathlib import Path

from readers.base import Parsed
from readers.text import TextReader
from tests.reader_conformance import ReaderConformance, Sample

_README = Path(__file__).resolve().parents[1] / "README.md"
_PAPER = Path(__file__).resolve().parents[2] / "shared" / "paper" / "sparseread-paper.md"


class TestTextConformance(ReaderConformance):
    reader = TextReader()

    def samples(self) -> list[Sample]:
        return [
            Sample("README.md", _README.read_bytes(), "how do I run the tests"),
            Sample(
                "paper.md", _PAPER.read_bytes(), "budget bound; calibration threshold",
                ("budget bound", "calibration threshold"),
            ),
        ]

    def malformed(self) -> list[tuple[str, bytes]]:
        return [("notes.txt", b"text\x00with a NUL"), ("latin.txt", "caf\u00e9".encode("latin-1") + b" ok")]

    def check_faithful(self, sample: Sample, parsed: Parsed) -> None:
        assert parsed.full_view == sample.data.decode("utf-8")
