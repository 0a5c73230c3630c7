"""The HTML Reader: conformance, main text without boilerplate, anchors, decoding, bounds."""

from __future__ import annotations

import re
import time

import pytest

from readers.base import Parsed, ReadIntent, UnsupportedArtifact
from readers.html.reader import HtmlReader
from tests.reader_conformance import MemorySource, ReaderConformance, Sample

ARTICLE = """<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>Tidal Energy in 2024 | Ocean Weekly</title>
  <style>body { font-family: serif; } .lead::before { content: "STYLE-LEAK"; }</style>
  <script>window.dataLayer = []; function track() { return "<p>SCRIPT-LEAK</p>"; }</script>
</head>
<body>
  <header class="site-header">
    <a href="/">Ocean Weekly</a>
    <nav><ul><li><a href="/news">News</a></li><li><a href="/science">Science</a></li>
    <li><a href="/about">About us</a></li></ul></nav>
  </header>
  <div id="cookie-banner" class="cookie-consent">We use cookies to improve your experience.
    <button>Accept all</button></div>
  <main>
    <article>
      <header><h1>Tidal Energy Comes of Age</h1><p class="byline">By Mara Quinn, 4 March 2024</p></header>
      <p class="lead">Tidal turbines in the Pentland Firth generated 48 GWh last year, a record for the
         MeyGen array. Engineers credit new blade coatings that resist biofouling.</p>
      <h2>How the turbines work</h2>
      <p>Each turbine sits on the seabed and turns with the tide, four times a day. The rotors are
         <a href="/glossary#rotor">18 metres</a> across &amp; weigh 200&nbsp;tonnes.</p>
      <h3>Maintenance</h3>
      <p>Divers inspect the nacelles every six months; a full overhaul takes three weeks.</p>
      <ul>
        <li>Blade inspection every quarter
        <li>Cable survey once a year
      </ul>
      <h2>Output by site</h2>
      <table>
        <thead><tr><th>Site</th><th>Output (GWh)</th></tr></thead>
        <tbody>
          <tr><td>MeyGen</td><td>48</td></tr>
          <tr><td>Orbital O2</td><td>7.2</td></tr>
        </tbody>
      </table>
      <pre>capacity = 6 * 1.5  # MW
print(capacity)</pre>
      <div class="share-buttons"><a href="/share/x">Share on X</a></div>
    </article>
  </main>
  <aside class="sidebar"><h3>Most read</h3><ul><li><a href="/a">Whales return to the Thames</a></li></ul></aside>
  <footer><p>&copy; 2024 Ocean Weekly. All rights reserved.</p><a href="/privacy">Privacy policy</a></footer>
  <div class="newsletter-signup">Subscribe to our newsletter for weekly updates.</div>
</body>
</html>
"""

MAIN_TEXT = [
    "# Tidal Energy Comes of Age",
    "By Mara Quinn, 4 March 2024",
    "Tidal turbines in the Pentland Firth generated 48 GWh last year, a record for the MeyGen array. "
    "Engineers credit new blade coatings that resist biofouling.",
    "## How the turbines work",
    "Each turbine sits on the seabed and turns with the tide, four times a day. "
    "The rotors are 18 metres across & weigh 200 tonnes.",
    "### Maintenance",
    "Divers inspect the nacelles every six months; a full overhaul takes three weeks.",
    "- Blade inspection every quarter\n- Cable survey once a year",
    "## Output by site",
    "| Site | Output (GWh) |\n| MeyGen | 48 |\n| Orbital O2 | 7.2 |",
    "```\ncapacity = 6 * 1.5  # MW\nprint(capacity)\n```",
]
BOILERPLATE = [
    "STYLE-LEAK",
    "SCRIPT-LEAK",
    "About us",
    "cookies",
    "Accept all",
    "Share on X",
    "Most read",
    "Whales",
    "All rights reserved",
    "Privacy policy",
    "newsletter",
]


