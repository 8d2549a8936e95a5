"""An EPUB read as a reader reads it: its reading order, chapters at its
table of contents' entries (or, where it has none or a broken one, at each
document), and what reading systems skip left out and said: the navigation
document and HTML contents pages, cover and title pages, copyright pages,
indexes, notes and their markers (``xhtml``)."""

from __future__ import annotations

import io
import posixpath
import warnings
import zipfile
from collections import Counter, defaultdict
from typing import NamedTuple
from urllib.parse import unquote

import ebooklib
from ebooklib import epub
from lxml import etree

from ..audio.pictures import MEDIA_TYPES, Picture
from .model import (
    MIB,
    Book,
    BookError,
    Chapter,
    TextBudget,
    book_with,
    chapters_of,
    counted,
    notes_read,
    without_front_pages,
)
from .xhtml import SKIPPED, Anchor, DocumentText, parse_html, semantics

# An EPUB is a zip: what it unpacks to is bounded too, so that a small file
# cannot expand into gigabytes (zipfile never reads past a member's stated size).
UNPACKED_BOUND_FACTOR = 8
_FONT_OBFUSCATION = {"http://www.idpf.org/2008/embedding", "http://ns.adobe.com/pdf/enc#RC"}
_XMLENC = "{http://www.w3.org/2001/04/xmlenc#}"
# Whole documents a reader skips, by the words of xhtml.SKIPPED that name
# them (EPUB 3's landmarks and epub:type), and EPUB 2's guide's own spelling.
_WHOLE_DOCUMENTS = ("cover", "titlepage", "toc", "copyright-page", "index", "loi", "lot")
_SKIPPED_DOCUMENTS = {
    **{word: SKIPPED[word] for word in _WHOLE_DOCUMENTS},
    "title-page": SKIPPED["titlepage"],
}


class _Document(NamedTuple):
    name: str  # its path in the archive
    content: bytes  # parsed only once it is read, within the text's budget


class _Entry(NamedTuple):
    title: str
    document: str
    fragment: str


def epub_book(data: bytes, name: str, max_bytes: int, footnotes: str = "skip") -> Book:
    try:
        _check_epub_archive(data, name, max_bytes)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            book = epub.read_epub(io.BytesIO(data))
        documents = _spine_documents(book)
        reading = _Reading(book, documents, TextBudget(max_bytes, name), footnotes)
        chapters = reading.chapters(_toc_entries(book.toc))
    except BookError:
        raise
    except Exception as error:  # ebooklib and lxml fail in many ways on a broken book
        raise BookError(f"{name!r} could not be read as an EPUB: {_why(error)}") from error
    titles, authors = _metadata(book, "title"), _metadata(book, "creator")
    title = titles[0] if titles else None
    chapters, front = without_front_pages(chapters, title)
    left_out = reading.said_left_out() + front
    details = [
        (field, values[0])
        for field in ("language", "publisher", "date", "description")
        if (values := _metadata(book, field))
    ]
    author = ", ".join(authors)
    return book_with(title, author, chapters, name, left_out, _cover(book), details)


def _cover(book: epub.EpubBook) -> Picture | None:
    """The cover image: EPUB 3's cover-image item, else the one EPUB 2's
    ``<meta name="cover">`` names; a JPEG or PNG (what audio files hold)."""
    items = list(book.get_items_of_type(ebooklib.ITEM_COVER))
    named = [
        attributes.get("content")
        for _, attributes in book.get_metadata("OPF", "meta")
        if (attributes or {}).get("name") == "cover"
    ]
    items += [item for item in book.get_items() if item.id in named]
    for item in items:
        if item.media_type in MEDIA_TYPES and item.content:
            return Picture(item.content, item.media_type)
    return None


def _why(error: Exception) -> str:
    """What is wrong with a broken EPUB, in words: XML's and ebooklib's own
    messages say it; Python's (a KeyError, a None's missing attribute) say
    nothing to a reader of the book."""
    if isinstance(error, etree.XMLSyntaxError | epub.EpubException):
        reason = " ".join(str(getattr(error, "msg", None) or error).split())[:160]
        return reason or type(error).__name__
    return (
        "its package document (.opf) is incomplete: an EPUB needs its metadata, "
        "manifest and spine"
    )


