"""The PDF Reader: conformance on small real files, then the 252-page 3M 10-K once.

Expected values come from independent pymupdf calls (``page.get_text``,
``page.get_text("words")``) or from the filing itself, never from the Reader.
"""

from __future__ import annotations

import re
from pathlib import Path

import pymupdf
import pytest

import readers.pdf.extract
from readers.base import ArtifactTooLarge, BadAnchor, Parsed, ReaderError, ReadIntent, UnsupportedArtifact
from readers.pdf.reader import PdfReader
from tests.reader_conformance import MemorySource, ReaderConformance, Sample

_DATA = Path(__file__).resolve().parents[4] / "shared" / "data" / "pdf"
_PEPSI = _DATA / "filings" / "PEPSICO_2023Q1_EARNINGS.pdf"
_PAPER = _DATA / "papers" / "2304.02623v1.pdf"
_3M = _DATA / "filings" / "3M_2022_10K.pdf"
_MARKER = re.compile(r"^--- p\d+(?: \(no text layer\))? ---$", re.MULTILINE)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def _words(text: str) -> list[str]:
    return _CONTROL.sub("\ufffd", text).split()


def _page_words(data: bytes, page: int) -> list[str]:
    """Independent reading: pymupdf's plain text of the 1-based page."""
    with pymupdf.open(stream=data, filetype="pdf") as doc:
        return _words(doc[page - 1].get_text("text"))


def _view_pages(view: str) -> list[str]:
    return _MARKER.split(view)[1:]


def _pdf(pages: list[str | None]) -> bytes:
    """A PDF whose page i holds the text pages[i], or only an image when None."""
    doc = pymupdf.open()
    for text in pages:
        page = doc.new_page()
        if text is None:
            pixmap = pymupdf.Pixmap(pymupdf.csRGB, pymupdf.IRect(0, 0, 32, 32), False)
            pixmap.clear_with(200)
            page.insert_image(pymupdf.Rect(50, 50, 300, 300), pixmap=pixmap)
        else:
            page.insert_text((72, 72), text)
    data: bytes = doc.tobytes()
    return data


def _encrypted() -> bytes:
    doc = pymupdf.open(stream=_pdf(["secret plans"]), filetype="pdf")
    data: bytes = doc.tobytes(encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw="x", owner_pw="y")
    return data


def _parse(data: bytes, name: str = "doc.pdf") -> Parsed:
    return PdfReader().parse(MemorySource(name, data))


class TestPdfConformance(ReaderConformance):
    reader = PdfReader()

    def samples(self) -> list[Sample]:
        return [
            Sample("pepsico.pdf", _PEPSI.read_bytes(), "organic revenue growth guidance for 2023"),
            Sample(
                "paper.pdf",
                _PAPER.read_bytes(),
                "expository writing tasks; language model support",
                ("expository writing tasks", "language model support"),
            ),
        ]

    def malformed(self) -> list[tuple[str, bytes]]:
        return [
            ("truncated.pdf", _PAPER.read_bytes()[:400]),
            ("garbage.pdf", b"%PDF-1.7\n" + bytes(range(256)) * 20),
            ("locked.pdf", _encrypted()),
        ]

    def check_faithful(self, sample: Sample, parsed: Parsed) -> None:
        pages = _view_pages(parsed.full_view)
        with pymupdf.open(stream=sample.data, filetype="pdf") as doc:
            assert len(pages) == doc.page_count
            for number, text in enumerate(pages, 1):  # the same words; a table's cells regrouped into rows
                assert sorted(_words(text)) == sorted(_words(doc[number - 1].get_text("text"))), number


# -- the 3M 10-K (252 pages), parsed once ----------------------------------------------


@pytest.fixture(scope="module")
def mmm() -> Parsed:
    return _parse(_3M.read_bytes(), "3M_2022_10K.pdf")


def _locate(parsed: Parsed, intent: str, max_chars: int = 1500, scope: str | None = None) -> list[tuple[str, str]]:
    batch = PdfReader().locate(parsed, ReadIntent(intent, (intent,), scope), max_chars)
    return [(item.anchor.label, item.text) for item in batch.items]


def test_scout_reports_pages_and_is_bounded(mmm: Parsed) -> None:
    with pymupdf.open(_3M) as doc:
        count = doc.page_count
    text = PdfReader().preview(mmm, 2000)
    assert len(text) <= 2000
    assert f"{count:,} pages" in text and "every page has a text layer" in text
    assert "3M Company" in text  # the metadata title
    assert "Item 7. Management" in text  # a heading of the outline
    assert len(PdfReader().preview(mmm, 150)) <= 150


def test_passages_are_anchored_to_their_page(mmm: Parsed) -> None:
    data = _3M.read_bytes()
    found = _locate(mmm, "How much did 3M spend on research, development and related expenses in 2022?")
    assert found
    for label, text in found:
        page = int(re.match(r"p(\d+):L\d+", label).group(1))  # type: ignore[union-attr]
        page_text = " ".join(_page_words(data, page))
        assert " ".join(_words(text)) in page_text, label