def _generated_page(sections: int) -> str:
    """A long page without <main>: a menu of links, sections of prose, a footer."""
    menu = "".join(f'<li><a href="/p{i}">Page {i}</a></li>' for i in range(30))
    body = "".join(
        f"<section><h2>Chapter {i}</h2><p>Chapter {i} describes the harbour of town {i % 37} "
        f"and its {i * 3} fishing boats.</p><p>The catch in year {2000 + i % 24} was {i * 7} tonnes.</p></section>"
        for i in range(sections)
    )
    page = f'<div class="menu"><ul>{menu}</ul></div><div class="wrap">{body}</div><footer>FOOTER-TEXT</footer>'
    return f"<html><body>{page}</body></html>"


def _generated_paragraphs(sections: int) -> list[str]:
    out = []
    for i in range(sections):
        out += [f"## Chapter {i}", f"Chapter {i} describes the harbour of town {i % 37} and its {i * 3} fishing boats."]
        out.append(f"The catch in year {2000 + i % 24} was {i * 7} tonnes.")
    return out


READER = HtmlReader()


def _parse(name: str, data: bytes) -> Parsed:
    return READER.parse(MemorySource(name, data))


class TestHtmlConformance(ReaderConformance):
    reader = READER

    def samples(self) -> list[Sample]:
        return [
            Sample("article.html", ARTICLE.encode(), "how often are the nacelles inspected"),
            Sample(
                "harbour.htm",
                _generated_page(400).encode(),
                "catch in year 2011; boats of chapter 7",
                ("catch in year 2011", "boats chapter 7"),
            ),
        ]

    def malformed(self) -> list[tuple[str, bytes]]:
        return [
            ("blob.html", bytes(range(256)) * 40),
            ("empty.html", b"<html><head><script>var x = 1;</script></head><body><nav>Home</nav></body></html>"),
            ("blank.html", b"   \n\n  "),
        ]

    def check_faithful(self, sample: Sample, parsed: Parsed) -> None:
        if sample.name == "article.html":
            wanted, unwanted = MAIN_TEXT, BOILERPLATE
        else:
            wanted, unwanted = _generated_paragraphs(400), ["Page 3", "FOOTER-TEXT"]
        for paragraph in wanted:
            assert paragraph in parsed.full_view, paragraph
        for junk in unwanted:
            assert junk not in parsed.full_view, junk


def test_article_full_view_is_exactly_the_main_text() -> None:
    parsed = _parse("article.html", ARTICLE.encode())
    assert parsed.full_view == "\n\n".join(MAIN_TEXT)


def test_visible_text_by_an_independent_reading() -> None:
    """Every <p> inside <article>, with tags stripped and entities resolved, is in the full view."""
    import html as stdlib_html

    article = ARTICLE.split("<article>")[1].split("</article>")[0]
    paragraphs = re.findall(r"<p[^>]*>(.*?)</p>", article, re.S)
    assert len(paragraphs) == 4
    view = _parse("article.html", ARTICLE.encode()).full_view
    for raw in paragraphs:
        text = " ".join(stdlib_html.unescape(re.sub(r"<[^>]+>", "", raw)).split())
        assert text in " ".join(view.split()), text


def test_headings_anchor_sections() -> None:
    parsed = _parse("article.html", ARTICLE.encode())
    section = READER.focus(parsed, "#Maintenance").items[0].text
    assert section.startswith("### Maintenance\n\nDivers inspect")
    assert section.endswith("- Cable survey once a year")
    batch = READER.locate(parsed, ReadIntent("nacelles inspected", ("nacelles inspected",)), 400)
    assert batch.items and batch.items[0].anchor.heading == "Maintenance"
    assert batch.scope.unit == "sentences"
    lines = READER.focus(parsed, "L1-3").items[0].text
    assert lines == "# Tidal Energy Comes of Age\n\nBy Mara Quinn, 4 March 2024"


def test_preview_has_title_outline_and_link_count() -> None:
    parsed = _parse("article.html", ARTICLE.encode())
    text = READER.preview(parsed, 2000)
    assert 'html page: "Tidal Energy in 2024 | Ocean Weekly"' in text
    assert "## How the turbines work" in text and "### Maintenance" in text
    hrefs = len(re.findall(r"<a href=", ARTICLE))
    assert f"{hrefs:,} links on the page, 1 in the main text" in text
    assert f"main text: {len(parsed.full_view):,} chars" in text


