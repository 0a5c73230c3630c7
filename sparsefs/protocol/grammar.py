"""Parser for SparseFS virtual path names (pure: no I/O, stdlib only).

A virtual name is one path component::

    name     = base "@" suffix          ; base: an existing real name, never empty
    suffix   = head *( "&" segment )
    head     = action [ "=" argument ]   ; split on the first "=" only
    segment  = option / text
    option   = key "=" value            ; key in OPTION_KEYS: k, format, scope, budget,
                                        ; and for exact operations where, by, cols, rows, sheet, since, until
    text     = any other segment        ; belongs to the argument, re-joined with "&"
    action   = "intent" / "scout" / "focus" / "collect" / "refine" / "verify"
             / "full" / "raw" / <an extra action named by the caller>

Rules, in the order they are applied:

1. The suffix must be valid Unicode text (no lone surrogates, as left by
   surrogateescape-decoding a non-UTF-8 name).
2. Split on "&" *before* percent-decoding. ``intent=R&D 2023`` has the argument
   "R&D 2023"; ``intent=R&D&k=3&S&P 500`` has "R&D&S&P 500" and k=3. A duplicate
   option key is an error. To put a literal ``&k=3`` into the text, write
   ``%26k=3``.
3. Actions and option keys are matched literally and are case-sensitive.
   An unknown action close to a known one or to an exact operation (``intnet``,
   ``summ``: ``close_actions``) is refused with "did you mean"; so is a text
   segment ``word=...`` whose word is a near miss of an option key of four
   letters or more (``&wher=``, ``&scpoe=``, ``&formt=``, ``&Where=``: one
   edit, or another case), which would otherwise silently become intent text;
   any other segment stays text (``R&D``, ``S&P 500``, ``a&b=c``).
   ``focus``, ``refine`` and ``verify`` require an argument;
   ``scout``, ``full`` and ``raw`` forbid one; ``intent``, ``collect`` and extra
   actions take an optional one (``@intent`` alone reads the session intent, or
   is an underspecified request). Text
   segments after a head without "=" (``@intent&what``) or after an action that
   forbids an argument are errors (unknown option).
4. The argument and the option values are percent-decoded like
   ``urllib.parse.unquote`` ("+" stays literal, ``%2F`` gives "/"), strictly:
   every "%" needs two hex digits and the bytes must be UTF-8. Then they are
   stripped; a blank argument counts as absent.
5. Options: k is an integer 1..50, budget an integer 1..10,000,000, format is
   "text" (default) or "json", scope is non-empty. The operation options
   (where, by, cols, rows, sheet, since, until) are kept as decoded text; the
   Reader that runs the operation checks them (``readers.ops``).
6. For intent/collect/refine the argument is split into slots
   (``split_slots``; a verify claim is one slot): ";" separates slots, and numbered questions ("1) a 2) b",
   "1. a 2. b", "(1) a (2) b", "Q1: a Q2: b") split when their numbers run
   1, 2, ..., n (n >= 2). Text before the first number prefixes every numbered
   slot ("For 2023: 1) revenue 2) staff" gives "For 2023: revenue" and
   "For 2023: staff"), unless a ";" separates it (then it is a slot itself).
   Then each slot that is a conjunction list of at least three short items
   becomes one slot per item (``_conjunction_list``): items separated by
   commas, the last one after "and", "or" or "as well as" (with or without
   the Oxford comma): "revenue, net income and headcount" gives three slots.
   Shared context is distributed: the first item is what follows the last
   preposition or article before the first comma (or, when every middle item
   starts with the same determiner, "the trend ..., the reasons ..., and the
   steps", from that word's last occurrence), and the words before it prefix
   every item, as does text up to a ":" ("For 2023:"); words from the first
   "for/in/during/at/from/by/between/over/since/until/across/on/within/per/
   versus" after the last item ("for 2023", and a final "?") suffix every item;
   a leading request verb ("compare", "show me", "list", "find" ...) is about
   the request as a whole and is dropped. So "Compare revenue, margin and
   cash flow for 2023" gives "revenue for 2023", "margin for 2023" and "cash
   flow for 2023", and "What did Bains say about the arts, culture, and
   tourism?" gives "What did Bains say about the arts?", "... the culture?",
   "... the tourism?". It is conservative: two items ("profit and loss", "R&D
   and headcount") never split; a first item with a conjunction of its own,
   a middle item with a question word or verb ("what are", "did") or opening
   an aside ("including ...", "such as ..."), a comma between digits
   ("1,000,000"), commas and conjunctions inside quotes ("...", “...”, '...'),
   an item over six words, an item with sentence punctuation (". : ? !"), an
   item without a letter word that is not a stopword ("In 2023"), or a slot
   that opens like a clause ("When ...", "If ...", "We ...") means prose, and
   the slot stays whole. On the shared QA sets 10 of 1,130 questions split.
   Slots are stripped and blank ones dropped; if none remain, the whole
   stripped text is the one slot, so a present argument always has slots.

``split_name`` finds the base: a name that exists is never virtual; otherwise
each "@" is tried from right to left and the first existing prefix is the base.
``GrammarError`` (a ValueError carrying ``message`` and ``hint``) is the only
exception the parser raises; ``requested_format`` reads the format a request
asked for leniently, so an error pack can answer in it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from difflib import get_close_matches
from urllib.parse import unquote

from readers.actions import ACTIONS, PROTOCOL_ACTIONS, Argument, Slots, named
from sparsefs.protocol.slots import split_slots

__all__ = [
    "ACTIONS_WITHOUT_ARGUMENT",
    "ACTIONS_WITH_ARGUMENT",
    "CORE_ACTIONS",
    "OPERATION_OPTION_KEYS",
    "OPTION_KEYS",
    "GrammarError",
    "VirtualRequest",
    "close_actions",
    "near_option",
    "parse_suffix",
    "reads_as_virtual",
    "requested_format",
    "reserved_name",
    "split_name",
    "split_slots",
    "suffix_is_request",
]

CORE_ACTIONS: frozenset[str] = PROTOCOL_ACTIONS  # readers.actions: the one table of actions
ACTIONS_WITH_ARGUMENT: frozenset[str] = named(argument=Argument.REQUIRED)
ACTIONS_WITHOUT_ARGUMENT: frozenset[str] = named(argument=Argument.NONE)
OPERATION_OPTION_KEYS: frozenset[str] = frozenset({"where", "by", "cols", "rows", "sheet", "since", "until"})
OPTION_KEYS: frozenset[str] = frozenset({"k", "format", "scope", "budget"}) | OPERATION_OPTION_KEYS

_FORMATS = ("text", "json", "verbose")
_INT_LIMITS = {"k": 50, "budget": 10_000_000}
_SYNTAX = {name: ACTIONS[name].syntax for name in CORE_ACTIONS}
_ACTION_ORDER = tuple(name for name in ACTIONS if name in CORE_ACTIONS)
_PERCENT_HINT = "write a literal '%' as %25 (50%25), and percent-encode only UTF-8 bytes, e.g. %2F for '/'"
_BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
_DIGITS = re.compile(r"[0-9]{1,20}")
SUGGEST_CUTOFF = 0.75
"""difflib ratio from which an unknown action is a typo of a known one (intnet 0.83, summ 0.86; old, v2: none)."""
_NEAR_KEYS = tuple(sorted(key for key in OPTION_KEYS if len(key) >= 4))
"""Option keys whose near misses are refused: shorter ones (k, by) are one edit from too many words."""


class GrammarError(ValueError):
    """The only exception parse_suffix/split_name ever raise.

    ``unknown_action`` is set (to the word after '@') when the action itself is
    unknown, so callers can tell a typo of an action from a name that merely
    contains '@'.
    """

    def __init__(self, message: str, hint: str, unknown_action: str | None = None) -> None:
        super().__init__(message, hint)
        self.message = message
        self.hint = hint
        self.unknown_action = unknown_action
        self.base: str | None = None  # set by split_name: the existing name the request was made of

    def __str__(self) -> str:
        return f"{self.message} (hint: {self.hint})"


class _FrozenOptions(Mapping[str, str]):
    """An immutable, hashable str -> str mapping (keeps VirtualRequest hashable)."""

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, str]) -> None:
        self._data: dict[str, str] = dict(data)

    def __getitem__(self, key: str) -> str:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        return hash(frozenset(self._data.items()))

    def __repr__(self) -> str:
        return repr(self._data)


def _no_options() -> Mapping[str, str]:
    return _FrozenOptions({})


@dataclass(frozen=True)
class VirtualRequest:
    """One parsed virtual request: what to do with the base file."""

    action: str
    argument: str | None = None
    slots: tuple[str, ...] = ()
    options: Mapping[str, str] = field(default_factory=_no_options)
    k: int | None = None
    format: str = "text"
    budget: int | None = None
    scope: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "slots", tuple(self.slots))
        if not isinstance(self.options, _FrozenOptions):
            object.__setattr__(self, "options", _FrozenOptions(self.options))


# --- small helpers -----------------------------------------------------------


def _show(text: str) -> str:
    """Quote user text for a message, shortened to keep error packs small."""
    return repr(text) if len(text) <= 40 else repr(text[:37]) + "..."


def _actions_hint(extra_actions: frozenset[str]) -> str:
    forms = [_SYNTAX[name] for name in _ACTION_ORDER]
    forms += [f"@{name}[=<argument>]" for name in sorted(extra_actions - CORE_ACTIONS)]
    return "valid actions: " + ", ".join(forms) + "; to ask, write @intent=<what you need> (a '/' in it as %2F)"


def _encoded(text: str) -> str:
    """Decoded text as it must be written back in a name: '%' as %25, '/' as %2F."""
    return text.replace("%", "%25").replace("/", "%2F")


def _require_text(suffix: str) -> None:
    try:
        suffix.encode("utf-8")
    except UnicodeEncodeError:
        raise GrammarError(
            "the name is not valid UTF-8 text",
            "write the request as UTF-8 text; other bytes must be percent-encoded "
            "UTF-8 (%C3%A9 for 'é'), and a literal '%' is %25",
        ) from None


def _decode(text: str) -> str:
    """Strict ``unquote``: bad '%' escapes or non-UTF-8 bytes are GrammarErrors."""
    bad = _BAD_PERCENT.search(text)
    if bad is not None:
        where = text[bad.start() : bad.start() + 3]
        raise GrammarError(f"bad percent escape {_show(where)}", _PERCENT_HINT)
    try:
        return unquote(text, encoding="utf-8", errors="strict")
    except UnicodeDecodeError:
        raise GrammarError("percent escapes do not decode to UTF-8 text", _PERCENT_HINT) from None


# --- parse_suffix ------------------------------------------------------------


def close_actions(word: str, extra_actions: Iterable[str] = ()) -> list[str]:
    """Known actions (and extra ones: exact operations) ``word`` is probably a typo of, closest first.

    One rule for the message and for whether ``name@word`` looks like a request
    at all (sparsefs.vfs.evidence): a name whose word has none stays free for a real file.
    """
    names = sorted(CORE_ACTIONS | frozenset(extra_actions))
    return get_close_matches(word.lower(), names, n=2, cutoff=SUGGEST_CUTOFF)


def _check_action(action: str, suffix: str, extra_actions: frozenset[str]) -> None:
    """Refuse an unknown action; a typo is told what it was probably meant as, not the whole list."""
    if action in CORE_ACTIONS or action in extra_actions:
        return
    hint = _actions_hint(extra_actions)
    if not action:
        raise GrammarError("empty action after '@'", hint, action)
    lowered = action.lower()
    if lowered != action and (lowered in CORE_ACTIONS or lowered in extra_actions):
        raise GrammarError(f"unknown action {_show(action)}: actions are lowercase", _fixed(lowered, action, suffix),
                           action)
    close = close_actions(action, extra_actions)
    if close:
        meant = " or ".join(f"@{name}" for name in close)
        raise GrammarError(f"unknown action {_show(action)}: did you mean {meant}?",
                           _fixed(close[0], action, suffix), action)
    raise GrammarError(f"unknown action {_show(action)}", hint, action)


def _fixed(action: str, typo: str, suffix: str) -> str:
    """The request with its action corrected, to copy; the action's form when that would be long."""
    corrected = "@" + action + suffix[len(typo) :]
    if len(corrected) <= 80:
        return f"write {corrected}"
    return "write " + _SYNTAX.get(action, f"@{action}=<argument>")


