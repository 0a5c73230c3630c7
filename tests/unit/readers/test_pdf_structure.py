"""Boilerplate pages and statement rows of filings (readers.pdf.structure): pure logic, and the 3M 10-K."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from readers.base import ReadIntent
from readers.kit.source import MemorySource
from readers.pdf.reader import PdfReader
from readers.pdf.structure import (
    DEMOTE,
    STRUCTURE_KEY,
    adjusted,
    boilerplate_kinds,
    demoted_pages,
    needed_rows,
    primary_statements,
    row_lift,
    rows_shown,
    statement_lines,
    statement_needs,
    structure_of,
    unit_adjustment,
)
from readers.retrieval.confidence import Signals, shipped_model, vouches

_ITEMS = ("Business", "Risk Factors", "Unresolved Staff Comments", "Properties", "Legal Proceedings", "Mine Safety",
          "Market for Common Equity", "Management's Discussion", "Market Risk", "Financial Statements", "Controls")
CONTENTS = "Table of Contents\n" + "\n".join(f"ITEM {n}  {title}  {4 * n}" for n, title in enumerate(_ITEMS, 1))
EXHIBITS = "EXHIBIT INDEX\nExhibit Number  Description\n" + "\n".join(
    f"10.{n}  Credit agreement amendment number {n} (incorporated by reference)" for n in range(1, 12))
SIGNATURES = ("SIGNATURES\nPursuant to the requirements of Section 13 or 15(d) of the Securities Exchange Act of 1934, "
              "the registrant has duly caused this report to be signed.\n/s/ Jane Roe\nChief Executive Officer\n"
              "/s/ John Doe\nDirector")
CERTIFICATION = ("EXHIBIT 31.1\nSARBANES-OXLEY SECTION 302 CERTIFICATION\nI, Jane Roe, certify that:\n1. I have "
                 "reviewed this annual report on Form 10-K of Example Corp.;")
CONSENT = "Consent of Independent Registered Public Accounting Firm\nWe consent to the incorporation by reference ..."
SUBSIDIARIES = "Table of Contents\nSUBSIDIARIES OF THE REGISTRANT\nExample GmbH  Germany\nExample Ltd  United Kingdom"
BALANCE = ("Consolidated Balance Sheet\n(Dollars in millions)  2022  2021\nCash and cash equivalents  $ 3,655 $ 4,564\n"
           "Accounts receivable — net  4,532  4,660\nTotal current assets  14,688  15,403\n"
           "Property, plant and equipment — net  9,178  9,429\nTotal assets  $ 46,455 $ 47,072\n"
           "Accounts payable  3,183  2,994\nTotal current liabilities  9,523  9,035\nTotal equity  14,770  15,117")
_3M = Path(__file__).resolve().parents[4] / "shared" / "data" / "pdf" / "filings" / "3M_2022_10K.pdf"
PROSE = ("Table of Contents\nRisks related to our subsidiaries\nOn July 26, 2022, certain wholly owned subsidiaries of "
         "the Company initiated proceedings. The Company signed an agreement with its directors.")


@pytest.mark.parametrize(("text", "kind"), [(CONTENTS, "contents"), (EXHIBITS, "exhibits"), (SIGNATURES, "signatures"),
                                            (CERTIFICATION, "certification"), (CONSENT, "consent"),
                                            (SUBSIDIARIES, "subsidiaries")])
def test_boilerplate_is_told_by_its_layout(text: str, kind: str) -> None:
    assert boilerplate_kinds(text) == (kind,)


@pytest.mark.parametrize("text", [BALANCE, PROSE, "", "Table of Contents\nIndex"])
def test_content_is_not_boilerplate(text: str) -> None:
    assert boilerplate_kinds(text) == ()


def test_a_read_that_asks_for_the_kind_keeps_it() -> None:
    found = {"signatures": [9], "exhibits": [10, 11], "contents": [2]}
    assert demoted_pages(found, "What was revenue in 2022?") == {2, 9, 10, 11}
    assert demoted_pages(found, "Who signed the report?") == {2, 10, 11}
    assert demoted_pages(found, "Which exhibit holds the credit agreement?") == {2, 9}


def test_metrics_name_their_rows() -> None:
    assert needed_rows("Does Corning have positive working capital?") == {
        "balance": {"current_assets", "current_liabilities"}}
    assert needed_rows("What is the FY2017 return on assets (ROA)?") == {"income": {"net"}, "balance": {"assets"}}
    assert needed_rows("Who is the CEO?") == {}


def test_rows_the_read_names_are_needed_too() -> None:
    assert needed_rows("how much total assets did Costco have?") == {"balance": {"assets"}}
    assert needed_rows("what is Boeing's net property, plant, and equipment?") == {"balance": {"ppe"}}


def test_rows_shown_promises_only_figures_in_view() -> None:
    known = {"boilerplate": {}, "primary": {"balance": 3, "income": 2}}
    rows = [(3, "Total current assets  14,688  15,403\nTotal current liabilities  9,523  9,035")]
    assert rows_shown("Does Corning have positive working capital?", known, rows)
    assert not rows_shown("Does Corning have positive working capital?", known, [(4, rows[0][1])])  # another page
    assert not rows_shown("Why did working capital fall?", known, rows)  # a statement shows figures, not reasons
    assert not rows_shown("What is the return on assets?", known, [(3, "Total assets  46,455  47,072")])  # no income
    assert rows_shown("What is the return on assets?", known, [(3, "Total assets  46,455"), (2, "Net income  5,777")])
    assert not rows_shown("Who is the CEO?", known, rows)
    tax = [(2, "Income before income taxes  10,705\nProvision for income taxes  1,727")]
    assert not rows_shown("How much did the effective tax rate change?", known, tax)  # stated in its own note
    half = [(3, "Total current assets  14,688  15,403\nCash and cash equivalents  3,655")]
    assert not rows_shown("Does Corning have positive working capital?", known, half)  # every row, not one
    split = [(3, "Total current assets  14,688"), (3, "Total current liabilities  9,523")]
    assert rows_shown("Does Corning have positive working capital?", known, split)  # over several passages


def test_statement_lines_are_its_heading_and_the_needed_rows() -> None:
    page = "Table of Contents\n" + BALANCE
    spans = statement_lines(page, "balance", {"current_assets", "current_liabilities"})
    shown = [page[a:b] for a, b in spans]
    assert shown == ["Consolidated Balance Sheet\n(Dollars in millions)  2022  2021",  # the heading: which column
                     "Total current assets  14,688  15,403", "Total current liabilities  9,523  9,035"]
    assert statement_lines(page, "balance", {"inventories"}) == []  # a heading alone answers nothing
    together = statement_lines(BALANCE, "balance", {"cash", "receivables"})
    assert [BALANCE[a:b].count("\n") for a, b in together] == [3]  # adjacent lines are one passage


def test_statement_needs_only_for_reads_statements_answer() -> None:
    known = {"boilerplate": {}, "primary": {"balance": 50, "income": 48}}
    assert statement_needs("What is the FY2022 return on assets?", known) == [
        (48, "income", {"net"}), (50, "balance", {"assets"})]
    assert statement_needs("Why did the operating margin fall?", known) == []  # reasons: not in the rows
    assert statement_needs("What is the adjusted operating margin?", known) == []  # non-GAAP: its reconciliation
    assert statement_needs("What is the capex?", known) == []  # no cash flow statement page found
    follow_up = "Is working capital positive? If working capital is not a useful metric, then explain why."
    assert statement_needs(follow_up, known) == [(50, "balance", {"current_assets", "current_liabilities"})]
    assert statement_needs("If we exclude M&A, why did the operating margin fall?", known) == []  # the question


def test_the_primary_statement_holds_most_of_its_rows() -> None:
    pages = [CONTENTS, "Consolidated Balance Sheet\nsee page 50", BALANCE]
    assert primary_statements(pages, {"balance": [2, 3], "income": [1]}) == {"balance": 3}


def test_row_lift_and_adjustment() -> None:
    units = ["Cash and cash equivalents  $ 3,655 $ 4,564", "Total current assets  14,688  15,403",
             "Total current liabilities  9,523  9,035", "Total current assets  1  2"]
    lift = row_lift(units, [3, 3, 3, 4], {"balance": 3}, {"balance": {"current_assets", "current_liabilities"}})
    assert lift.tolist() == [0.0, 1.0, 1.0, 0.0]  # only on the primary page
    known = {"boilerplate": {"contents": [1]}, "primary": {"balance": 3}}
    found = unit_adjustment("working capital?", known, np.array([1, 3, 3, 4]), lambda u: units[u])
    assert found is not None
    scale, lift = found
    assert scale.tolist() == [DEMOTE, 1.0, 1.0, 1.0]
    scores = adjusted(np.array([2.0, 0.0, 1.0, 0.0]), scale, lift)
    assert scores[0] == pytest.approx(2.0 * DEMOTE) and scores[1] > 0 and scores[3] == 0.0
    assert unit_adjustment("what is revenue?", {"boilerplate": {}, "primary": {}}, np.array([1]), str) is None


def test_structure_is_found_once_and_kept_as_plain_data() -> None:
    data: dict[str, object] = {}
    calls: list[int] = []

    def texts() -> list[str]:
        calls.append(1)
        return [CONTENTS, BALANCE]

    known = structure_of(data, texts, {"balance": [2]})
    assert known == {"boilerplate": {"contents": [1]}, "primary": {"balance": 2}}
    assert structure_of(data, texts, {"balance": [2]}) is data[STRUCTURE_KEY] and len(calls) == 1


@pytest.mark.skipif(not _3M.exists(), reason="shared data not present")
def test_3m_working_capital_reaches_the_balance_sheet() -> None:
    parsed = PdfReader().parse(MemorySource("3M_2022_10K.pdf", _3M.read_bytes()))
    assert STRUCTURE_KEY not in parsed.data  # analysed by the first read that needs it
    batch = PdfReader().locate(parsed, ReadIntent("Does 3M have positive working capital based on FY2022 data?",
                                                  ("Does 3M have positive working capital based on FY2022 data?",)),
                               1340)
    shown = {item.anchor.label: item.text for item in batch.items if item.anchor.label.startswith("p50:")}
    text = "\n".join(shown.values())
    assert "Total current assets" in text and "Total current liabilities" in text  # both rows, as the extras show
    assert "Consolidated Balance Sheet" in text and "2022" in text  # with the heading that names the columns
    assert "statement-rows" in batch.flags
    (coverage,) = batch.coverage
    assert Signals(*coverage.signals).structure == 1.0  # the rows working capital is computed from are shown
    assert vouches(coverage)  # matched, or not, as the judge of the pdf family says on that signal
    assert (coverage.status == "matched") == ("pdf" in shipped_model().structural)
    known = parsed.data[STRUCTURE_KEY]
    assert known["primary"] == {"income": 48, "balance": 50, "cash": 52}
    assert 2 in known["boilerplate"]["contents"]


def test_what_the_first_read_keeps_is_serializable() -> None:
    """The glossary, sentence groups and page structure a first read adds to parsed data round-trip through
    the parsed store's codec (the store re-saves a parse whose data grew)."""
    from readers.retrieval.expand import GLOSSARY_KEY, glossary_of
    from readers.retrieval.extend import GROUPS_KEY, groups_of
    from sparsefs.store import serial

    data: dict[str, object] = {}
    glossary_of(data, "high resolution computed tomography (HRCT) was used.")
    groups_of(data, "One. Two.", np.array([0, 5]), np.array([4, 9]))
    structure_of(data, lambda: [CONTENTS, BALANCE], {"balance": [2]})
    encoded = serial.encode(data)
    back = serial.decode(encoded.tree, lambda i: encoded.arrays[i], lambda i: encoded.blobs[i], {})
    assert back[GLOSSARY_KEY] == data[GLOSSARY_KEY] and back[STRUCTURE_KEY] == data[STRUCTURE_KEY]
    assert np.array_equal(back[GROUPS_KEY], data[GROUPS_KEY])
