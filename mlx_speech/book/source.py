"""A book file read into chapters of plain, speakable text.

The long-form command speaks a whole book and writes one chaptered file, so
it needs the book's title and author and, for each chapter, a title and the
words to say: no markup, no code, no tables of contents, no notes,
paragraphs kept apart and hard-wrapped lines joined. Plain text, Markdown
(``markdown``) and EPUB (``epub``) are read here; anything else, and any
file that cannot be read (too big, not UTF-8, not an EPUB, locked by DRM),
is a ``BookError`` that says what to do."""

from __future__ import annotations

import codecs
import os
import re
from pathlib import Path, PurePath

from ..regular_files import NotRegularFile, open_regular
from .epub import epub_book
from .markdown import markdown_book
from .model import (
    FOOTNOTES,
    MAX_BOOK_BYTES,
    Book,
    BookError,
    Chapter,
    book_with,
    chapters_of,
    check_size,
)
from .pdf import pdf_book

__all__ = [
    "FOOTNOTES",
    "MAX_BOOK_BYTES",
    "SUFFIXES",
    "Book",
    "BookError",
    "Chapter",
    "book_of",
    "read_book",
]

SUFFIXES = {
    ".txt": "text",
    ".text": "text",
    ".md": "markdown",
    ".markdown": "markdown",
    ".epub": "epub",
    ".pdf": "pdf",
}


def read_book(
    path: str | Path, *, max_bytes: int = MAX_BOOK_BYTES, footnotes: str = "skip"
) -> Book:
    """The book in the file at ``path``, its kind given by its suffix; its size
    is checked before any of it is read. ``footnotes``: "skip" (the default),
    or "chapter-end" to read each chapter's notes at its end."""
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
        check_size(os.fstat(file.fileno()).st_size, max_bytes, name)
        data = file.read(max_bytes + 1)  # the file may have grown since its size was read
    return book_of(data, name, max_bytes=max_bytes, footnotes=footnotes)


def book_of(
    data: bytes, name: str, *, max_bytes: int = MAX_BOOK_BYTES, footnotes: str = "skip"
) -> Book:
    """The same, for bytes already read (an upload), `name` giving the kind by
    its suffix."""
    name = PurePath(name).name
    kind = _kind(name)
    check_size(len(data), max_bytes, name)
    if footnotes not in FOOTNOTES:
        raise ValueError(f"footnotes must be {' or '.join(FOOTNOTES)}, not {footnotes!r}")
    if kind == "epub":
        return epub_book(data, name, max_bytes, footnotes)
    if kind == "pdf":
        return pdf_book(data, name, max_bytes)
    text = _utf8_text(data, name)
    if kind == "markdown":
        return markdown_book(text, name, footnotes)
    paragraphs = re.split(r"\n[ \t]*\n", text)
    return book_with(None, None, chapters_of([(PurePath(name).stem, paragraphs)]), name)


def _kind(name: str) -> str:
    kind = SUFFIXES.get(PurePath(name).suffix.lower())
    if kind is None:
        raise BookError(
            f"cannot read {name!r}: a book is a .txt, .md, .epub or .pdf file;"
            " convert it to one of these"
        )
    return kind


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
