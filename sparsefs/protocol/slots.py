"""Slots: one need each, split from an intent's text (rule 6 of ``sparsefs.protocol.grammar``).

Pure functions, stdlib only. See the grammar module docstring, rule 6, for
the rules; ``split_slots`` is the entry point.
"""

from __future__ import annotations

import re
from itertools import pairwise

_LEAD = r"(?<![^\s;])"  # a marker starts the text or follows whitespace or ';'
_MARKER_STYLES: tuple[re.Pattern[str], ...] = (
    re.compile(_LEAD + r"\(([0-9]{1,3})\)"),  # (1) a (2) b
    re.compile(_LEAD + r"[Qq]([0-9]{1,3})(?::|\)|\.(?!\S))"),  # Q1: a Q2: b
    re.compile(_LEAD + r"([0-9]{1,3})\)"),  # 1) a 2) b
    re.compile(_LEAD + r"([0-9]{1,3})\.(?!\S)"),  # 1. a 2. b (not 2.5)
)


# --- split_slots -------------------------------------------------------------


def _is_sequence(marks: list[re.Match[str]]) -> bool:
    numbers = [int(mark.group(1)) for mark in marks]
    return len(numbers) >= 2 and numbers == list(range(1, len(numbers) + 1))


def _items(text: str, marks: list[re.Match[str]]) -> list[str]:
    """The text after each marker up to the next one."""
    ends = [mark.start() for mark in marks[1:]] + [len(text)]
    return [text[mark.end() : end] for mark, end in zip(marks, ends, strict=True)]


def _has_words(item: str) -> bool:
    return any(piece.strip() for piece in item.split(";"))


def _numbered_marks(text: str) -> list[re.Match[str]] | None:
    """Markers of the first style whose numbers run 1..n and whose items are non-empty."""
    for style in _MARKER_STYLES:
        marks = list(style.finditer(text))
        if _is_sequence(marks) and all(_has_words(item) for item in _items(text, marks)):
            return marks
    return None


def _prefixed(prefix: str, piece: str) -> str:
    piece = piece.strip()
    return f"{prefix} {piece}".strip() if piece else ""


def _numbered_pieces(text: str, marks: list[re.Match[str]]) -> list[str]:
    """Split at markers (and ';'); the text before marker 1 prefixes each item."""
    pieces = text[: marks[0].start()].split(";")
    prefix = pieces.pop().strip()
    for item in _items(text, marks):
        pieces += [_prefixed(prefix, piece) for piece in item.split(";")]
    return pieces


_SENTENCE = re.compile(r"(?<=[.?!])\s+(?=[A-Z(\"'])")
_INSTRUCTION_START = re.compile(
    r"^(please|kindly|round|answer|respond|assume|note|remember|keep in mind|explain why|"
    r"give (a|your|the) (response|answer)|provide (a|your|the) (response|answer)|calculate what|"
    r"(base|basing) your|rel(y|ying) (on|only)|utili[sz]e|(use|using) only|you are an?|as an? \w+ analyst|"
    r"answer the following|we need to|address the question|"
    r"if\b.{0,160}\b(not|cannot|can't|isn't|aren't)\b.{0,120}\b(state|say|explain|answer)\b)",
    re.IGNORECASE,
)
_INSTRUCTION_ANYWHERE = re.compile(
    r"\b(round (your answer|to (one|two|three|\d+) decimal)|decimal places?\b|answer in units|the answer\b|"
    r"only resources?\b|here'?s the question|as if you (are|were)|lost internet)", re.IGNORECASE)
_QUESTION_LEAD = re.compile(r"^(here'?s the question|the question is|question)\s*:\s*", re.IGNORECASE)


def without_instructions(text: str) -> str:
    """The intent without sentences that instruct rather than ask ("Round your answer to two decimal
    places.", "If it cannot be calculated, then please state that."): they are no need of their own and
    only add noise words to a slot. A sentence that asks (ends with '?') stays, minus a "Here's the
    question:" lead. Text that is all instruction is kept whole."""
    kept = []
    for sentence in _SENTENCE.split(text.strip()):
        asks = sentence.rstrip().endswith("?")
        if not asks and (_INSTRUCTION_START.match(sentence) or _INSTRUCTION_ANYWHERE.search(sentence)):
            continue
        kept.append(_QUESTION_LEAD.sub("", sentence.split(": ", 1)[1] if asks and _has_lead(sentence) else sentence))
    return " ".join(kept).strip() or text.strip()


