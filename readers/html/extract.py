"""Main text of an HTML page, without boilerplate, as markdown-ish text.

Stdlib only (:mod:`html.parser`, a tokenizer): no tree is built, so a page of
100,000 nested ``<div>`` costs what its bytes cost. A stack of open elements
carries two flags down the page:

- *skip*: inside ``script``/``style``/``nav``/``aside``/``form``/``svg``...,
  an element whose ``role`` is navigation/banner/contentinfo/complementary,
  that is ``hidden``, or whose class/id says nav, menu, footer, sidebar,
  cookie, consent, banner, breadcrumb, share, social, ad, newsletter...
  (``header``/``footer`` only outside the article);
- *main*: inside ``<article>``, ``<main>`` or ``role=main``.

Text is gathered into blocks (headings, paragraphs, list items, table rows,
preformatted text). When the page marks its main content and that content
holds enough of the text, only it is kept; otherwise every unskipped block is
kept but link lists (blocks that are mostly link text) are dropped. Blocks are
rendered as ``# Heading`` lines, paragraphs, ``- item`` lines, ``| a | b |``
rows and fenced ``pre`` blocks, so the Text Reader's machinery gives heading
and line anchors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

_SKIP_TAGS = frozenset(
    {
        "script",
        "style",
        "noscript",
        "template",
        "svg",
        "math",
        "nav",
        "aside",
        "form",
        "button",
        "select",
        "iframe",
        "object",
        "canvas",
        "dialog",
        "head",
        "textarea",
        "input",
        "label",
        "menu",
    }
)
_OUTSIDE_MAIN_SKIP = frozenset({"header", "footer"})
_MAIN_TAGS = frozenset({"article", "main"})
_VOID = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr"}
)
_BLOCKS = frozenset(
    {
        "p",
        "div",
        "section",
        "article",
        "main",
        "header",
        "footer",
        "ul",
        "ol",
        "dl",
        "dt",
        "dd",
        "blockquote",
        "figure",
        "figcaption",
        "address",
        "details",
        "summary",
        "caption",
        "table",
        "thead",
        "tbody",
        "tfoot",
        "center",
        "hr",
        "br",
        "body",
        "html",
    }
)
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
_BOILER_ROLES = frozenset({"navigation", "banner", "contentinfo", "complementary", "search", "dialog", "alertdialog"})
_BOILER_WORDS = re.compile(
    r"(?:^|[\s_-])(?:nav|navbar|navigation|menu|footer|sidebar|side-bar|cookies?|consent|gdpr|banner|breadcrumbs?"
    r"|share|sharing|social|ads?|advert\w*|promo|newsletter|subscribe|popup|modal|skip-link|toolbar|masthead)"
    r"(?:$|[\s_-])",
    re.IGNORECASE,
)
_OUTSIDE_MAIN_WORDS = re.compile(r"(?:^|[\s_-])(?:header|site-header|top-bar|related|comments?)(?:$|[\s_-])", re.I)
_SPACES = re.compile(r"\s+")
_HIDDEN_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.IGNORECASE)
MAX_MATCH_DEPTH = 64
"""Open elements searched for an end tag's match (an unmatched end tag is ignored)."""

MAIN_SHARE = 0.25
"""Marked main content is used alone when it holds at least this share of the text (or 500 chars)."""

LINK_DENSITY = 0.6
"""Outside marked main content, a block whose text is this much link text is a link list."""


@dataclass
class Block:
    """One block of text: ``kind`` is h1..h6, p, li, row or pre."""

    kind: str
    text: str
    main: bool
    link_chars: int = 0
    links: int = 0


@dataclass
class Page:
    """What the extraction found: the rendered text, the title, headings and link counts."""

    text: str
    title: str
    links: int
    links_kept: int
    blocks: int
    dropped: int
    used_main: bool
    headings: list[tuple[int, str]] = field(default_factory=list)


@dataclass
class _Frame:
    tag: str
    skip: bool
    main: bool


