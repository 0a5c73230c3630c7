"""The one actions table (readers/actions.py): every place that used to keep its own set reads it."""

from __future__ import annotations

from pathlib import Path

from readers import actions, ops
from readers.actions import ACTIONS, PROTOCOL_ACTIONS, Argument, Episode, Session, Slots, named
from readers.base import Reader
from sparsefs.artifacts.cache import ArtifactCache
from sparsefs.protocol import access, episodes, grammar, intents
from sparsefs.protocol.access import Protocol
from sparsefs.protocol.grammar import parse_suffix
from sparsefs.source.rootfs import SourceRoot
from sparsefs.vfs import evidence


def test_the_protocol_reads_its_sets_from_the_table() -> None:
    assert grammar.CORE_ACTIONS == PROTOCOL_ACTIONS == {"intent", "scout", "focus", "collect", "refine", "verify",
                                                        "full", "raw"}
    assert grammar.ACTIONS_WITH_ARGUMENT == {"focus", "refine", "verify"} == named(argument=Argument.REQUIRED)
    assert {"scout", "full", "raw"} == grammar.ACTIONS_WITHOUT_ARGUMENT
    assert episodes.CONTINUING_ACTIONS == {"refine", "verify", "focus", "full"} == named(episode=Episode.CONTINUES)
    assert intents.SESSION_FILL_ACTIONS == {"intent", "collect"} == named(episode=Episode.OPENS)
    assert {"intent", "collect", "refine", "verify"} == evidence.SESSION_ACTIONS
    assert {"intent", "collect", "refine", "verify", "focus"} == access.PREVIEWS_VAGUE
    assert {"refine", "verify"} == access.WITHIN_FULL_VIEW
    assert ops.OPERATIONS == actions.OPERATIONS == named(protocol_only=False, episode=Episode.DETACHED)
    assert Reader.actions == PROTOCOL_ACTIONS


def test_slots_session_and_syntax_come_from_one_row() -> None:
    assert parse_suffix("intent=revenue; headcount").slots == ("revenue", "headcount")
    assert ACTIONS["intent"].slots is Slots.SPLIT and ACTIONS["verify"].slots is Slots.WHOLE
    assert parse_suffix("verify=revenue grew; and margins fell").slots == ("revenue grew; and margins fell",)
    assert ACTIONS["refine"].session is Session.RERANKS and ACTIONS["focus"].session is Session.NONE
    assert all(ACTIONS[name].syntax.startswith(f"@{name}") for name in ACTIONS)


def test_an_action_that_does_not_charge_leaves_the_budget_alone(tmp_path: Path) -> None:
    """scout's preview and raw bytes are outside every episode's E (the paper's separately bounded preview)."""
    assert named(charges=False) == {"scout", "raw"}
    (tmp_path / "report.md").write_text("Revenue grew 7% in 2023 to 1.2 billion.\n" + "Filler sentence here.\n" * 800)
    root = SourceRoot.open(str(tmp_path))
    protocol = Protocol(ArtifactCache(root))
    try:
        served = protocol.serve("report.md", parse_suffix("scout"))
        assert served.pack.decision == "preview" and served.pack.episode is None
        assert all(e.budget.sparse_exposed == 0 for e in protocol.episodes.all())
        charged = protocol.serve("report.md", parse_suffix("intent=revenue 2023"))
        assert charged.pack.exposure.episode_exposed == charged.exposed_chars > 0
    finally:
        protocol.chooser.close()
        root.close()
