"""Group-by: one aggregate per distinct value of the ``by`` column, over all matched rows.

Groups are sorted by their aggregate, largest first, and at most k are shown
with the total number of groups. A group's sum/mean uses :func:`math.fsum`
over its values (correctly rounded; a single aggregate without ``by`` is exact
as a Decimal, see :mod:`readers.table.operations`); a group sum beyond the float range
is shown as an overflow, and its mean is taken from the values divided first.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from readers.base import Batch
from readers.ops import Operation, format_number, safe_fsum, safe_mean
from readers.table.model import resolve_column
from readers.table.operations import Selection, _batch, _k


def group_by(sel: Selection, op: Operation, max_chars: int) -> Batch:
    g = resolve_column(sel.sheet, op.by or "")
    keys = sel.values(g)
    rows = sel.rows.tolist()
    codes: dict[str, int] = {}
    group_of = np.fromiter((codes.setdefault(keys[i].strip(), len(codes)) for i in rows), np.int64, len(rows))
    names = list(codes)
    by_name = sel.sheet.columns[g]
    if op.target is None:
        results = np.bincount(group_of, minlength=len(names)).astype(np.float64)
        what, cols, label = f"count by {by_name}", [g], sel.label(g)
        skipped = 0
    else:
        j = resolve_column(sel.sheet, op.target)
        what, cols, label = f"{op.name}({sel.sheet.columns[j]}) by {by_name}", [g, j], sel.label(j)
        results, skipped = _per_group(sel, op.name, j, group_of, len(names))
    order = sorted(range(len(names)), key=lambda c: (-_key(float(results[c])), names[c]))
    k = _k(op)
    head = (
        f"{what}: {len(names):,} groups over {len(rows):,} matched rows"
        + (f"; {skipped:,} non-numeric cells skipped" if skipped else "")
        + f"; top {min(k, len(names))} by value:"
    )
    lines = [head]
    for c in order[:k]:
        value = "n/a" if math.isnan(results[c]) else format_number(float(results[c]))
        lines.append(f"{names[c] or '(empty)'}\t{value}")
    return _batch(sel, label, lines, cols, op, max_chars)


def _key(value: float) -> float:
    return -math.inf if math.isnan(value) else float(value)


def _per_group(sel: Selection, name: str, j: int, group_of: np.ndarray, n: int) -> tuple[np.ndarray, int]:
    """Aggregate of column j per group code; NaN for a group with no numeric cell."""
    if name in ("count", "distinct"):
        values = sel.values(j)
        seen: dict[int, set[str]] = defaultdict(set)
        counts = np.zeros(n, np.float64)
        for code, i in zip(group_of.tolist(), sel.rows.tolist(), strict=True):
            cell = values[i].strip()
            if cell:
                counts[code] += 1
                if name == "distinct":
                    seen[code].add(cell)
        if name == "distinct":
            counts = np.array([len(seen[c]) for c in range(n)], np.float64)
        return counts, 0
    floats = sel.floats(j)[sel.rows]
    numeric = ~np.isnan(floats)
    values = sel.values(j)
    nonempty = np.fromiter((bool(values[i].strip()) for i in sel.rows.tolist()), np.bool_, len(sel.rows))
    skipped = int((nonempty & ~numeric).sum())
    codes, nums = group_of[numeric], floats[numeric]
    order = np.argsort(codes, kind="stable")
    codes, nums = codes[order], nums[order]
    bounds = np.searchsorted(codes, np.arange(n + 1))
    out = np.full(n, np.nan)
    for c in range(n):
        part = nums[bounds[c] : bounds[c + 1]]
        if len(part):
            out[c] = _reduce(name, part)
    return out, skipped


def _reduce(name: str, part: np.ndarray) -> float:
    if name == "sum":
        return safe_fsum(part.tolist())
    if name == "mean":
        return safe_mean(part.tolist())
    return float(part.min() if name == "min" else part.max())