def _has_lead(sentence: str) -> bool:
    """A question behind a lead such as "Here's the question:" or "Please answer the following question:"."""
    return bool(re.match(r"^.{0,80}\bquestion\s*:", sentence, re.IGNORECASE))


def split_slots(text: str) -> tuple[str, ...]:
    """Split an intent into slots at ';', numbered questions (1, 2, ...), then conjunction lists, after
    leaving out sentences that only instruct (``without_instructions``)."""
    text = without_instructions(text)
    marks = _numbered_marks(text)
    pieces = text.split(";") if marks is None else _numbered_pieces(text, marks)
    listed = [item for piece in pieces for item in _list_items(piece.strip())]
    slots = tuple(piece for piece in (raw.strip() for raw in listed) if piece)
    if slots:
        return slots
    whole = text.strip()
    return (whole,) if whole else ()


# --- conjunction lists (rule 6) ---------------------------------------------------

MAX_LIST_ITEM_WORDS = 6
"""A list item longer than this means the commas belong to prose, not to a list."""

_QUOTED = re.compile(r'"[^"]*"|\u201c[^\u201d]*\u201d|(?<!\w)\'[^\']*\'(?!\w)')
_LIST_COMMA = re.compile(r"(?<![0-9]),|,(?![0-9])")  # a comma between two digits groups thousands
_CONJUNCTION = re.compile(r"(?<!\S)(?:and|or|as well as)(?!\S)", re.IGNORECASE)
_PROSE_MARK = re.compile(r"[.:?!](?:\s|$)")
_END_MARK = re.compile(r"[?.!]+$")
_DROPPED = frozenset({"please", "compare", "show", "list", "find", "give", "get", "tell", "report",
                      "extract", "summarize", "summarise", "me", "us"})
_SHARED = frozenset({"what", "which", "how", "much", "many", "were", "was", "is", "are", "did", "does", "do",
                     "the", "a", "an", "our", "its", "their", "all", "both", "about"})
_TAIL = frozenset({"for", "in", "during", "at", "from", "by", "between", "over", "since", "until", "across",
                   "on", "within", "per", "versus", "vs", "vs."})
_CLAUSE_OPENERS = frozenset({"when", "if", "because", "while", "although", "though", "since", "after", "before",
                             "whether", "unless", "once", "as", "we", "they", "it", "i"})
_QUESTION_WORDS = frozenset({"what", "which", "how", "why", "who", "when", "where", "were", "was", "is", "are",
                             "did", "does", "do", "can", "could", "should", "would", "will"})
_DETERMINERS = frozenset({"the", "a", "an", "their", "its", "our", "his", "her", "my", "your", "this", "these"})
_LINKS = frozenset({"of", "on", "about", "by", "for", "in", "to", "with", "from", "at", "into", "over", "regarding",
                    "the", "a", "an", "their", "its", "our", "his", "her", "my", "your"})
_NOT_BEFORE_ITEM = frozenset({"and", "or", "including", "especially", "particularly", "notably", "namely", "such",
                              "like", "e.g.", "i.e.", "except", "excluding", "plus"})
_FILLER = frozenset({"the", "a", "an", "in", "of", "for", "on", "at", "to", "by", "and", "or", "as", "well",
                     "fy", "q1", "q2", "q3", "q4"}) | _SHARED


def _list_items(piece: str) -> list[str]:
    """The slots of one piece: one per item of a conjunction list, else the piece itself."""
    found = _conjunction_list(piece)
    if found is None:
        return [piece]
    prefix, items, suffix = found
    return [_joined(prefix, item, suffix) for item in items]


def _joined(prefix: str, item: str, suffix: str) -> str:
    head = prefix.split()
    words = item.split()
    if head and words and head[-1].casefold() == words[0].casefold():
        words = words[1:]  # "the button layout, the shape": the prefix already ends with "the"
    text = " ".join([*head, *words])
    if not suffix:
        return text
    return text + suffix if _END_MARK.fullmatch(suffix) else f"{text} {suffix}"