def test_known_answer_in_the_filing(mmm: Parsed) -> None:
    rd = _locate(mmm, "How much did 3M spend on research, development and related expenses in 2022?")
    assert any("totaled $1.9 billion" in text for _, text in rd)
    sales = _locate(mmm, "What was 3M's net sales in 2022?")
    assert any("34,229" in text for _, text in sales)


@pytest.mark.parametrize("method", ["lexical", "bm25", "hybrid", "region"])
def test_every_location_method_stays_on_its_page(mmm: Parsed, method: str) -> None:
    question = "How much did 3M spend on research, development and related expenses in 2022?"
    intent = ReadIntent(question, (question,), method=method)
    batch = PdfReader().locate(mmm, intent, 1500)
    assert batch.items and sum(len(it.text) for it in batch.items) <= 1500
    unavailable = method == "hybrid" and "hybrid-unavailable" in batch.flags  # without the dense extra
    assert batch.scope.method.startswith("bm25" if unavailable else method)
    data = _3M.read_bytes()
    for item in batch.items:
        assert "--- p" not in item.text  # a page marker is never sent
        page = int(re.match(r"p(\d+):L\d+", item.anchor.label).group(1))  # type: ignore[union-attr]
        assert " ".join(_words(item.text)) in " ".join(_page_words(data, page)), item.anchor.label
    if method != "region":
        assert any("1.9 billion" in it.text for it in batch.items)


def test_page_focus_matches_pymupdf(mmm: Parsed) -> None:
    reader, data = PdfReader(), _3M.read_bytes()
    one = reader.focus(mmm, "p12").items[0].text
    assert one.startswith("--- p12 ---") and sorted(_words(one)[3:]) == sorted(_page_words(data, 12))
    three = reader.focus(mmm, "p12-14").items[0].text
    assert [int(m) for m in re.findall(r"^--- p(\d+) ---$", three, re.MULTILINE)] == [12, 13, 14]
    assert sorted(_words(three.split("--- p14 ---")[1])) == sorted(_page_words(data, 14))
    lines = reader.focus(mmm, "p48:L3-7").items[0].text.split("\n")
    assert lines[:2] == ["3M Company and Subsidiaries", "Consolidated Statement of Income"]
    statement = reader.focus(mmm, "p48").items[0].text.split("\n")  # a row keeps its label and its figures
    assert "(Millions, except per share amounts)  2022  2021  2020" in statement
    assert "Cost of sales  19,232  18,795  16,605" in statement


def test_heading_focus_and_bad_anchors(mmm: Parsed) -> None:
    reader = PdfReader()
    section = reader.focus(mmm, "#Item 7A").items[0].text
    assert section.startswith("Item 7A. Quantitative and Qualitative Disclosures About Market Risk")
    assert "Item 8. Financial Statements" not in section
    for bad in ("p0", "p253", "p12:L9999", "p48:table99", "#No such heading zq"):
        with pytest.raises(BadAnchor) as info:
            reader.focus(mmm, bad)
        assert info.value.hint, bad


def test_scope_restricts_pages(mmm: Parsed) -> None:
    found = _locate(mmm, "net sales growth by business segment", scope="p20-24")
    assert found
    assert all(20 <= int(re.match(r"p(\d+)", label).group(1)) <= 24 for label, _ in found)  # type: ignore[union-attr]
    with pytest.raises(BadAnchor):
        _locate(mmm, "net sales", scope="p300-310")


def test_table_as_tsv(mmm: Parsed) -> None:
    reader = PdfReader()
    batch = reader.locate(mmm, ReadIntent("income statement table", ("income statement table",), "p48"), 3000)
    tables = [item for item in batch.items if item.anchor.label == "p48:table1"]
    assert tables and tables[0].anchor.char_start == tables[0].anchor.char_end
    intent = "consolidated statement of income table"
    unscoped = reader.locate(mmm, ReadIntent(intent, (intent,)), 3000)
    assert "p48:table1" in [item.anchor.label for item in unscoped.items] and "tables" in unscoped.flags
    tsv = reader.focus(mmm, "p48:table1").items[0].text
    rows = {row.split("\t")[0]: [c for c in row.split("\t")[1:] if c] for row in tsv.split("\n")}
    assert rows["Research, development and related expenses"] == ["1,862", "1,994", "1,878"]
    assert rows["Net sales"] == ["$", "34,229", "$", "35,355", "$", "32,184"]
    header, sales = tsv.split("\n")[0].split("\t"), tsv.split("\n")[1].split("\t")
    assert [header[sales.index(v)] for v in ("34,229", "35,355", "32,184")] == ["2022", "2021", "2020"]
    with pymupdf.open(_3M) as doc:  # the same figures, read independently from the page's words
        words = [w[4] for w in doc[47].get_text("words")]
    assert {"1,862", "1,994", "1,878", "34,229"} <= set(words)


# -- edge cases -------------------------------------------------------------------------


