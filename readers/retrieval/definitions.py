"""'What is X?': the sentences that define X rank first.

A definition question names one thing and nothing else ("What is KATNAL1?", "What are microtubule
severing enzymes?"), so BM25 can only count X, and every sentence that mentions X ties with the one that
says what it is; the issue 27 miss analysis lists these among the papers' ranking misses. A defining
sentence has a shape, in any field: X followed by a copula or a naming verb ("X is a ...", "X are a
family of ...", "X (also known as ...) is", "X refers to", "X, a ..."). :func:`definition_question` takes X
from the question (and, through readers.retrieval.expand, the other form of X the document defines:
"What is RSV?" also looks for "respiratory syncytial virus is"), and :func:`lifted` adds
:data:`DEFINITION_LIFT` x the slot's best score to the units, among the slot's best
:data:`CANDIDATES`, that hold X in that shape. Other questions are left as they are.

Measured on the calibration split (docs/BENCHMARKS.md, issue 27): covidqa 248 -> 250 of 332 at the same
median passage length; small (about 20 questions are of this form), kept because it is free for every
other question and follows the question's form, not the data set.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import numpy as np

from readers.retrieval.bm25index import Scores, candidates

DEFINITION_LIFT = 0.6
"""Share of the slot's best score a defining unit gains (0.3: +1, 0.6: +2 of 332 on the calibration split)."""
CANDIDATES = 200
"""Units looked at: the slot's best by score (a defining sentence holds X, so it scores)."""
_QUESTION = re.compile(
    r"^\W*(?:what|who)\s+(?:is|are|was|were)\s+(?:an?\s+|the\s+)?(?P<x>[^?]{1,60}?)\s*\?*\s*$", re.IGNORECASE)
_SHAPE = (r"\s*(\([^)]{1,80}\)\s*)?(,\s*)?(is|are|was|were|refers?\s+to|represents?|denotes?|means?|stands?\s+for|"
          r"(also\s+)?(known|called|termed|defined)\s+as|(a|an)\s)\b")


def definition_question(question: str) -> str | None:
    """X of a 'What/Who is X?' question, else None."""
    match = _QUESTION.match(question)
    return match.group("x").strip() if match else None


def defining(forms: Sequence[str]) -> re.Pattern[str] | None:
    """A pattern for any of ``forms`` (X and its other forms) in a defining shape."""
    usable = [re.escape(f) for f in forms if len(f.strip()) >= 2]
    return re.compile(r"(?<!\w)(?:" + "|".join(usable) + r")" + _SHAPE, re.IGNORECASE) if usable else None


def lifted(raw: Scores, pattern: re.Pattern[str], texts_of: Callable[[list[int]], list[str]]) -> Scores:
    """``raw`` with DEFINITION_LIFT x its best score added to the best CANDIDATES units that match ``pattern``."""
    best = candidates(raw, np.zeros(len(raw), dtype=np.bool_))[:CANDIDATES]
    if not best:
        return raw
    out: Scores = raw.copy()
    top = float(raw[best[0]])
    for u, text in zip(best, texts_of(best), strict=True):
        if pattern.search(text):
            out[u] += DEFINITION_LIFT * top
    return out
