"""Every request SKILL.md shows an agent parses, and its exact operations build."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from readers.ops import OPERATIONS, build_operation
from sparsefs.protocol.grammar import parse_suffix

SKILL = Path(__file__).resolve().parents[3] / "sparsefs" / "SKILL.md"
EXAMPLES = re.findall(r"cat '[^'@]+@([^']+)'", SKILL.read_text())


def test_skill_shows_examples_of_every_operation() -> None:
    shown = {suffix.split("=")[0].split("&")[0] for suffix in EXAMPLES}
    assert {"sum", "mean", "count", "distinct", "rows", "max"} <= shown
    assert len(EXAMPLES) >= 15


@pytest.mark.parametrize("suffix", EXAMPLES)
def test_every_example_parses(suffix: str) -> None:
    request = parse_suffix(suffix, OPERATIONS)
    if request.action in OPERATIONS:
        build_operation(request.action, request.argument, request.options, request.k)


def test_the_guide_is_short_and_its_opening_stands_alone() -> None:
    """Every agent pays for the guide: at most 6,000 characters, and the first 1,500 carry every rule an
    agent needs to start (issue 28): scout, intent, focus, refine, full, exact results, quoting."""
    text = SKILL.read_text()
    assert len(text) <= 6_000
    opening = text[:1_500]
    for rule in ("@scout", "@intent=", "@focus=", "@refine=", "@full", "@sum=", "@count", "@path=", "quote",
                 "%2F", "[sparsefs guard]"):
        assert rule in opening, rule