def test_page_without_main_drops_link_lists() -> None:
    parsed = _parse("harbour.htm", _generated_page(5).encode())
    assert parsed.full_view.startswith("## Chapter 0\n\nChapter 0 describes")
    assert "Page 1" not in parsed.full_view


def test_title_becomes_the_first_heading_when_the_page_has_no_h1() -> None:
    page = b"<html><head><title>Release notes</title></head><body><p>Version 2 fixes the parser.</p></body></html>"
    assert _parse("notes.html", page).full_view == "# Release notes\n\nVersion 2 fixes the parser."


def test_accepts_by_extension_or_content() -> None:
    assert READER.accepts("page.htm", b"anything")
    assert READER.accepts("index", b"\xef\xbb\xbf  \n<!DOCTYPE html><html>")
    assert READER.accepts("saved", b"<HTML><body>x</body></HTML>")
    assert not READER.accepts("notes.txt", b"hello <html>")


def test_declared_charset_and_invalid_utf8_never_crash() -> None:
    latin = '<html><head><meta charset="iso-8859-1"></head><body><p>Caf\u00e9 cr\u00e8me</p></body></html>'
    assert _parse("a.html", latin.encode("latin-1")).full_view == "Caf\u00e9 cr\u00e8me"
    privet = "\u041f\u0440\u0438\u0432\u0435\u0442"
    http_equiv = f'<meta http-equiv="Content-Type" content="text/html; charset=windows-1251"><p>{privet}</p>'
    assert _parse("b.html", http_equiv.encode("cp1251")).full_view == privet
    undeclared = b"<p>caf\xe9 \xff\xfe ok</p>"
    assert _parse("c.html", undeclared).full_view == "caf\u00e9 \u00ff\u00fe ok"
    bogus = b'<meta charset="no-such-codec"><p>plain \xe9</p>'
    assert _parse("d.html", bogus).full_view == "plain \u00e9"
    utf16 = "<html><body><p>wide text</p></body></html>".encode("utf-16")
    assert _parse("e.html", utf16).full_view == "wide text"


def test_malformed_markup_is_read_not_refused() -> None:
    junk = b"<html><body><div><p>First <b>bold <i>unclosed</div><p>Second</span></td></tr>" + b"<<>><\x07>" * 5
    parsed = _parse("m.html", junk + b"<table><tr><td>a<td>b</table><p>Last")
    assert "First bold unclosed" in parsed.full_view and "Second" in parsed.full_view
    assert "| a | b |" in parsed.full_view and parsed.full_view.endswith("Last")


def test_binary_and_textless_pages_are_refused() -> None:
    with pytest.raises(UnsupportedArtifact):
        _parse("x.html", b"\x00\x01\x02\x03" * 1000)
    with pytest.raises(UnsupportedArtifact):
        _parse("y.html", b"<html><body><footer>only a footer</footer></body></html>")


def test_deep_nesting_is_bounded() -> None:
    depth = 100_000
    page = "<html><body>" + "<div>" * depth + "<p>deep text</p>" + "</div>" * depth + "<p>after</p></body></html>"
    started = time.monotonic()
    parsed = _parse("deep.html", page.encode())
    assert time.monotonic() - started < 10
    assert parsed.full_view == "deep text\n\nafter"
    unclosed = "<span>" * depth + "x" + "</p>" * depth
    started = time.monotonic()
    assert _parse("deep2.html", unclosed.encode()).full_view == "x"
    assert time.monotonic() - started < 10


def test_large_generated_page_in_bounded_time() -> None:
    page = _generated_page(20_000).encode()
    assert len(page) > 3_000_000
    started = time.monotonic()
    parsed = _parse("big.html", page)
    assert time.monotonic() - started < 15
    assert "The catch in year 2011 was 77 tonnes." in parsed.full_view
    best = READER.locate(parsed, ReadIntent("chapter 12345 harbour", ("chapter 12345 harbour",)), 500).items
    assert any("Chapter 12345 describes" in item.text for item in best)
