"""The Tables Reader's whole-block CSV path (readers.table.delimited._fast_block) gives the very table
the row-by-row path gives: same view, row offsets, columns, notes and exact aggregates."""

from __future__ import annotations

import numpy as np
import pytest

from readers.base import Parsed, UnsupportedArtifact
from readers.kit.source import MemorySource
from readers.ops import build_operation
from readers.table import delimited
from readers.table.reader import TableReader

CASES = {
    "plain": b"id,name,price\n1,a,10.50\n2,b,-3.25\n3,c,\n4,d,n/a\n",
    "no final newline": b"id,price\n1,1.5\n2,2.5",
    "crlf": b"id,price\r\n1,1.5\r\n2,-2.5\r\n",
    "cr only": b"id,price\r1,1.5\r2,2.5\r",
    "bom": b"\xef\xbb\xbfid,price\n1,7\n2,8\n",
    "semicolon, thousands": b"id;price\n1;1,234.50\n2;-1,000\n3;12\n",
    "tab": b"id\tprice\n1\t4\n2\t5\n",
    "pipe": b"id|price\n1|4\n2|5\n",
    "ragged": b"a,b,c\n1,2,3\n4,5\n6,7,8\n9,10,11\n",
    "no header": b"1,2.5\n2,3.5\n3,4.5\n",
    "header only": b"id,price\n",
    "blank cells": b"id,price,note\n1,,x\n2,3,\n,,\n",
    "blank line (row by row)": b"id,price\n1,2\n\n3,4\n",
    "non-ascii (row by row)": "id,price,city\n1,2,Zürich\n2,3,Köln\n".encode(),
    "tab inside a cell (row by row)": b"id,price,note\n1,2,a\tb\n3,4,c\n",
    "quoted (csv module)": b'id,price,note\n1,2,"x, y"\n3,4,"multi\nline"\n',
    "scientific and signs": b"id,price\n1,+1e3\n2,-2.5E-1\n3,.5\n4,0\n",
}


def parse(data: bytes, fast: bool, monkeypatch: pytest.MonkeyPatch) -> Parsed:
    with monkeypatch.context() as patch:
        if not fast:
            patch.setattr(delimited, "_fast_block", lambda text, delim: None)
        return TableReader().parse(MemorySource("t.csv", data))


def aggregates(parsed: Parsed) -> list[str]:
    out = []
    sheet = parsed.data["sheets"][0]
    for name in ("sum", "mean", "min", "max", "count"):
        for column in sheet.columns:
            try:
                batch = TableReader().operate(parsed, build_operation(name, column, {}, None), 4000)
                out.append(" | ".join(i.text for i in batch.items) + repr(batch.flags))
            except Exception as err:  # noqa: BLE001 - the same error both ways is part of "the same"
                out.append(f"{type(err).__name__}: {err}")
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_the_block_path_gives_the_row_by_row_table(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fast, slow = parse(CASES[name], True, monkeypatch), parse(CASES[name], False, monkeypatch)
    assert fast.full_view == slow.full_view
    assert np.array_equal(fast.data["unit_starts"], slow.data["unit_starts"])
    assert np.array_equal(fast.data["unit_ends"], slow.data["unit_ends"])
    (a,), (b,) = fast.data["sheets"], slow.data["sheets"]
    assert (a.columns, a.has_header, a.start, a.end, a.notes) == (b.columns, b.has_header, b.start, b.end, b.notes)
    assert aggregates(fast) == aggregates(slow)


def test_the_block_path_is_taken_where_it_can_be_and_not_elsewhere() -> None:
    assert delimited._fast_block("a,b\n1,2\n", ",") is not None
    assert delimited._fast_block("a,b\r\n1,2\r\n", ",") is not None
    for refused in ("a,b\n\n1,2\n", "a,b\n1,é\n", "a,b\n1,x\ty\n", "", "\n"):
        assert delimited._fast_block(refused, ",") is None


def test_an_empty_table_is_refused_either_way(monkeypatch: pytest.MonkeyPatch) -> None:
    for fast in (True, False):
        with pytest.raises(UnsupportedArtifact, match=r"empty table \(no rows\)"):
            parse(b"\n\n", fast, monkeypatch)
