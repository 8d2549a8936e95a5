"""A book file read into chapters of plain, speakable text.

The long-form command speaks a whole book and writes one chaptered file, so
it needs the book's title and author and, for each chapter, a title and the
words to say: no markup, no code, no tables of contents, paragraphs kept
apart and hard-wrapped lines joined. Plain text, Markdown and EPUB are read
here; anything else, and any file that cannot be read (too big, not UTF-8,
not an EPUB, locked by DRM), is a ``BookError`` that says what to do."""

from __future__ import annotations

import codecs
import io
import math
import os
import posixpath
import re
import warnings
import zipfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import NamedTuple
from urllib.parse import unquote

import lxml.html
from ebooklib import epub
from lxml import etree
from markdown_it import MarkdownIt

from ..regular_files import NotRegularFile, open_regular

MAX_BOOK_BYTES = 16 * 1024 * 1024
SUFFIXES = {
    ".txt": "text",
    ".text": "text",
    ".md": "markdown",
    ".markdown": "markdown",
    ".epub": "epub",
}

_MIB = 1024 * 1024
# An EPUB is a zip: what it unpacks to is bounded too, so that a small file
# cannot expand into gigabytes (zipfile never reads past a member's stated size).
_UNPACKED_BOUND_FACTOR = 8
_FONT_OBFUSCATION = {"http://www.idpf.org/2008/embedding", "http://ns.adobe.com/pdf/enc#RC"}
_XMLENC = "{http://www.w3.org/2001/04/xmlenc#}"
_FRONT_MATTER = re.compile(r"\A---\n(.*?\n)?(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.DOTALL)
_DOCTYPE = re.compile(rb"<!DOCTYPE\b[^\[>]*(?:\[.*?\]\s*)?>", re.DOTALL | re.IGNORECASE)
_MARKDOWN_BLOCKS = MarkdownIt("commonmark").disable("inline")
_MARKDOWN_INLINE = MarkdownIt("commonmark")
# HTML elements that begin and end a paragraph; other elements' text runs on.
_BLOCK_TAGS = frozenset(
    "address article aside blockquote body br dd div dl dt figcaption figure footer h1 h2"
    " h3 h4 h5 h6 header hr li main nav ol p pre section table td th tr ul".split()
)


@dataclass(frozen=True)
class Chapter:
    title: str
    """Never empty: the chapter's heading, else the book's title or "Chapter N"."""
    text: str
    """What is spoken: plain text, paragraphs separated by a blank line; never empty."""


@dataclass(frozen=True)
class Book:
    title: str | None
    author: str | None
    chapters: tuple[Chapter, ...]
    """At least one."""


class BookError(ValueError):
    """A book that cannot be read: a one-line message that names the file and
    says what to do."""


def read_book(path: str | Path, *, max_bytes: int = MAX_BOOK_BYTES) -> Book:
    """The book in the file at ``path``, its kind given by its suffix; its size
    is checked before any of it is read."""
    path = Path(path)
    name = path.name
    try:
        file = open_regular(path)
    except FileNotFoundError:
        raise BookError(f"cannot read {name!r}: no such file; check the path") from None
    except NotRegularFile:
        what = "a directory" if path.is_dir() else "not a regular file"
        raise BookError(f"cannot read {name!r}: it is {what}; name a book file") from None
    except OSError as error:
        raise BookError(f"cannot read {name!r}: {error.strerror}") from None
    with file:
        _kind(name)
        _check_size(os.fstat(file.fileno()).st_size, max_bytes, name)
        data = file.read(max_bytes + 1)  # the file may have grown since its size was read
    return book_of(data, name, max_bytes=max_bytes)


def book_of(data: bytes, name: str, *, max_bytes: int = MAX_BOOK_BYTES) -> Book:
    """The same, for bytes already read (an upload), `name` giving the kind by
    its suffix."""
    name = PurePath(name).name
    kind = _kind(name)
    _check_size(len(data), max_bytes, name)
    if kind == "epub":
        return _epub_book(data, name, max_bytes)
    text = _utf8_text(data, name)
    if kind == "markdown":
        return _markdown_book(text, name)
    paragraphs = re.split(r"\n[ \t]*\n", text)
    return _book(None, None, _chapters([(PurePath(name).stem, paragraphs)]), name)


def _kind(name: str) -> str:
    kind = SUFFIXES.get(PurePath(name).suffix.lower())
    if kind is None:
        raise BookError(
            f"cannot read {name!r}: a book is a .txt, .md or .epub file;"
            " convert it to one of these"
        )
    return kind


def _check_size(size: int, max_bytes: int, name: str) -> None:
    if size > max_bytes:
        # Rounded up, so that a file just over the limit never reads as equal to it.
        megabytes = math.ceil(size * 10 / _MIB) / 10
        limit = f"{max_bytes / _MIB:.1f}".removesuffix(".0")
        raise BookError(
            f"{name!r} is {megabytes:.1f} MB; the limit is {limit} MB: split it into parts"
        )


def _utf8_text(data: bytes, name: str) -> str:
    """``data`` as text, its newlines ``\\n``; a NUL byte means a binary file."""
    bad = data.find(b"\0")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        start = error.start + (3 if data.startswith(codecs.BOM_UTF8) else 0)
        bad = start if bad < 0 else min(bad, start)
    if bad >= 0:
        raise BookError(
            f"{name!r} is not UTF-8 text (byte {bad}): save it as UTF-8 text,"
            " or if it is an EPUB, name it .epub"
        )
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _chapters(sections: list[tuple[str | None, list[str]]]) -> list[Chapter]:
    """A chapter for each (title, paragraphs) with words, of its paragraphs that
    have words (whitespace collapsed), titled "Chapter N" if it has no title."""
    chapters = []
    for title, paragraphs in sections:
        spoken = [" ".join(p.split()) for p in paragraphs if any(c.isalnum() for c in p)]
        if spoken:
            number = len(chapters) + 1
            chapters.append(Chapter(title or f"Chapter {number}", "\n\n".join(spoken)))
    return chapters


def _book(
    title: str | None, author: str | None, chapters: list[Chapter], name: str
) -> Book:
    if not chapters:
        raise BookError(f"{name!r} has no text to speak")
    return Book(title or None, author or None, tuple(chapters))


# Markdown


def _markdown_book(text: str, name: str) -> Book:
    fields, text = _front_matter(text)
    blocks = _markdown_blocks(text)
    title = fields.get("title")
    levels = [level for level, _ in blocks if level]
    # One "#" heading at the top over "##" chapters is the book's title.
    if levels.count(1) == 1 and blocks[0][0] == 1 and max(levels) > 1:
        title = title or blocks[0][1]
        blocks, levels = blocks[1:], levels[1:]
    chapter_level = min(levels, default=None)
    sections: list[tuple[str | None, list[str]]] = []
    for level, block_text in blocks:
        if level == chapter_level:
            sections.append((block_text, [block_text]))
        else:
            if not sections:
                sections.append((title or PurePath(name).stem, []))
            sections[-1][1].append(block_text)
    return _book(title, fields.get("author"), _chapters(sections), name)


def _front_matter(text: str) -> tuple[dict[str, str], str]:
    """The ``title`` and ``author`` of a YAML front matter block (simple
    ``key: value`` lines), and the text after it."""
    match = _FRONT_MATTER.match(text)
    if match is None:
        return {}, text
    fields = {}
    for line in (match.group(1) or "").splitlines():
        key, colon, value = line.partition(":")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1].strip()
        if colon and key in ("title", "author") and value:
            fields[key] = value
    return fields, text[match.end() :]