def near_option(key: str) -> str | None:
    """The option key that ``key`` (of a ``&key=value`` text segment) is a near miss of, if any:
    the same letters in another case, or one edit (insertion, deletion, substitution, swap) away
    from a key of four letters or more. Anything else is text (``R&D=...``, ``a&kk=3``)."""
    lowered = key.lower()
    if not key.isascii() or not key.isalpha() or (key == lowered and key in OPTION_KEYS):
        return None
    if lowered in OPTION_KEYS and len(lowered) >= 2:
        return lowered
    if len(key) < 3:
        return None
    return next((known for known in _NEAR_KEYS if _one_edit(lowered, known)), None)


def _one_edit(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` differ by exactly one insertion, deletion, substitution or swap of neighbours."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        swapped = len(diff) == 2 and diff[1] == diff[0] + 1 and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]]
        return len(diff) == 1 or swapped
    short, long = (a, b) if len(a) < len(b) else (b, a)
    return any(long[:i] + long[i + 1 :] == short for i in range(len(long)))


def _refuse_near_option(key: str, value: str) -> None:
    """A mistyped option must not silently become intent text (or a column name)."""
    known = near_option(key)  # then ``key`` is a short ASCII word
    if known is not None:
        shown = value if len(value) <= 40 else value[:37] + "..."
        raise GrammarError(f"unknown option '&{key}=': did you mean &{known}=?",
                           f"write &{known}={shown}; or, if it is text, write its '&' as %26 (%26{key}=)")


def _sort_segments(segments: list[str]) -> tuple[dict[str, str], list[str]]:
    """Split the segments after the head into raw options and argument text."""
    options: dict[str, str] = {}
    text: list[str] = []
    for segment in segments:
        key, sep, value = segment.partition("=")
        if sep:
            _refuse_near_option(key, value)
        if not (sep and key in OPTION_KEYS):
            text.append(segment)
        elif key in options:
            raise GrammarError(f"option {key!r} given twice", f"keep one &{key}=<value>")
        else:
            options[key] = value
    return options, text


def _check_stray(action: str, has_argument: bool, text: list[str]) -> None:
    """Text segments need a head with '=' and an action that takes an argument."""
    if not text or (has_argument and action not in ACTIONS_WITHOUT_ARGUMENT):
        return
    keys = ", ".join(sorted(OPTION_KEYS))
    if action in ACTIONS_WITHOUT_ARGUMENT:
        hint = f"options are {keys}; @{action} takes no argument"
    else:
        hint = f"options are {keys}; the argument goes after '=': @{action}=<text>"
    raise GrammarError(f"unknown option {_show(text[0])}", hint)


def _argument(action: str, raw: str | None) -> str | None:
    """Decode and strip the argument; enforce required/forbidden arguments."""
    argument = None if raw is None else (_decode(raw).strip() or None)
    if argument is None and action in ACTIONS_WITH_ARGUMENT:
        raise GrammarError(f"@{action} needs an argument", "write " + _SYNTAX[action])
    if argument is not None and action in ACTIONS_WITHOUT_ARGUMENT:
        wanted = argument if len(argument) <= 60 else argument[:57] + "..."
        hint = f"write @{action} alone, or @intent={_encoded(wanted)} to ask for that"
        raise GrammarError(f"@{action} takes no argument", hint)
    return argument


def _parse_int(key: str, value: str) -> int:
    limit = _INT_LIMITS[key]
    if _DIGITS.fullmatch(value) is None or not 1 <= int(value) <= limit:
        raise GrammarError(f"bad {key}={_show(value)}", f"{key} is a whole number from 1 to {limit:,}")
    return int(value)


def _check_format(value: str) -> str:
    if value not in _FORMATS:
        raise GrammarError(f"bad format={_show(value)}", "write &format=text or &format=json")
    return value


def _check_scope(value: str) -> str:
    if not value:
        raise GrammarError("empty scope", "write e.g. &scope=p10-20, &scope=L1-400 or a sheet")
    return value


def _build(action: str, argument: str | None, options: dict[str, str]) -> VirtualRequest:
    k, budget = options.get("k"), options.get("budget")
    fmt, scope = options.get("format"), options.get("scope")
    return VirtualRequest(
        action=action,
        argument=argument,
        slots=_slots(action, argument),
        options=_FrozenOptions(options),
        k=None if k is None else _parse_int("k", k),
        format="text" if fmt is None else _check_format(fmt),
        budget=None if budget is None else _parse_int("budget", budget),
        scope=None if scope is None else _check_scope(scope),
    )


def _slots(action: str, argument: str | None) -> tuple[str, ...]:
    slots = ACTIONS[action].slots if action in ACTIONS else Slots.NONE
    if argument is None or slots is Slots.NONE:
        return ()
    return (argument,) if slots is Slots.WHOLE else split_slots(argument)


def parse_suffix(suffix: str, extra_actions: frozenset[str] = frozenset()) -> VirtualRequest:
    """Parse everything after the '@' (e.g. ``intent=R&D 2023; staff&k=3``)."""
    _require_text(suffix)
    head, *segments = suffix.split("&")
    action, sep, raw = head.partition("=")
    _check_action(action, suffix, extra_actions)
    raw_options, text = _sort_segments(segments)
    _check_stray(action, bool(sep), text)
    joined = "&".join([raw, *text]) if sep else None
    argument = _argument(action, joined)
    options = {key: _decode(value).strip() for key, value in raw_options.items()}
    return _build(action, argument, options)


# --- split_name --------------------------------------------------------------


def split_name(
    name: str,
    exists: Callable[[str], bool],
    extra_actions: frozenset[str] = frozenset(),
) -> tuple[str, VirtualRequest] | None:
    """Return (base, request) for a virtual name, or None when it is not one.

    A name that exists is real (None). Otherwise each '@' is tried from right
    to left; the first non-empty prefix that exists is the base and the rest
    is parsed (GrammarError propagates). No existing base gives None (ENOENT).
    """
    if exists(name):
        return None
    at = name.rfind("@")
    while at > 0:
        base = name[:at]
        if exists(base):
            try:
                return base, parse_suffix(name[at + 1 :], extra_actions)
            except GrammarError as err:
                err.base = base
                raise
        at = name.rfind("@", 0, at)
    return None


def suffix_is_request(suffix: str, extra_actions: Iterable[str] = ()) -> bool:
    """Does ``suffix`` (after an '@') read as a request, a pack or an error pack? Everything that parses, a
    refused ``word=...``/``word&...``, and a typo of an action or operation (``scuot``, ``summ``); not a word
    close to none (``old``, ``v2``, ``backup``): ``notes.txt@old`` stays free for a real file."""
    try:
        parse_suffix(suffix, frozenset(extra_actions))
    except GrammarError as err:
        word = err.unknown_action
        if word is None or not word or suffix.startswith((f"{word}=", f"{word}&")):
            return True
        return bool(close_actions(word, extra_actions))
    return True


def reserved_name(name: str, extra_actions: Iterable[str] = ()) -> bool:
    """Would ``name`` read as a virtual file if the part before one of its '@' existed? Such a name is never
    created in the source (create, mkdir, mknod, symlink, link, rename onto it: EROFS), so no real file
    can come to shadow a pack, whether its base exists yet or not."""
    at = name.rfind("@")
    while at > 0:
        if suffix_is_request(name[at + 1 :], extra_actions):
            return True
        at = name.rfind("@", 0, at)
    return False


def reads_as_virtual(name: str, exists: Callable[[str], bool], extra_actions: Iterable[str] = ()) -> bool:
    """Does ``name`` read as a virtual file now (``stat`` shows a pack or an error pack)? The base is chosen
    as :func:`split_name` chooses it: the first existing prefix from the right."""
    if exists(name):
        return False
    at = name.rfind("@")
    while at > 0:
        if exists(name[:at]):
            return suffix_is_request(name[at + 1 :], extra_actions)
        at = name.rfind("@", 0, at)
    return False


def requested_format(suffix: str) -> str:
    """The format ``suffix`` asks for, read leniently (a near-miss key, a bad escape elsewhere): an error
    pack answers in it even when the request itself does not parse. "text" when none is readable."""
    for segment in suffix.split("&")[1:]:
        key, sep, value = segment.partition("=")
        if sep and (key == "format" or near_option(key) == "format"):
            wanted = unquote(value, errors="replace").strip()
            if wanted in _FORMATS:
                return wanted
    return "text"