class _Reading:
    """The documents read once each, in order, what is skipped counted."""

    def __init__(self, book, documents: list[_Document], budget: TextBudget, footnotes):
        self._documents = documents
        self._unspoken = _unspoken_documents(book)
        self._budget = budget
        self._footnotes = footnotes
        self._restart()

    def _restart(self) -> None:
        self.left_out: list[str] = []
        self.skipped: Counter[str] = Counter()
        self.skipped_documents: set[str] = set()

    def chapters(self, entries: list[_Entry]) -> list[Chapter]:
        """By the table of contents where it holds, else by the documents."""
        broken = _broken(entries, {document.name for document in self._documents})
        if entries and not broken:
            sections, opened = self._toc_sections(entries)
            missing = [
                entry
                for entry in entries
                if entry not in opened and entry.document not in self.skipped_documents
            ]
            if not missing:
                return chapters_of(sections)
            broken = f"{len(missing)} of its entries point at nothing"
            self._restart()
        sections = self._spine_sections()
        if broken:
            self.left_out.insert(
                0,
                f"the table of contents: it is broken ({broken}); chapters follow the"
                " reading order",
            )
        return chapters_of(sections)

    def said_left_out(self) -> list[str]:
        return self.left_out + [counted(kind, n) for kind, n in self.skipped.items()]

    def _read(self, anchors: dict[str, set[str]]):
        """Each document to be read, as (document, its text, its root)."""
        for document in self._documents:
            kind = self._unspoken.get(document.name)
            root = parse_html(document.content) if kind is None else None
            kind = kind or _document_kind(root)
            if kind is not None:
                self.skipped_documents.add(document.name)
                self.left_out.append(f"the {kind} ({posixpath.basename(document.name)})")
                continue
            text = DocumentText(root, anchors.get(document.name, set()), self._budget)
            self.skipped.update(text.left_out)
            yield document, text, root

    def _toc_sections(self, entries: list[_Entry]):
        """The sections the entries begin, the text before the first a
        section of its own; and the entries found."""
        starts = defaultdict(list)  # (document, fragment) -> the entries that begin there
        anchors = defaultdict(set)  # document -> the fragments entries point to in it
        for entry in entries:
            starts[entry.document, entry.fragment].append(entry)
            if entry.fragment:
                anchors[entry.document].add(entry.fragment)
        front: tuple[str | None, list[str]] = (None, [])
        sections: list[tuple[str | None, list[str]]] = []
        opened: set[_Entry] = set()
        for document, text, root in self._read(anchors):
            begun = starts.get((document.name, ""), [])
            for part in text.parts:
                if isinstance(part, Anchor):
                    begun = begun + starts[document.name, part.id]
                    continue
                sections += [(entry.title, []) for entry in begun]
                opened.update(begun)
                begun = []
                if sections:
                    sections[-1][1].append(part)
                else:
                    front = (front[0] or _first_heading(root), front[1] + [part])
            sections += [(entry.title, []) for entry in begun]
            opened.update(begun)
            self._add_notes(sections, text)
        return ([front] if front[1] else []) + sections, opened

    def _spine_sections(self):
        sections = []
        for _, text, root in self._read({}):
            sections.append((_first_heading(root), text.paragraphs))
            self._add_notes(sections, text)
        return sections

    def _add_notes(self, sections, text: DocumentText) -> None:
        if self._footnotes == "chapter-end" and text.notes and sections:
            sections[-1][1].extend(notes_read([[note] for note in text.notes]))


def _broken(entries: list[_Entry], names: set[str]) -> str | None:
    """Why a table of contents cannot be followed, or None."""
    nowhere = sum(entry.document not in names for entry in entries)
    places = Counter((entry.document, entry.fragment) for entry in entries)
    shared = sum(count for count in places.values() if count > 1)
    if nowhere:
        return f"{nowhere} of its entries point at nothing"
    if shared:
        return f"{shared} of its entries point at one place"
    return None