def _markdown_blocks(text: str) -> list[tuple[int, str]]:
    """Each heading and paragraph with words, as (heading level or 0, text).
    Code, HTML blocks and rules carry no inline text, so they fall away.
    Blocks are found first, then each block's inline text parsed alone, its
    line breaks made spaces (what they are said as): so the tokens of one
    block, not of the book, are held at once."""
    blocks = []
    tokens = _MARKDOWN_BLOCKS.parse(text)
    for index, token in enumerate(tokens):
        if token.type != "inline":
            continue
        opener = tokens[index - 1]
        level = int(opener.tag[1]) if opener.type == "heading_open" else 0
        one_line = token.content.replace("\\\n", " ").replace("\n", " ")
        (inline,) = _MARKDOWN_INLINE.parseInline(one_line)
        said = " ".join(_inline_text(inline.children or []).split())
        if any(c.isalnum() for c in said):
            blocks.append((level, said))
    return blocks


def _inline_text(children: list) -> str:
    """What inline tokens say: markup, link targets and inline HTML dropped,
    an image's alt text kept."""
    pieces = []
    for child in children:
        if child.type in ("text", "text_special", "code_inline"):
            pieces.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            pieces.append(" ")
        elif child.type == "image":
            pieces.append(_inline_text(child.children or []))
    return "".join(pieces)