class _Extractor(HTMLParser):
    """Streams the page into blocks (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[_Frame] = []
        self.blocks: list[Block] = []
        self.parts: list[str] = []
        self.link_chars = 0
        self.kind = "p"
        self.cells: list[str] | None = None
        self.pre = 0
        self.anchor = 0
        self.title: list[str] = []
        self.in_title = False
        self.links = 0
        self.block_links = 0

    # -- state ---------------------------------------------------------------------

    def skipping(self) -> bool:
        return bool(self.stack) and self.stack[-1].skip

    def in_main(self) -> bool:
        return bool(self.stack) and self.stack[-1].main

    # -- events --------------------------------------------------------------------

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self.in_title = True
        skip = self.skipping() or _is_boilerplate(tag, attrs, self.in_main())
        if tag == "a" and any(k == "href" for k, _ in attrs):
            self.links += 1
            self.block_links += 0 if skip else 1
        main = self.in_main() or tag in _MAIN_TAGS or ("role", "main") in attrs
        if not skip:
            self._open_structure(tag)
        if tag not in _VOID:
            if tag in ("p", "li") and self.stack and self.stack[-1].tag == tag:
                self.stack.pop()  # an unclosed <p> or <li> ends at the next one
            self.stack.append(_Frame(tag, skip, main))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if not self.skipping() and tag in _BLOCKS:
            self.flush()

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self.in_title = False
        depth = len(self.stack)
        for at in range(depth - 1, max(-1, depth - 1 - MAX_MATCH_DEPTH), -1):
            if self.stack[at].tag == tag:
                skipped = self.stack[at].skip
                del self.stack[at:]
                if not skipped:
                    self._close_structure(tag)
                return

    def handle_data(self, data: str) -> None:
        if self.in_title:
            self.title.append(data)
            return
        if self.skipping() or not data:
            return
        self.parts.append(data)
        if self.anchor:
            self.link_chars += len(data.strip())

    # -- structure -----------------------------------------------------------------

    def _open_structure(self, tag: str) -> None:
        if tag == "a":
            self.anchor += 1
        elif tag == "pre":
            self.flush()
            self.pre += 1
        elif tag in _HEADINGS or tag == "li":
            self.flush()
            self.kind = tag
        elif tag == "tr":
            self._end_row()  # an unclosed <tr> ends at the next one
            self.flush()
            self.cells = []
        elif tag in ("td", "th"):
            if "".join(self.parts).strip():
                self._end_cell()  # text after an unclosed cell
            self.parts = []
        elif tag in _BLOCKS or tag == "p":
            self.flush()

    def _close_structure(self, tag: str) -> None:
        if tag == "a":
            self.anchor = max(0, self.anchor - 1)
        elif tag == "pre":
            self.flush()
            self.pre = max(0, self.pre - 1)
        elif tag in ("tr", "table"):
            self._end_row()
            self.flush()
        elif tag in ("td", "th"):
            self._end_cell()
        elif tag in _HEADINGS or tag in _BLOCKS or tag in ("p", "li"):
            self.flush()

    def _end_cell(self) -> None:
        if self.cells is None:
            self.flush()
            return
        self.cells.append(_SPACES.sub(" ", "".join(self.parts)).strip())
        self.parts = []

    def _end_row(self) -> None:
        if self.cells is None:
            return
        if "".join(self.parts).strip():
            self._end_cell()
        cells, self.cells = self.cells, None
        if any(cells):
            self.blocks.append(
                Block(
                    "row",
                    "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |",
                    self.in_main(),
                    self.link_chars,
                    self.block_links,
                )
            )
        self.link_chars = self.block_links = 0

    def flush(self) -> None:
        """Close the current block (a pending table row keeps gathering its cells)."""
        if self.cells is not None:
            return
        raw = "".join(self.parts)
        self.parts = []
        if self.pre:
            text = raw.strip("\n").rstrip()
            kind = "pre"
        else:
            text = _SPACES.sub(" ", raw).strip()
            kind = self.kind
        if text:
            self.blocks.append(Block(kind, text, self.in_main(), self.link_chars, self.block_links))
        self.link_chars = self.block_links = 0
        self.kind = "p"

    def close(self) -> None:
        super().close()
        self._end_row()
        self.flush()


def _is_boilerplate(tag: str, attrs: list[tuple[str, str | None]], in_main: bool) -> bool:
    if tag in _SKIP_TAGS or (not in_main and tag in _OUTSIDE_MAIN_SKIP):
        return True
    values = dict(attrs)
    if "hidden" in values or values.get("aria-hidden") == "true":
        return True
    if (values.get("role") or "").lower() in _BOILER_ROLES or _HIDDEN_STYLE.search(values.get("style") or ""):
        return True
    names = " ".join(v for k, v in attrs if k in ("class", "id") and v)[:400]
    if not names:
        return False
    return bool(_BOILER_WORDS.search(names)) or (not in_main and bool(_OUTSIDE_MAIN_WORDS.search(names)))


def extract(html: str) -> Page:
    """The page's main text, rendered (see the module docstring)."""
    parser = _Extractor()
    parser.feed(html)
    parser.close()
    title = _SPACES.sub(" ", "".join(parser.title)).strip()
    blocks, used_main = _main_blocks(parser.blocks)
    if title and not any(b.kind == "h1" for b in blocks):
        blocks.insert(0, Block("h1", title, True))
    text = _render(blocks)
    headings = [(_HEADINGS[b.kind], b.text) for b in blocks if b.kind in _HEADINGS]
    kept_links = sum(b.links for b in blocks)
    return Page(
        text, title, parser.links, kept_links, len(blocks), len(parser.blocks) - len(blocks), used_main, headings
    )


def _main_blocks(blocks: list[Block]) -> tuple[list[Block], bool]:
    total = sum(len(b.text) for b in blocks)
    main = [b for b in blocks if b.main]
    main_chars = sum(len(b.text) for b in main)
    if main and (main_chars >= MAIN_SHARE * total or main_chars >= 500):
        return main, True
    return [b for b in blocks if not _link_list(b)], False


def _link_list(block: Block) -> bool:
    return block.kind in ("p", "li", "row") and block.link_chars >= LINK_DENSITY * len(block.text)


def _render(blocks: list[Block]) -> str:
    out: list[str] = []
    previous = ""
    for b in blocks:
        if out:
            out.append("\n" if b.kind == previous and b.kind in ("li", "row") else "\n\n")
        out.append(_render_block(b))
        previous = b.kind
    return "".join(out)


def _render_block(b: Block) -> str:
    if b.kind in _HEADINGS:
        return "#" * _HEADINGS[b.kind] + " " + b.text
    if b.kind == "li":
        return "- " + b.text
    if b.kind == "pre":
        fence = "````" if "```" in b.text else "```"
        return f"{fence}\n{b.text}\n{fence}"
    return b.text