def _conjunction_list(piece: str) -> tuple[str, list[str], str] | None:
    """(prefix, items, suffix) when ``piece`` is a list of >= 3 short items, else None.

    The first item is what follows the last preposition or article before the
    first comma; the words up to there are the prefix every item shares
    ("What did Bains say about the arts, culture, and tourism" -> "... about
    the arts", "... about the culture", "... about the tourism"). Middle items
    must be bare noun phrases (no question word, no "including ..." aside).
    The last item runs up to a preposition that starts a shared tail
    ("revenue, margin and cash flow for 2023"); without one it is kept whole.
    """
    opener = piece.split(maxsplit=1)
    if opener and opener[0].casefold() in _CLAUSE_OPENERS:
        return None
    masked = _QUOTED.sub(lambda m: "\x00" * len(m.group()), piece)
    cuts = [m.start() for m in _LIST_COMMA.finditer(masked)]
    if not cuts:
        return None
    segments = [piece[a + 1 : b] for a, b in pairwise([-1, *cuts, len(piece)])]
    conj = _CONJUNCTION.search(masked, cuts[-1] + 1)
    if conj is None:
        return None
    before, final = piece[cuts[-1] + 1 : conj.start()].strip(), piece[conj.end() :]
    middle = [m.strip() for m in [*segments[1:-1], *([before] if before else [])]]
    if not middle or not all(map(_is_middle_item, middle)):
        return None
    prefix, first = _head(segments[0], middle)
    if prefix.split()[-1:] and prefix.split()[-1].casefold() in _NOT_BEFORE_ITEM:
        return None  # "fishing and tourism, oil and gas": the list's items have conjunctions of their own
    last, suffix = _tail(final)
    items = [first, *middle, last]
    if any(word.casefold() in _NOT_BEFORE_ITEM for word in first.split()):
        return None  # "fishing and tourism, oil and gas": items with conjunctions of their own
    return (prefix, items, suffix) if all(map(_is_item, items)) else None


def _head(segment: str, middle: list[str]) -> tuple[str, str]:
    """Split the first segment into the shared prefix and the first item.

    When every middle item starts with the same determiner ("the reasons, the
    steps"), the first item starts at that word's last occurrence; otherwise
    it is what follows the last preposition or article ("... about the | arts"),
    else the whole segment ("net income"). Text up to a ':' is always prefix.
    """
    kept, _, rest = segment.rpartition(":")
    words = rest.split()
    while words and words[0].casefold() in _DROPPED:  # "Compare revenue, ..." / "Summarize the ..."
        words.pop(0)
    starts = {m.split()[0].casefold() for m in middle}
    same = starts.pop() if len(starts) == 1 and starts <= _DETERMINERS else None
    if same is not None:
        at = [i for i, word in enumerate(words[:-1]) if word.casefold() == same]
        cut = at[-1] if at else 0
    else:
        links = [i for i, word in enumerate(words[:-1]) if word.casefold() in _LINKS]
        cut = links[-1] + 1 if links else 0
    prefix = " ".join(([kept + ":"] if kept else []) + words[:cut])
    return prefix, " ".join(words[cut:])


def _tail(segment: str) -> tuple[str, str]:
    """Split what follows the last conjunction into the last item and shared trailing words."""
    end = _END_MARK.search(segment.rstrip())
    mark = end.group() if end else ""
    words = segment.rstrip()[: len(segment.rstrip()) - len(mark)].split()
    at = next((i for i, word in enumerate(words) if i and word.casefold() in _TAIL), len(words))
    suffix = " ".join(words[at:])
    return " ".join(words[:at]), (f"{suffix}{mark}" if suffix else mark)


def _is_middle_item(item: str) -> bool:
    """A middle item is a bare noun phrase: no question word or verb of the sentence around it,
    and not an aside ("…, including the functions and …")."""
    words = [word.casefold() for word in item.split()]
    return bool(words) and words[0] not in _NOT_BEFORE_ITEM and not any(w in _QUESTION_WORDS for w in words)


def _is_item(item: str) -> bool:
    """Short, no sentence punctuation, and at least one letter word that is not filler."""
    words = item.split()
    if not words or len(words) > MAX_LIST_ITEM_WORDS or _PROSE_MARK.search(item):
        return False
    return any(sum(c.isalpha() for c in w) >= 2 and w.casefold() not in _FILLER for w in words)
