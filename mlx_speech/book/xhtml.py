"""An EPUB's XHTML document as a reader hears it: its paragraphs in order,
with what reading systems hide or a listener never hears left out, by the
document's own semantics (EPUB's ``epub:type``, ARIA's ``role``) and by
the markup conventions of the tools that make books (pandoc's and
calibre's note classes): notes and their bodies, references to them and
links back, tables of contents, indexes, page breaks, cover and title
pages, copyright pages."""

from __future__ import annotations

import re
from collections import Counter
from typing import NamedTuple
from urllib.parse import urlsplit

import lxml.html
from lxml import etree

from .model import TextBudget

_DOCTYPE = re.compile(rb"<!DOCTYPE\b[^\[>]*(?:\[.*?\]\s*)?>", re.DOTALL | re.IGNORECASE)
_EPUB_TYPE = "{http://www.idpf.org/2007/ops}type"
# HTML elements that begin and end a paragraph; other elements' text runs on.
BLOCK_TAGS = frozenset(
    "address article aside blockquote body br dd div dl dt figcaption figure footer h1 h2"
    " h3 h4 h5 h6 header hr li main nav ol p pre section table td th tr ul".split()
)
# What each semantic left out is, as a listener is told (epub:type, role
# without "doc-", and the class names tools give the same things).
SKIPPED = {
    "footnote": "footnote",
    "footnotes": "footnote",
    "endnote": "footnote",
    "endnotes": "footnote",
    "rearnote": "footnote",
    "rearnotes": "footnote",
    "note": "footnote",
    "noteref": "note marker",
    "footnote-ref": "note marker",
    "backlink": "note marker",
    "footnote-back": "note marker",
    "toc": "table of contents",
    "landmarks": "table of contents",
    "page-list": "table of contents",
    "index": "index",
    "loi": "list of illustrations",
    "lot": "list of tables",
    "pagebreak": "page number",
    "cover": "cover",
    "titlepage": "title page",
    "halftitlepage": "title page",
    "copyright-page": "copyright page",
}
# A link whose whole text is one of these marks a note (1, [2], (3), *, †, ↩).
_NOTE_MARK = re.compile(r"\s*[\[(]?(?:\d{1,4}|[*†‡§¶]+)[\])]?\s*|\s*[↩↑][\ufe0e\ufe0f]?\s*")


class Anchor(NamedTuple):
    """Where a table of contents entry begins, among a document's paragraphs."""

    id: str


def parse_html(content: bytes) -> etree._Element:
    """A document parsed as a browser would; what is never shown (its head,
    scripts, styles, comments) removed."""
    # EPUB documents are UTF-8 or UTF-16; lxml would guess Latin-1 without a <meta>.
    if content[:2] in (b"\xff\xfe", b"\xfe\xff"):
        content = content.decode("utf-16").encode()
    # An HTML parser reads an XHTML DOCTYPE's internal subset as text.
    content = _DOCTYPE.sub(b"", content, count=1)
    parser = lxml.html.HTMLParser(encoding="utf-8")
    try:
        root = lxml.html.document_fromstring(content, parser=parser)
    except etree.ParserError:  # an empty document
        return lxml.html.Element("html")
    unspoken = ("head", "script", "style", "template", etree.Comment, etree.PI)
    etree.strip_elements(root, *unspoken, with_tail=False)
    return root


def semantics(element: etree._Element) -> set[str]:
    """What an element says it is: its epub:type and role (without "doc-")
    and class words."""
    words = set()
    for attribute in (_EPUB_TYPE, "epub:type", "role", "class"):
        for word in (element.get(attribute) or "").split():
            words.add(word.removeprefix("doc-").lower())
    return words


def skipped_kind(element: etree._Element) -> str | None:
    """What a reader skips that ``element`` is, or None."""
    for word in semantics(element):
        if word in SKIPPED:
            return SKIPPED[word]
    if element.tag == "a" and _within_the_book(element.get("href") or ""):
        text = element.text_content()
        if text and _NOTE_MARK.fullmatch(text):
            return "note marker"
    return None


def _within_the_book(href: str) -> bool:
    """A link to a place in this document or another of the book's (calibre
    splits a chapter from its notes), not to the web."""
    return "#" in href and urlsplit(href).scheme == ""


class DocumentText:
    """A document's paragraphs, with ``Anchor``s where elements with
    ``anchor_ids`` begin (mid-paragraph too: it ends one); what is skipped
    is counted in ``left_out`` by kind, and the notes' paragraphs kept in
    ``notes`` (for reading them at a chapter's end)."""

    def __init__(self, root: etree._Element, anchor_ids: set[str], budget: TextBudget):
        self.parts: list[str | Anchor] = []
        self.notes: list[str] = []
        self.left_out: Counter[str] = Counter()
        self._budget = budget
        self._read(root, set(anchor_ids))

    def _read(self, root: etree._Element, anchor_ids: set[str]) -> None:
        pending: list[str] = []
        walker = etree.iterwalk(root, events=("start", "end"))
        for event, element in walker:
            if element.tag in BLOCK_TAGS:
                self._end_paragraph(pending)
            if event == "end":
                pending.append(element.tail or "")
                continue
            element_id = element.get("id")
            if element_id in anchor_ids:
                self._end_paragraph(pending)
                self.parts.append(Anchor(element_id))
                anchor_ids.discard(element_id)  # each begins once, should an id repeat
            kind = skipped_kind(element) if isinstance(element.tag, str) else None
            if kind is None:
                pending.append(element.text or "")
                continue
            self.left_out[kind] += 1
            if kind == "footnote":
                self.notes += _paragraphs(element)
            walker.skip_subtree()
        self._end_paragraph(pending)

    def _end_paragraph(self, pending: list[str]) -> None:
        text = " ".join("".join(pending).split())
        pending.clear()
        if text:
            self._budget.spend(text)
            self.parts.append(text)

    @property
    def paragraphs(self) -> list[str]:
        return [part for part in self.parts if isinstance(part, str)]


def _paragraphs(element: etree._Element) -> list[str]:
    """A note's text, its own markers and links back left out."""
    copy = lxml.html.fromstring(etree.tostring(element))
    for inner in list(copy.iter()):
        if inner is not copy and skipped_kind(inner) == "note marker":
            inner.drop_tree()
    text = " ".join(copy.text_content().split())
    return [text] if any(c.isalnum() for c in text) else []