def test_pages_without_text_layer_are_reported_not_errors() -> None:
    reader = PdfReader()
    parsed = _parse(_pdf(["Quarterly revenue rose sharply.", None, None]))
    assert "no text layer (scanned; not OCR'd) on 2 pages: p2-3" in reader.preview(parsed, 2000)
    batch = reader.locate(parsed, ReadIntent("revenue", ("revenue",), "p2-3"), 1000)
    assert not batch.items and "no-text-found" in batch.flags and "no-text-layer:p2-3" in batch.flags
    assert batch.coverage[0].status == "unresolved"
    assert reader.focus(parsed, "p2").items[0].text == "--- p2 (no text layer) ---"
    scanned = _parse(_pdf([None]))
    batch = reader.locate(scanned, ReadIntent("revenue", ("revenue",)), 1000)
    assert not batch.items and "no-text-found" in batch.flags


def test_encrypted_and_truncated_are_refused_quietly(capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UnsupportedArtifact) as info:
        _parse(_encrypted())
    assert "encrypted" in info.value.message and "decrypt" in info.value.hint
    for data in (_PAPER.read_bytes()[:400], b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer"):
        with pytest.raises(ReaderError):
            _parse(data)
    amazon = (_DATA / "filings" / "AMAZON_2019_10K.pdf").read_bytes()
    damaged = _parse(amazon[: len(amazon) // 2])  # mupdf repairs it: reported, not refused
    assert "damaged file, repaired on reading" in PdfReader().preview(damaged, 2000)
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    slow = PdfReader()
    slow.max_seconds = 0.0
    with pytest.raises(ArtifactTooLarge) as info:
        slow.parse(MemorySource("p.pdf", _PEPSI.read_bytes()))
    assert "@raw" in info.value.hint
    monkeypatch.setattr(readers.pdf.extract, "MAX_PAGES", 10)
    with pytest.raises(ArtifactTooLarge):
        _parse(_PEPSI.read_bytes())


def test_accepts_only_pdf_bytes() -> None:
    reader = PdfReader()
    assert reader.accepts("x.pdf", b"%PDF-1.7\n")
    assert reader.accepts("noext", b"\n\n%PDF-1.4\n")
    assert not reader.accepts("x.pdf", b"plain text that claims to be a pdf")
    with pytest.raises(UnsupportedArtifact):
        _parse(b"hello, not a pdf", "x.pdf")


def test_refine_never_repeats_a_table_result(tmp_path: Path) -> None:
    import shutil

    from readers.ops import OPERATIONS
    from sparsefs.artifacts.cache import ArtifactCache
    from sparsefs.protocol.access import Protocol
    from sparsefs.protocol.grammar import parse_suffix
    from sparsefs.source.rootfs import SourceRoot

    shutil.copy(_DATA / "filings" / "PEPSICO_2023Q1_EARNINGS.pdf", tmp_path / "p.pdf")
    root = SourceRoot.open(str(tmp_path))
    protocol = Protocol(ArtifactCache(root))
    seen: set[str] = set()
    tables = 0
    for action in ("intent", "refine", "refine", "refine"):
        pack = protocol.serve("p.pdf", parse_suffix(f"{action}=net revenue table by division", OPERATIONS)).pack
        anchors = {e.anchor for e in pack.evidence}
        assert not anchors & seen, anchors & seen
        tables += sum(":table" in a for a in anchors)
        seen |= anchors
    assert tables >= 1  # a table was delivered once, and only once
    root.close()


def test_a_table_cut_to_the_budget_says_how_many_rows_remain() -> None:
    from readers.base import ReadIntent
    from readers.pdf.reader import PdfReader
    from tests.reader_conformance import MemorySource

    reader = PdfReader()
    parsed = reader.parse(MemorySource("b.pdf", (_DATA / "filings" / "BOEING_2022_10K.pdf").read_bytes()))
    batch = reader.locate(parsed, ReadIntent("revenues table", ("revenues table",)), 900)
    cut = [i for i in batch.items if ":table" in i.anchor.label and "more rows: @focus=" in i.text]
    assert cut, [i.anchor.label for i in batch.items]
    whole = reader.focus(parsed, cut[0].anchor.label).items[0].text
    shown = cut[0].text.rsplit("\n", 1)[0]
    more = int(cut[0].text.rsplit("\n", 1)[1].split()[1])
    assert whole.startswith(shown) and whole.count("\n") == shown.count("\n") + more


def test_section_labels_are_sections_not_table_cells(mmm: Parsed) -> None:
    """A bold year over a statement's columns ('2027 After 2027') is not a section; 10-K notes are."""
    titles = [h.title for h in mmm.data["pages"].headings]
    assert not [t for t in titles if re.match(r"(19|20)\d\d\b", t)], titles
    assert "NOTE 7. Supplemental Balance Sheet Information" in titles
    batch = PdfReader().locate(mmm, ReadIntent("total inventories balance sheet", ("total inventories balance sheet",)),
                               1300)
    on_p50 = [item for item in batch.items if item.anchor.label.startswith("p50:")]
    assert on_p50 and on_p50[0].anchor.heading == "Item 8. Financial Statements and Supplementary Data."
