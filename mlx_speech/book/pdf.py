"""A PDF read as its text (pypdf): chapters at its outline's top entries
(its bookmarks), else one; what every page repeats (running headers and
footers) and page numbers left out; a word split by a hyphen at a line's
end joined again; a page's lines joined into paragraphs."""

from __future__ import annotations

import io
import logging
import re
from collections import Counter

from pypdf import PdfReader
from pypdf.errors import PyPdfError

from .model import (
    Book,
    BookError,
    TextBudget,
    book_with,
    chapters_of,
    counted,
    without_front_pages,
)

# A page number: 12, Page 12, 12/300, 12 of 300, or a front matter page's
# lower-case roman numeral (an upper-case I or V may be a chapter's number).
_PAGE_NUMBER = re.compile(r"(?:[Pp]age\s+)?(?:\d{1,4}|[ivxlc]{1,7})(?:\s*(?:/|of)\s*\d+)?")
_SENTENCE_END = tuple('.!?…"»”’)')
# pypdf logs what it finds wrong in a file; a broken book is said in one
# line of ours (BookError), a readable one needs no warning.
logging.getLogger("pypdf").setLevel(logging.ERROR)
_SHORT_LINE = 0.7  # of a page's longest line: a paragraph's last line is shorter


def pdf_book(data: bytes, name: str, max_bytes: int) -> Book:
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise BookError(f"{name!r} is encrypted: speak a copy without a password")
        pages = [page.extract_text() or "" for page in reader.pages]
        starts = _outline_starts(reader)
        metadata = reader.metadata or {}
    except BookError:
        raise
    except (PyPdfError, ValueError, KeyError, TypeError, OSError) as error:
        reason = " ".join(str(error).split())[:160] or type(error).__name__
        raise BookError(f"{name!r} could not be read as a PDF: {reason}") from error
    lines, left_out = _without_running_lines([page.splitlines() for page in pages])
    budget = TextBudget(max_bytes, name)
    sections: list[tuple[str | None, list[str]]] = []
    title = (metadata.get("/Title") or "").strip() or None
    headings: set[int] = set()  # the sections an outline entry titles
    for number, page_lines in enumerate(lines):
        for heading in starts.get(number, []):
            headings.add(len(sections))
            sections.append((heading, []))
            page_lines = _without_heading(page_lines, heading)
        if not sections:
            sections.append((title, []))
        for paragraph in _paragraphs(page_lines):
            budget.spend(paragraph)
            sections[-1][1].append(paragraph)
    joined = [
        (heading, [heading, *paragraphs] if index in headings else paragraphs)
        for index, (heading, paragraphs) in enumerate(_joined_across_pages(sections))
    ]  # a chapter's heading is its first sentence, as in every book
    chapters, front = without_front_pages(chapters_of(joined), title)
    author = (metadata.get("/Author") or "").strip() or None
    return book_with(title, author, chapters, name, left_out + front)


def _outline_starts(reader: PdfReader) -> dict[int, list[str]]:
    """The page each top outline entry begins on → its titles."""
    starts: dict[int, list[str]] = {}
    for entry in reader.outline:
        if isinstance(entry, list):  # an entry's children
            continue
        page = reader.get_destination_page_number(entry)
        title = " ".join(str(entry.title or "").split())
        if page is not None and page >= 0 and title:
            starts.setdefault(page, []).append(title)
    return starts


def _without_running_lines(pages: list[list[str]]) -> tuple[list[list[str]], list[str]]:
    """The pages' lines less page numbers and what half the pages or more
    repeat (digits aside: running headers and footers); and what was left
    out."""
    shape = lambda line: re.sub(r"\d+", "#", " ".join(line.split()))  # noqa: E731
    seen = Counter(
        key for page in pages for key in {shape(line) for line in page if line.strip()}
    )
    running = {key for key, count in seen.items() if count >= max(2, len(pages) / 2)}
    kept, numbers, repeated = [], 0, 0
    for page in pages:
        lines = []
        for line in page:
            if not line.strip():
                continue
            if _PAGE_NUMBER.fullmatch(line.strip()):
                numbers += 1
            elif shape(line) in running:
                repeated += 1
            else:
                lines.append(" ".join(line.split()))
        kept.append(lines)
    left_out = [
        counted("page number", numbers),
        counted("running header", repeated),
    ]
    return kept, [line for line in left_out if line]


def _without_heading(lines: list[str], heading: str) -> list[str]:
    """A chapter's first page less its heading line, which titles it."""
    if lines and lines[0].casefold() == heading.casefold():
        return lines[1:]
    return lines


def _paragraphs(lines: list[str]) -> list[str]:
    """A page's lines as paragraphs: a line ends one where it ends a
    sentence and is short of the page's measure; a hyphen at a line's end
    before a word in lower case joins the word's halves."""
    measure = max((len(line) for line in lines), default=0)
    paragraphs, current = [], ""
    for line in lines:
        if current.endswith("-") and current[-2:-1].isalpha() and line[:1].islower():
            current = current[:-1] + line
        else:
            current = f"{current} {line}".strip()
        if line.endswith(_SENTENCE_END) and len(line) < _SHORT_LINE * measure:
            paragraphs.append(current)
            current = ""
    return paragraphs + ([current] if current else [])


def _joined_across_pages(sections):
    """A paragraph a page ends without a sentence's end goes on with the
    next page's first."""
    joined = []
    for title, paragraphs in sections:
        merged: list[str] = []
        for paragraph in paragraphs:
            if merged and not merged[-1].endswith(_SENTENCE_END):
                merged[-1] = f"{merged[-1]} {paragraph}"
            else:
                merged.append(paragraph)
        joined.append((title, merged))
    return joined
