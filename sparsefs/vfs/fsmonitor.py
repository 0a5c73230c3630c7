"""Answers for git's fsmonitor hook: ``.sparsefs/fsmonitor/<prefix>%<token>`` (issue 26, item 5).

The hook (``sparsefs fsmonitor install`` writes it; protocol version 2) runs
in the worktree and reads the control file named by the worktree's path
below the mount root (percent-encoded) and git's last token. The answer is
git's format: the new token, then each changed path below the worktree
(relative to it), NUL-separated; the single path ``/`` means "scan
everything" (an unknown or too old token, a source not watched).

Changes made through the mount are in the journal when the request that made
them is answered (an open for writing, a create, a write, a rename...), so
``echo x >> f; git status`` sees ``f``; changes made outside reach it within
the watcher's latency (milliseconds), as they reach every other cache of the
mount. (git's own fsmonitor daemon waits for a cookie file's event instead;
here that wait, the watcher's 5 ms gathering included, cost more than the
whole status it saved.)
"""

from __future__ import annotations

import os
from urllib.parse import unquote

from sparsefs.source.journal import ChangeJournal

EVERYTHING = "/"


def answer(query: str, journal: ChangeJournal, watched: bool) -> bytes:
    """The hook's output for ``query`` (``<percent-encoded worktree prefix>%<token>``)."""
    encoded, _, token = query.rpartition("%")
    prefix = unquote(encoded).strip("/")
    if not watched:
        return _reply(journal.token(), None)
    new, paths = journal.since(token)
    return _reply(new, _below(prefix, paths))


def _below(prefix: str, paths: list[str] | None) -> list[str] | None:
    """The paths below the worktree, relative to it; git's own directory (and the cookies) left out."""
    if paths is None:
        return None
    head = prefix + "/" if prefix else ""
    inside = [path[len(head):] for path in paths if path.startswith(head)]
    return [path for path in inside if path != ".git" and not path.startswith(".git/")]


def _reply(token: str, paths: list[str] | None) -> bytes:
    listed = [EVERYTHING] if paths is None else [path for path in paths if path]
    return b"\0".join(os.fsencode(item) for item in [token, *listed]) + b"\0"
