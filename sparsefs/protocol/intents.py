"""Resolve an access intent against the session intent (Algorithm 1, ResolveIntent and Validate).

The session intent is the user's standing objective ("ACME's 2023 10-K: R&D and
staffing"), written to ``.sparsefs/session`` or given at mount. It never
overrides an access intent; it fills in what the access leaves unspecified:

* an access with no content words (``@intent`` alone, ``@intent=the``) reads
  the session intent instead, flagged ``session-intent-used``;
* an access with content words keeps its own slots; the session's remaining
  words become *context*, which re-ranks passages that already match a slot
  (it never brings in a passage on its own), flagged ``session-context``;
* the access wins on specifics: when it names a year or another number, the
  session's years and numbers are dropped from the context.

Validation is structural only: an intent whose words are all stopwords is
underspecified and gets the Object Preview with a flag, never a guess.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass

from readers.actions import Session, named
from readers.retrieval.bm25index import content_tokens
from sparsefs.protocol.grammar import split_slots
from sparsefs.store.state import StateDB

MAX_SESSION_CHARS = 2_000
SESSION_KEY = "session_intent"  # where the state database keeps it between mounts
SESSION_FILL_ACTIONS = named(session=Session.FILLS)  # readers.actions: intent, collect
_WORD = re.compile(r"\d[\d,.]*%?|[^\W_][\w&'.\-]*")  # "1,184" and "3.5%" stay whole
_NUMBER = re.compile(r".*\d")  # any word with a digit is a specific: 2023, FY2023, Q3-2023, 3.5%


@dataclass(frozen=True)
class ResolvedIntent:
    """What the Reader is asked for, and where it came from."""

    text: str | None
    slots: tuple[str, ...]
    context: str | None = None
    flags: tuple[str, ...] = ()
    session: str = ""  # the session intent this was resolved against
    method: str | None = None  # the location method the selector chose (None: the Reader's default)

    @property
    def underspecified(self) -> bool:
        return self.text is None


class SessionIntent:
    """The mount's standing objective; thread-safe, persisted through ``on_change``; others :meth:`listen`."""

    def __init__(self, text: str = "", on_change: Callable[[str], None] | None = None) -> None:
        self._text = normalize_session(text)
        self._lock = threading.Lock()
        self._listeners = [on_change] if on_change is not None else []

    def listen(self, on_change: Callable[[str], None]) -> None:
        """Call ``on_change(text)`` after every change (the Core drops packs frozen under the old one)."""
        with self._lock:
            self._listeners.append(on_change)

    @property
    def text(self) -> str:
        with self._lock:
            return self._text

    def set(self, text: str) -> None:
        clean = normalize_session(text)
        with self._lock:
            changed, self._text = clean != self._text, clean
            listeners = list(self._listeners)
        for on_change in listeners if changed else ():
            on_change(clean)

    def content(self) -> bytes:
        """What ``.sparsefs/session`` reads as."""
        text = self.text
        return (text + "\n").encode() if text else b""


def persisted_session(state: StateDB | None, given: str | None) -> SessionIntent:
    """The session intent of a source: ``--session-intent`` wins, else the one its last mount left; every
    change is kept in the state database for the next mount."""
    if given is not None and state is not None:
        state.set_setting(SESSION_KEY, given)
    initial = given if given is not None else (state.get_setting(SESSION_KEY) if state is not None else None)
    on_change = (lambda text: state.set_setting(SESSION_KEY, text)) if state is not None else None
    return SessionIntent(initial or "", on_change=on_change)


def normalize_session(text: str) -> str:
    """One line of at most MAX_SESSION_CHARS; control characters (NUL from a sparse write,
    U+FFFD from bytes that are not UTF-8) become spaces."""
    printable = "".join(c if c.isprintable() and c != "\ufffd" else " " for c in text)
    return " ".join(printable.split())[:MAX_SESSION_CHARS]


def has_content(text: str | None) -> bool:
    return bool(text) and bool(content_tokens(text or ""))


def resolve(action: str, argument: str | None, slots: tuple[str, ...], session: str) -> ResolvedIntent:
    """The access intent, completed by the session intent where it is silent."""
    if has_content(argument):
        assert argument is not None
        context = session_context(argument, session)
        flags = ("session-context",) if context else ()
        return ResolvedIntent(argument, slots or (argument,), context, flags, session)
    if action in SESSION_FILL_ACTIONS and has_content(session):
        return ResolvedIntent(session, split_slots(session), None, ("session-intent-used",), session)
    return ResolvedIntent(None, slots, session=session)


def session_context(access: str, session: str) -> str | None:
    """Session words the access does not already say; its numbers yield to the access's."""
    if not session:
        return None
    said = content_tokens(access)
    access_numbers = any(_NUMBER.match(w) for w in _WORD.findall(access))
    kept = [w for w in _WORD.findall(session) if _adds(w, said, access_numbers)]
    return " ".join(kept) or None


def _adds(word: str, said: frozenset[str], access_numbers: bool) -> bool:
    if _NUMBER.match(word):
        return not access_numbers
    tokens = content_tokens(word)
    return bool(tokens) and not tokens <= said
