"""The one table of protocol actions: what each needs, how it meets the episode, whether it charges, who answers.

Before this table an action's properties lived in twelve sets across six modules (the grammar's three,
access's two, the selector's, the session intent's, the episodes', the virtual files', MCP's, the
conformance suite's), and adding an action meant finding them all. Now every one of those places reads a
column here: the grammar (:mod:`sparsefs.protocol.grammar`: names, arguments, slots, syntax), the access
(:mod:`sparsefs.protocol.access`: previews, native fit, answers within a delivered full view), the
selector (which reads choose a configuration), the session intent and the frozen packs (which reads it
joins), the episodes (which continue the open one), the Readers (``Reader.actions`` defaults to every
action a Reader must answer) and the conformance suite.

It sits beside :mod:`readers.base` (the contract, which imports it) so both planes can read it: Readers
learn what they must answer, the protocol how to treat each request. Exact operations (``@sum`` ...) are
rows too (:data:`OPERATIONS`, which :mod:`readers.ops` checks requests against): they are answered by
``Reader.operate`` of the Readers that list them in ``operations``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum


class Argument(StrEnum):
    """What follows ``@name``: nothing (``@full``), optional text, or required text (``@focus=<anchor>``)."""

    NONE = "none"
    OPTIONAL = "optional"
    REQUIRED = "required"


class Slots(StrEnum):
    """How the argument becomes needs: split at ';' / 'and' into slots, kept whole (a claim), or not at all."""

    NONE = "none"
    SPLIT = "split"
    WHOLE = "whole"


class Session(StrEnum):
    """How the session intent joins a read: it FILLS an access that says nothing (and re-ranks one that
    does), only RERANKS, or plays no part (the pack then does not depend on it)."""

    NONE = "none"
    FILLS = "fills"
    RERANKS = "reranks"


class Episode(StrEnum):
    """How a read meets the artifact's open episode (paper §4.1).

    OPENS: a new objective (the selector chooses a configuration; the same objective again continues);
    CONTINUES: the open episode whatever the text (its record, its budget); DETACHED: an episode of its own
    (an exact operation: the sparse reading stays the artifact's open episode); NONE: no episode (a preview,
    plain bytes)."""

    OPENS = "opens"
    CONTINUES = "continues"
    DETACHED = "detached"
    NONE = "none"


class Answer(StrEnum):
    """Which Readers answer: EVERY Reader (the conformance suite checks it), those that DECLARE it in
    ``Reader.actions``, or those listing the exact OPERATION in ``Reader.operations``."""

    EVERY = "every"
    DECLARED = "declared"
    OPERATION = "operation"


@dataclass(frozen=True)
class Action:
    """One row of the table.

    ``charges``: its pack counts against the episode's budget (E <= L; the preview and plain bytes do not);
    ``previews_vague``: an access without content words gets the Object Preview instead; ``native_fit``:
    a small artifact is answered whole rather than with a pack of this read's size; ``within_full_view``:
    after the episode delivered the full view, it is answered with anchors into it, nothing re-sent.
    """

    name: str
    syntax: str
    argument: Argument
    slots: Slots = Slots.NONE
    session: Session = Session.NONE
    episode: Episode = Episode.CONTINUES
    charges: bool = True
    answered_by: Answer = Answer.EVERY
    previews_vague: bool = False
    native_fit: bool = False
    within_full_view: bool = False


_PROTOCOL = (
    Action("intent", "@intent=<what you need>", Argument.OPTIONAL, Slots.SPLIT, Session.FILLS, Episode.OPENS,
           previews_vague=True, native_fit=True),
    Action("scout", "@scout", Argument.NONE, episode=Episode.NONE, charges=False, native_fit=True),
    Action("focus", "@focus=<anchor> (p12, p12-14, L120-180, #Heading, sheet:Sales, $.key)", Argument.REQUIRED,
           previews_vague=True),
    Action("collect", "@collect=<what to gather>", Argument.OPTIONAL, Slots.SPLIT, Session.FILLS, Episode.OPENS,
           answered_by=Answer.DECLARED, previews_vague=True, native_fit=True),
    Action("refine", "@refine=<what else you need>", Argument.REQUIRED, Slots.SPLIT, Session.RERANKS,
           answered_by=Answer.DECLARED, previews_vague=True, native_fit=True, within_full_view=True),
    Action("verify", "@verify=<claim to check>", Argument.REQUIRED, Slots.WHOLE, Session.RERANKS,
           answered_by=Answer.DECLARED, previews_vague=True, native_fit=True, within_full_view=True),
    Action("full", "@full", Argument.NONE),
    Action("raw", "@raw", Argument.NONE, episode=Episode.NONE, charges=False),
)
"""The protocol's own actions, in the order the grammar's hint lists them."""


def _operation(name: str) -> Action:
    """An exact operation: its argument and options are checked by readers.ops.build_operation."""
    return Action(name, f"@{name}=<argument>", Argument.OPTIONAL, episode=Episode.DETACHED,
                  answered_by=Answer.OPERATION)


_OPERATIONS = ("count", "distinct", "filter", "max", "mean", "min", "path", "rows", "sum")
ACTIONS: Mapping[str, Action] = {a.name: a for a in (*_PROTOCOL, *map(_operation, _OPERATIONS))}
"""Every action, protocol actions first, then the exact operations."""

PROTOCOL_ACTIONS: frozenset[str] = frozenset(a.name for a in _PROTOCOL)
"""The actions that are not exact operations (what ``Reader.actions`` may list)."""
OPERATIONS: frozenset[str] = frozenset(_OPERATIONS)
"""The exact operations (``readers.ops`` builds and checks them; Readers list theirs in ``operations``)."""


def action(name: str) -> Action:
    """The row of a known action; KeyError for a name the grammar would refuse."""
    return ACTIONS[name]


def named(*, protocol_only: bool = True, **columns: object) -> frozenset[str]:
    """Names of the actions whose columns equal ``columns`` (``named(argument=Argument.NONE)``)."""
    rows = _PROTOCOL if protocol_only else tuple(ACTIONS.values())
    return frozenset(a.name for a in rows if all(getattr(a, key) == value for key, value in columns.items()))


def answered_by_every() -> frozenset[str]:
    """What every Reader must answer (the default of ``Reader.actions``, checked by the conformance suite)."""
    return named(answered_by=Answer.EVERY)
