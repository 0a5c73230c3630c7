"""The Text Reader opts into the Reader conformance suite."""

from __future__ import annotations

from pathlib import Path

from readers.base import Parsed
from readers.text import TextReader
from tests.reader_conformance import ReaderConformance, Sample

_README = Path(__file__).resolve().parents[3] / "README.md"
_PAPER = Path(__file__).resolve().parents[4] / "shared" / "paper" / "sparseread-paper.md"


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


def test_a_few_stray_invalid_bytes_are_read_as_replacement_characters_and_flagged() -> None:
    from readers.logs.reader import LogReader
    from readers.text import decode_flags
    from tests.reader_conformance import MemorySource

    line = b'127.0.0.1 - - [17/May/2015:10:05:03 +0000] "GET /x HTTP/1.1" 200 12 "-" "agent"\n'
    data = line * 2000 + line.replace(b"agent", b"ag\xff\xfeent")
    for reader in (TextReader(), LogReader()):
        assert reader.accepts("access.log", data[-8192:])
        parsed = reader.parse(MemorySource("access.log", data))
        assert parsed.full_view.count("\ufffd") == 2
        assert parsed.data["flags"] == decode_flags(data, parsed.full_view)
        assert "2 bytes" in parsed.data["flags"][0]


def test_text_that_is_not_mostly_utf8_is_still_refused() -> None:
    import pytest

    from readers.base import UnsupportedArtifact
    from tests.reader_conformance import MemorySource

    latin = "café crème brûlée ".encode("latin-1") * 300
    assert not TextReader().accepts("menu.txt", latin[:8192])
    with pytest.raises(UnsupportedArtifact):
        TextReader().parse(MemorySource("menu.txt", latin))