def _document_kind(root: etree._Element) -> str | None:
    """What a reader skips that a whole document is, by its own semantics
    (its body's, or its one top section's), or an HTML contents page."""
    body = root.find("body")
    if body is None:
        return None
    tops = [child for child in body if isinstance(child.tag, str)]
    for element in [body, *tops[:1]] if len(tops) == 1 else [body]:
        for word in semantics(element):
            if word in _SKIPPED_DOCUMENTS:
                return _SKIPPED_DOCUMENTS[word]
    return "table of contents" if _is_contents_page(body) else None


def _is_contents_page(body: etree._Element) -> bool:
    """Mostly links to other documents of the book: an HTML contents page."""
    links = [
        a for a in body.iter("a") if (a.get("href") or "") and "://" not in a.get("href")
    ]
    if len(links) < 3:
        return False
    linked = sum(len(a.text_content().split()) for a in links)
    return linked >= 0.6 * len(body.text_content().split())


def _first_heading(root: etree._Element) -> str | None:
    headings = root.xpath("//h1|//h2|//h3")
    return " ".join(headings[0].text_content().split()) if headings else None


def _unspoken_documents(book: epub.EpubBook) -> dict[str, str]:
    """The documents a reader skips whole, by name: the navigation document,
    and what EPUB 2's guide and EPUB 3's landmarks say is a cover, a title
    page, a table of contents, a copyright page or an index."""
    unspoken = {}
    for item in book.get_items():
        if isinstance(item, epub.EpubNav):
            name = posixpath.normpath(item.get_name())
            unspoken[name] = "table of contents"
            unspoken.update(_landmarks(item.content, posixpath.dirname(name)))
    for reference in book.guide:
        kind = _SKIPPED_DOCUMENTS.get((reference.get("type") or "").lower())
        if kind is not None and reference.get("href"):
            document = unquote(reference["href"]).partition("#")[0]
            unspoken.setdefault(posixpath.normpath(document), kind)
    return unspoken


def _landmarks(content: bytes, folder: str) -> dict[str, str]:
    root = parse_html(content)
    found = {}
    for nav in root.iter("nav"):
        if "landmarks" not in semantics(nav):
            continue
        for link in nav.iter("a"):
            kinds = [_SKIPPED_DOCUMENTS.get(word) for word in semantics(link)]
            kind = next((k for k in kinds if k), None)
            href = unquote(link.get("href") or "").partition("#")[0]
            if kind and href:
                found[posixpath.normpath(posixpath.join(folder, href))] = kind
    return found


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
        if unpacked > UNPACKED_BOUND_FACTOR * max_bytes:
            limit = UNPACKED_BOUND_FACTOR * max_bytes / MIB
            raise BookError(
                f"{name!r} unpacks to {unpacked / MIB:.1f} MB; the limit is"
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


def _spine_documents(book: epub.EpubBook) -> list[_Document]:
    """The reading order's HTML documents, each once however often the
    spine lists it."""
    items = {item.id: item for item in book.get_items()}
    documents, seen = [], set()
    for idref, _linear in book.spine:
        item = items.get(idref)
        if isinstance(item, epub.EpubHtml):
            name = posixpath.normpath(item.get_name())
            if name not in seen:
                seen.add(name)
                documents.append(_Document(name, item.content))
    return documents


def _toc_entries(toc: object) -> list[_Entry]:
    """The table of contents flattened in order; a section with no href of
    its own gives only its children. ebooklib gives an empty NCX ``navMap``
    as one ``Link`` to nowhere, not a list."""
    entries = []
    for entry in toc if isinstance(toc, (list, tuple)) else [toc]:
        if isinstance(entry, (list, tuple)):
            entries.extend(_toc_entries(entry))
        elif getattr(entry, "href", ""):
            document, _, fragment = unquote(entry.href).partition("#")
            title = " ".join((entry.title or "").split())
            entries.append(_Entry(title, posixpath.normpath(document), fragment))
    return entries
