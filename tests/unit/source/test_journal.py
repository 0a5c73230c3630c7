"""The change journal git's fsmonitor hook reads (sparsefs.source.journal): tokens, order, limits."""

from __future__ import annotations

import pytest

from sparsefs.source import journal as journal_module
from sparsefs.source.journal import ChangeJournal


def test_changes_since_a_token_in_order_each_once() -> None:
    journal = ChangeJournal()
    start = journal.token()
    for rel in ("a", "b/c", "a", "d"):
        journal.record(rel)
    token, paths = journal.since(start)
    assert paths == ["a", "b/c", "d"] and token != start
    assert journal.since(token) == (token, [])
    journal.record("e")
    assert journal.since(token)[1] == ["e"]


def test_unknown_old_or_broken_tokens_mean_scan_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(journal_module, "LIMIT", 3)
    journal = ChangeJournal()
    start = journal.token()
    for rel in "abcde":
        journal.record(rel)
    assert journal.since(start)[1] is None  # older than what is kept
    assert journal.since("another-daemon:1")[1] is None and journal.since("")[1] is None
    recent = journal.token()
    journal.record("f")
    journal.incomplete()  # the watcher stopped: changes may have been missed since
    assert journal.since(recent)[1] is None
    after = journal.token()
    journal.record("g")
    assert journal.since(after)[1] == ["g"]
