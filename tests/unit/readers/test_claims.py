"""@verify: amounts in text, lexical stance, selection, and verify() over the real Readers.

Expected values are written by hand or read independently from the sources
(pymupdf page text, the csv module, the QA document's own text), never from
the code under test.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Sequence
from pathlib import Path

import pymupdf
import pytest

from readers.base import Anchor, BadAnchor, Batch, EvidenceItem, Parsed, Reader
from readers.claims.numbers import Amount, agrees, comparable, find_amounts, find_dates, parse_amount
from readers.claims.stance import claim_query, parse_claim, stance
from readers.claims.verify import choose, cost, verify
from readers.pdf.reader import PdfReader
from readers.table.reader import TableReader
from readers.text import TextReader
from tests.reader_conformance import MemorySource

DATA = Path(__file__).resolve().parents[4] / "shared" / "data"
AMAZON = DATA / "pdf" / "filings" / "AMAZON_2019_10K.pdf"
BOEING = DATA / "pdf" / "filings" / "BOEING_2022_10K.pdf"
REFERENCE = DATA / "csv" / "datasets-covid-19" / "reference.csv"
AGGREGATE = DATA / "csv" / "datasets-covid-19" / "worldwide-aggregate.csv"
COVIDQA = DATA / "qa" / "covidqa-dev.docs.jsonl"
H5N1_DOC = "covidqa-1652"  # 44K chars: "... a mortality rate of 53%", "higher CEACAM1 protein expression"


def amount(text: str) -> Amount:
    found = find_amounts(text)
    assert len(found) == 1, found
    return found[0]


# -- amounts -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value", "kind"),
    [
        ("$2.1 billion", 2.1e9, "currency"),
        ("2,100 million", 2.1e9, "plain"),
        ("$2.1bn", 2.1e9, "currency"),
        ("2.1B", 2.1e9, "plain"),
        ("$2,100", 2100, "currency"),
        ("USD 40 million", 40e6, "currency"),
        ("€40m", 40e6, "currency"),
        ("£1,234.5", 1234.5, "currency"),
        ("40 million dollars", 40e6, "currency"),
        ("1,234.5", 1234.5, "plain"),
        ("(1,234)", 1234, "plain"),
        ("-5.5%", 5.5, "percent"),
        ("12%", 12, "percent"),
        ("12 percent", 12, "percent"),
        ("0.12", 0.12, "plain"),
        ("156,000", 156_000, "plain"),
    ],
)
def test_amounts(text: str, value: float, kind: str) -> None:
    found = amount(f"was {text} in total")
    assert found.value == pytest.approx(value)
    assert found.kind == kind


@pytest.mark.parametrize(
    "text",
    [
        "in 2023",
        "FY2023 and the 777X",
        "expenses(1) and costs(12)",
        "see note (2) and [3]",
        "5m of cable",  # metres, not millions, without a currency
        "on 2020-01-25, 1/25/2020 and January 25, 2020",
    ],
)
def test_context_is_not_an_amount(text: str) -> None:
    assert find_amounts(text) == []


def test_a_year_with_a_currency_sign_is_an_amount() -> None:
    assert amount("cost $2023").value == 2023
    assert amount("cost 2,023").value == 2023


def test_dates_become_one_token() -> None:
    text = "on 2020-01-25, 1/25/2020, January 25, 2020 and 25 Jan 2020"
    assert {d.token for d in find_dates(text)} == {"date:2020-01-25"}
    assert len(find_dates(text)) == 4


def test_change_amounts_are_deltas() -> None:
    assert amount("increased by $94 million").delta
    assert not amount("was $94 million").delta
    assert not comparable(amount("increased by $94 million"), amount("was $94 million"))


@pytest.mark.parametrize(
    ("claim", "found", "agree"),
    [
        ("$2.1 billion", "$2,098 million", True),  # rounds to the claim's precision
        ("$2.1 billion", "$2,149 million", True),
        ("$2.1 billion", "$2,000 million", False),
        ("$2.1 billion", "$2,160 million", False),
        ("$2,098 million", "$2.1 billion", True),  # the coarser side decides
        ("$2,100 million", "$2,098 million", False),
        ("$2.1 billion", "2,100 million", True),
        ("$35.9 billion", "35,931", True),  # a table figure "in millions"
        ("$2.9 billion", "(2,852)", True),  # parentheses are presentation
        ("$2.9 billion", "2852", False),  # a bare ungrouped number is not an amount
        ("12%", "12.4%", True),
        ("12.0%", "12.4%", False),
        ("12%", "0.12", False),  # only an explicit percent is one
        ("1,437", "1437", True),
        ("3.1 million", "2877800", False),
        ("2.9 million", "2877800", True),
        ("$40 million", "€40 million", False),
    ],
)
def test_agreement(claim: str, found: str, agree: bool) -> None:
    assert agrees(amount(claim), amount(found)) is agree


def test_parse_amount_takes_whole_cells_only() -> None:
    assert parse_amount(" 2877800 ") is not None
    assert parse_amount("2020-01-22") is None
    assert parse_amount("Albania") is None
    assert parse_amount("12 apples") is None


# -- stance --------------------------------------------------------------------------


RD = "R&D expenses were $2.1 billion in 2023"


@pytest.mark.parametrize(
    ("claim", "passage", "expected"),
    [
        (RD, "Research and development expenses were $2.1 billion in 2023.", "supporting"),
        (RD, "R&D expenses were $2,098 million in 2023, up from $1.9 billion in 2022.", "supporting"),
        (RD, "Research and development expenses were $2.4 billion in 2023.", "contradicting"),
        (RD, "(Dollars in millions)\nResearch and development expense\n2,100\n1,900", "supporting"),
        (RD, "Research and development expense, net\n(2,400)\n(2,100)", "supporting"),
        (RD, "Research and development expense, net\n(2,400)\n(2,300)", "contradicting"),
        # a year next to the term is context, not a different value
        (RD, "In 2023 and 2022, R&D expenses grew as planned.", None),
        # a footnote marker and a page number are not values
        (RD, "R&D expenses(1) were $2.1 billion in 2023.\n\n26\n\nLiquidity", "supporting"),
        (RD, "R&D expenses(1) for 2023 are discussed below.\n\n26\n\nLiquidity", None),
        # another subject near the figure says nothing about this claim
        (RD, "Other expenses were $5 billion in 2023.", None),
        (RD, "Research and development expense increased by $603 million in 2023.", None),
        (
            "R&D expense decreased by $94 million in 2023",
            "Research and development expense increased by $94 million in 2023.",
            "contradicting",
        ),
        (
            "R&D expense increased by $94 million in 2023",
            "Research and development expense increased by $94 million in 2023 and decreased by $56 million in 2022.",
            "supporting",
        ),
        ("Net sales grew 20% in 2019", "Net sales increased 20% in 2019.", "supporting"),
        ("Net sales grew 20% in 2019", "Net sales increased 18% in 2019.", "contradicting"),
        ("Net sales grew 20% in 2019", "Net sales were 0.20 of the total.", None),
        # claims without numbers: terms and polarity
        ("Revenue increased in 2023", "In 2023 revenue increased across all segments.", "supporting"),
        ("Revenue increased in 2023", "In 2023 revenue decreased across all segments.", "contradicting"),
        ("Revenue increased in 2023", "Revenue did not increase in 2023.", "contradicting"),
        ("Revenue did not increase in 2023", "Revenue decreased in 2023.", "supporting"),
        ("Revenue increased in 2023", "Revenue is reported by segment.", None),
        ("The merger was approved", "Regulators rejected the merger in May.", "contradicting"),
        ("The plant has no backup generator", "The plant has a backup generator on site.", "contradicting"),
        ("The plant has no backup generator", "The plant runs without a backup generator.", "supporting"),
        ("Headcount rose", "Revenue fell.", None),
    ],
)
def test_stance(claim: str, passage: str, expected: str | None) -> None:
    assert stance(parse_claim(claim), passage) == expected


def test_stance_in_table_rows_uses_column_names() -> None:
    heading = "columns: Country | Lat | Population"
    rows = "Albania\t41.1533\t2877800\nAlgeria\t28.0339\t43851043"
    assert stance(parse_claim("Albania has a population of 2,877,800"), rows, heading) == "supporting"
    assert stance(parse_claim("Albania has a population of 3.1 million"), rows, heading) == "contradicting"
    # Lat is next to Albania in the row, but it is not the population
    assert stance(parse_claim("Albania has a population of 41"), "Albania\t41\t\n", heading) is None


def test_claim_query_leaves_amounts_out_and_spells_aliases() -> None:
    query = claim_query(parse_claim(RD))
    assert "2.1" not in query and "billion" not in query
    assert query.split()[:1] == ["R&D"] and "research and development" in query
    assert "2023" in query and "expenses" in query
    assert "2020-01-25" in claim_query(parse_claim("cases on January 25, 2020"))


# -- selection ----------------------------------------------------------------------


def item(label: str, size: int, score: float, kind: str) -> EvidenceItem:
    return EvidenceItem(Anchor(label, 0, 0), "x" * size, score, stance=kind)  # type: ignore[arg-type]


def test_choose_keeps_the_only_contradicting_passage() -> None:
    supporting = [item(f"S{i}", 300, 9.0 - i, "supporting") for i in range(3)]
    contradicting = [item("C", 300, 1.0, "contradicting")]
    chosen = choose(supporting + contradicting, 1000)
    assert [i.anchor.label for i in chosen] == ["S0", "S1", "C"]
    assert sum(map(cost, chosen)) <= 1000


def test_choose_makes_room_for_a_long_contradicting_passage() -> None:
    supporting = [item(f"S{i}", 300, 9.0 - i, "supporting") for i in range(3)]
    chosen = choose([*supporting, item("C", 900, 1.0, "contradicting")], 1000)
    assert [i.anchor.label for i in chosen] == ["S0", "C"]


def test_choose_alone_fills_the_budget_and_respects_k() -> None:
    supporting = [item(f"S{i}", 300, 9.0 - i, "supporting") for i in range(5)]
    assert [i.anchor.label for i in choose(supporting, 1000)] == ["S0", "S1", "S2"]
    both = [*supporting, item("C", 100, 1.0, "contradicting")]
    assert [i.anchor.label for i in choose(both, 1000, k=2)] == ["S0", "C"]
    assert [i.anchor.label for i in choose(both, 1000, k=1)] == ["S0"]


# -- verify over the real Readers ------------------------------------------------------


def check_batch(batch: Batch, parsed: Parsed, claim: str, exclude: Sequence[tuple[int, int]] = ()) -> None:
    """Items are exact slices, never overlap ``exclude``, supporting first; two coverage lines."""
    kinds = [i.stance for i in batch.items]
    assert kinds == sorted(kinds, key=lambda k: k != "supporting")
    for it in batch.items:
        a = it.anchor
        if a.char_end > a.char_start:
            assert parsed.full_view[a.char_start : a.char_end] == it.text
            assert not any(a.char_start < end and start < a.char_end for start, end in exclude)
        assert it.slots == ((0,) if it.stance == "supporting" else (1,))
    assert [c.slot for c in batch.coverage] == [f"supporting: {claim}", f"contradicting: {claim}"]
    for cov, kind in zip(batch.coverage, ("supporting", "contradicting"), strict=True):
        labels = tuple(i.anchor.label for i in batch.items if i.stance == kind)
        assert (cov.status, cov.anchors) == (("matched", labels) if labels else ("unresolved", ()))
    assert batch.scope.method.endswith("+claim-check")
    assert "candidate passages classified" in batch.scope.note


def of(batch: Batch, kind: str) -> list[EvidenceItem]:
    return [i for i in batch.items if i.stance == kind]


@pytest.fixture(scope="module")
def h5n1() -> tuple[TextReader, Parsed, str]:
    docs = (json.loads(line) for line in COVIDQA.read_text().splitlines())
    text = next(d["text"] for d in docs if d["doc_id"] == H5N1_DOC)
    reader = TextReader()
    return reader, reader.parse(MemorySource("h5n1.txt", text.encode())), text


def test_text_reader_numbers(h5n1: tuple[TextReader, Parsed, str]) -> None:
    reader, parsed, text = h5n1
    assert re.search(r"mortality rate of 53%", text)  # the fact, read independently
    claim = "H5N1 has a mortality rate of 53%"
    batch = verify(reader, parsed, claim, 1500)
    check_batch(batch, parsed, claim)
    assert any("mortality rate of 53%" in i.text for i in of(batch, "supporting"))
    wrong = "H5N1 has a mortality rate of 35%"
    batch = verify(reader, parsed, wrong, 1500)
    check_batch(batch, parsed, wrong)
    assert not of(batch, "supporting")
    assert any("mortality rate of 53%" in i.text for i in of(batch, "contradicting"))
    assert batch.coverage[0].status == "unresolved" and batch.flags == ()


def test_text_reader_polarity(h5n1: tuple[TextReader, Parsed, str]) -> None:
    reader, parsed, text = h5n1
    fact = "H5N1 virus infection stimulated significantly higher CEACAM1 protein expression"
    assert fact in text
    up, down = "CEACAM1 expression increased after H5N1 infection", "CEACAM1 expression decreased after H5N1 infection"
    batch = verify(reader, parsed, up, 1500)
    check_batch(batch, parsed, up)
    assert "claim-without-numbers" in batch.flags
    assert any(fact in i.text for i in of(batch, "supporting"))
    batch = verify(reader, parsed, down, 1500)
    check_batch(batch, parsed, down)
    assert any(fact in i.text for i in of(batch, "contradicting"))
    assert all(fact not in i.text for i in of(batch, "supporting"))


def test_text_reader_exclude_k_and_scope(h5n1: tuple[TextReader, Parsed, str]) -> None:
    reader, parsed, _ = h5n1
    claim = "CEACAM1 expression increased after H5N1 infection"
    first = verify(reader, parsed, claim, 1500)
    exclude = [(i.anchor.char_start, i.anchor.char_end) for i in first.items]
    again = verify(reader, parsed, claim, 1500, exclude=exclude)
    check_batch(again, parsed, claim, exclude)
    assert not {i.anchor.label for i in again.items} & {i.anchor.label for i in first.items}
    assert len(verify(reader, parsed, claim, 1500, k=1).items) == 1
    with pytest.raises(BadAnchor):
        verify(reader, parsed, claim, 1500, scope="L999999-1000000")
    scoped = verify(reader, parsed, claim, 1500, scope="L1-20")
    assert all((i.anchor.line_end or 0) <= 20 for i in scoped.items)
    assert scoped.scope.note.startswith("scope L1-20; ")


def pdf(path: Path) -> tuple[PdfReader, Parsed]:
    reader = PdfReader()
    return reader, reader.parse(MemorySource(path.name, path.read_bytes()))


def page_text(path: Path, page: int) -> str:
    with pymupdf.open(path) as doc:
        text: str = doc[page - 1].get_text("text")
        return text


def test_pdf_10k_amazon_technology_and_content() -> None:
    reader, parsed = pdf(AMAZON)
    # read independently: page 26 of the 10-K lists "Technology and content 28,837 35,931" (2018, 2019; $ millions)
    assert re.search(r"Technology and content\s+28,837\s+35,931", page_text(AMAZON, 26))
    claim = "Technology and content expenses were $35.9 billion in 2019"
    batch = verify(reader, parsed, claim, 1500)
    check_batch(batch, parsed, claim)
    assert any("35,931" in i.text and i.anchor.label.startswith("p26:") for i in of(batch, "supporting"))
    wrong = "Technology and content expenses were $41.2 billion in 2019"
    batch = verify(reader, parsed, wrong, 1500)
    check_batch(batch, parsed, wrong)
    assert not of(batch, "supporting")
    assert any("35,931" in i.text for i in of(batch, "contradicting"))
    assert batch.coverage[0].candidates  # where else to look


def test_pdf_10k_boeing_rd_alias_and_scope() -> None:
    reader, parsed = pdf(BOEING)
    assert re.search(r"Research and development expense, net\s+\(2,852\)", page_text(BOEING, 55))
    claim = "R&D expenses were $2.9 billion in 2022"
    batch = verify(reader, parsed, claim, 1500)
    check_batch(batch, parsed, claim)
    assert any("(2,852)" in i.text for i in of(batch, "supporting"))
    scoped = verify(reader, parsed, claim, 1500, scope="p55")
    assert scoped.items and all(i.anchor.label.startswith("p55:") for i in scoped.items)
    with pytest.raises(BadAnchor):
        verify(reader, parsed, claim, 1500, scope="p999")


def population(country: str) -> str:
    with REFERENCE.open(newline="") as f:
        return next(r["Population"] for r in csv.DictReader(f) if r["Combined_Key"] == country)


def test_table_reader_rows() -> None:
    reader: Reader = TableReader()
    parsed = reader.parse(MemorySource(REFERENCE.name, REFERENCE.read_bytes()))
    assert population("Albania") == "2877800"
    claim = "Albania has a population of 2,877,800"
    batch = verify(reader, parsed, claim, 1500)
    check_batch(batch, parsed, claim)
    assert any("Albania\t2877800" in i.text for i in of(batch, "supporting"))
    wrong = "Albania has a population of 3.1 million"
    batch = verify(reader, parsed, wrong, 1500)
    check_batch(batch, parsed, wrong)
    assert not of(batch, "supporting") and any("2877800" in i.text for i in of(batch, "contradicting"))


def test_table_reader_dates_are_terms() -> None:
    reader: Reader = TableReader()
    parsed = reader.parse(MemorySource(AGGREGATE.name, AGGREGATE.read_bytes()))
    with AGGREGATE.open(newline="") as f:
        assert next(r["Confirmed"] for r in csv.DictReader(f) if r["Date"] == "2020-01-25") == "1437"
    true = "On 2020-01-25 there were 1,437 confirmed cases"
    wrong = "On January 25, 2020 there were 1,500 confirmed cases"
    batch = verify(reader, parsed, true, 1500)
    check_batch(batch, parsed, true)
    assert any("2020-01-25\t1437" in i.text for i in of(batch, "supporting"))
    batch = verify(reader, parsed, wrong, 1500)
    check_batch(batch, parsed, wrong)
    assert not of(batch, "supporting") and any("2020-01-25\t1437" in i.text for i in of(batch, "contradicting"))


def test_claim_without_content_words(h5n1: tuple[TextReader, Parsed, str]) -> None:
    reader, parsed, _ = h5n1
    batch = verify(reader, parsed, "it was $5", 1500)
    assert batch.items == () and "no-content-words" in batch.flags
    assert [c.status for c in batch.coverage] == ["unresolved", "unresolved"]