# EPUB


class _Anchor(NamedTuple):
    """Where a table of contents entry begins, among a document's paragraphs."""

    id: str


def _epub_book(data: bytes, name: str, max_bytes: int) -> Book:
    try:
        _check_epub_archive(data, name, max_bytes)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            book = epub.read_epub(io.BytesIO(data))
        documents = _spine_documents(book)
        budget = _TextBudget(max_bytes, name)
        entries = _toc_entries(book.toc)
        chapters = _toc_chapters(entries, documents, budget) or _spine_chapters(
            documents, _TextBudget(max_bytes, name)
        )
    except BookError:
        raise
    except Exception as error:  # ebooklib and lxml fail in many ways on a broken book
        reason = " ".join(str(getattr(error, "msg", None) or error).split())[:160]
        raise BookError(
            f"{name!r} could not be read as an EPUB: {reason or type(error).__name__}"
        ) from error
    titles, authors = _metadata(book, "title"), _metadata(book, "creator")
    return _book(titles[0] if titles else None, ", ".join(authors), chapters, name)


class _TextBudget:
    """The text a book yields is bounded as a plain text file is, counted
    as it is read, so that a small archive cannot expand into more."""

    def __init__(self, max_bytes: int, name: str):
        self.left = max_bytes
        self.max_bytes = max_bytes
        self.name = name

    def spend(self, text: str) -> None:
        self.left -= len(text.encode())
        if self.left < 0:
            limit = f"{self.max_bytes / _MIB:.1f}".removesuffix(".0")
            raise BookError(
                f"{self.name!r} holds more than {limit} MB of text, the limit for a"
                " book: split it into parts"
            )


def _check_epub_archive(data: bytes, name: str, max_bytes: int) -> None:
    """Refuses what is not an EPUB, what unpacks too big, and DRM, before
    ebooklib sees it."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile:
        raise BookError(f"{name!r} is not an EPUB: it is not a zip file") from None
    with archive:
        names = set(archive.namelist())
        if "META-INF/container.xml" not in names:
            raise BookError(f"{name!r} is not an EPUB: it has no META-INF/container.xml")
        unpacked = sum(info.file_size for info in archive.infolist())
        if unpacked > _UNPACKED_BOUND_FACTOR * max_bytes:
            limit = _UNPACKED_BOUND_FACTOR * max_bytes / _MIB
            raise BookError(
                f"{name!r} unpacks to {unpacked / _MIB:.1f} MB; the limit is"
                f" {limit:.1f} MB: split it into parts"
            )
        drm = "META-INF/rights.xml" in names
        if not drm and "META-INF/encryption.xml" in names:
            drm = _encrypts_content(archive.read("META-INF/encryption.xml"), name)
    if drm:
        raise BookError(f"{name!r} is DRM-protected: speak a copy without DRM")


def _encrypts_content(encryption_xml: bytes, name: str) -> bool:
    """Whether META-INF/encryption.xml encrypts more than fonts (font
    obfuscation hides only fonts, not what is read)."""
    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False)
    try:
        root = etree.fromstring(encryption_xml, parser)
    except etree.XMLSyntaxError:
        raise BookError(
            f"{name!r} could not be read as an EPUB: its META-INF/encryption.xml is not XML"
        ) from None
    methods = root.iter(f"{_XMLENC}EncryptionMethod")
    return any(method.get("Algorithm") not in _FONT_OBFUSCATION for method in methods)


def _metadata(book: epub.EpubBook, field: str) -> list[str]:
    """The Dublin Core ``field``'s values that are not blank."""
    values = (
        " ".join((value or "").split()) for value, _ in book.get_metadata("DC", field)
    )
    return [value for value in values if value]


class _Document(NamedTuple):
    name: str  # its path in the archive
    content: bytes  # parsed only once it is read, within the text's budget


def _spine_documents(book: epub.EpubBook) -> list[_Document]:
    """The reading order's documents, each once however often the spine
    lists it; the navigation document and a cover page ebooklib recognises
    are left out."""
    items = {item.id: item for item in book.get_items()}
    documents, seen = [], set()
    for idref, _linear in book.spine:
        item = items.get(idref)
        if isinstance(item, epub.EpubHtml) and item.is_chapter():
            name = posixpath.normpath(item.get_name())
            if name not in seen:
                seen.add(name)
                documents.append(_Document(name, item.content))
    return documents


def _parse_html(content: bytes) -> etree._Element:
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


def _document_parts(
    root: etree._Element, anchor_ids: set[str], budget: _TextBudget
) -> list[str | _Anchor]:
    """A document's paragraphs in order, with an ``_Anchor`` where an element
    with one of ``anchor_ids`` begins (mid-paragraph too: it ends one)."""
    anchor_ids = set(anchor_ids)  # each begins once, should an id be repeated
    parts: list[str | _Anchor] = []
    pending: list[str] = []

    def end_paragraph() -> None:
        text = " ".join("".join(pending).split())
        pending.clear()
        if text:
            budget.spend(text)
            parts.append(text)

    for event, element in etree.iterwalk(root, events=("start", "end")):
        if element.tag in _BLOCK_TAGS:
            end_paragraph()
        if event == "start":
            if element.get("id") in anchor_ids:
                end_paragraph()
                parts.append(_Anchor(element.get("id")))
                anchor_ids.discard(element.get("id"))
            pending.append(element.text or "")
        else:
            pending.append(element.tail or "")
    end_paragraph()
    return parts


def _toc_entries(toc: object) -> list[tuple[str, str, str]]:
    """The table of contents flattened in order, as (title, document, fragment);
    a section with no href of its own gives only its children. ebooklib
    gives an empty NCX ``navMap`` as one ``Link`` to nowhere, not a list."""
    entries = []
    for entry in toc if isinstance(toc, (list, tuple)) else [toc]:
        if isinstance(entry, (list, tuple)):
            entries.extend(_toc_entries(entry))
        elif getattr(entry, "href", ""):
            document, _, fragment = unquote(entry.href).partition("#")
            title = " ".join((entry.title or "").split())
            entries.append((title, posixpath.normpath(document), fragment))
    return entries


def _toc_chapters(
    entries: list[tuple[str, str, str]], documents: list[_Document], budget: _TextBudget
) -> list[Chapter]:
    """A chapter for each table of contents entry: the text from where it
    points to where the next entry does, in reading order, so a chapter split
    over several documents stays whole. Text before the first entry (a cover,
    a title page) is not spoken; an entry with no text is skipped."""
    starts = defaultdict(list)  # (document, fragment) -> the entries that begin there
    anchors = defaultdict(set)  # document -> the fragments entries point to in it
    for index, (_, document, fragment) in enumerate(entries):
        starts[document, fragment].append(index)
        if fragment:
            anchors[document].add(fragment)
    sections: list[tuple[str, list[str]]] = []
    for document in documents:
        for index in starts.get((document.name, ""), []):
            sections.append((entries[index][0], []))
        if not sections and not anchors.get(document.name):
            continue  # before the first entry: never read
        root = _parse_html(document.content)
        parts = _document_parts(root, anchors.get(document.name, set()), budget)
        for part in parts:
            if isinstance(part, _Anchor):
                sections.extend((entries[i][0], []) for i in starts[document.name, part.id])
            elif sections:
                sections[-1][1].append(part)
    return _chapters(sections)


def _spine_chapters(documents: list[_Document], budget: _TextBudget) -> list[Chapter]:
    """A chapter for each document with text, titled by its first heading."""
    sections = []
    for document in documents:
        root = _parse_html(document.content)
        headings = root.xpath("//h1|//h2|//h3")
        title = " ".join(headings[0].text_content().split()) if headings else None
        parts = _document_parts(root, set(), budget)
        sections.append((title, [part for part in parts if isinstance(part, str)]))
    return _chapters(sections)
