"""What a book is once read, whatever file it came from: its title, author
and chapters of plain, speakable text, and what was left out unspoken;
with the bounds every reader holds it to."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..audio.pictures import Picture

MAX_BOOK_BYTES = 16 * 1024 * 1024
MIB = 1024 * 1024
_COPYRIGHT = re.compile(
    r"copyright|©|all rights reserved|tous droits réservés|todos los derechos"
    r"|alle rechte vorbehalten|tutti i diritti|\bisbn\b",
    re.IGNORECASE,
)
_FRONT_MATTER_WORDS = 150  # a title or copyright page is shorter
# Where a book's notes go: left out, or read at the end of the chapter
# that cites them.
FOOTNOTES = ("skip", "chapter-end")


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
    left_out: tuple[str, ...] = ()
    """What a reader skips and was not read, each with why: "the table of
    contents (nav.xhtml)", "3 footnotes"..."""
    cover: Picture | None = None
    details: tuple[tuple[str, str], ...] = ()
    """What else the source says of itself, as audio tags name it:
    ("language", "fr"), ("publisher", ...), ("date", ...), ("description", ...)."""


class BookError(ValueError):
    """A book that cannot be read: a one-line message that names the file and
    says what to do."""


def check_size(size: int, max_bytes: int, name: str) -> None:
    if size > max_bytes:
        # Rounded up, so that a file just over the limit never reads as equal to it.
        megabytes = math.ceil(size * 10 / MIB) / 10
        raise BookError(
            f"{name!r} is {megabytes:.1f} MB; the limit is {_megabytes(max_bytes)} MB:"
            " split it into parts"
        )


class TextBudget:
    """The text a book yields is bounded as a plain text file is, counted
    as it is read, so that a small archive cannot expand into more."""

    def __init__(self, max_bytes: int, name: str):
        self.left = max_bytes
        self.max_bytes = max_bytes
        self.name = name

    def spend(self, text: str) -> None:
        self.left -= len(text.encode())
        if self.left < 0:
            raise BookError(
                f"{self.name!r} holds more than {_megabytes(self.max_bytes)} MB of text,"
                " the limit for a book: split it into parts"
            )


def chapters_of(sections: Sequence[tuple[str | None, Sequence[str]]]) -> list[Chapter]:
    """A chapter for each (title, paragraphs) with words, of its paragraphs that
    have words (whitespace collapsed), titled "Chapter N" if it has no title."""
    chapters = []
    for title, paragraphs in sections:
        spoken = [" ".join(p.split()) for p in paragraphs if any(c.isalnum() for c in p)]
        if spoken:
            number = len(chapters) + 1
            chapters.append(Chapter(title or f"Chapter {number}", "\n\n".join(spoken)))
    return chapters


def book_with(
    title: str | None,
    author: str | None,
    chapters: Sequence[Chapter],
    name: str,
    left_out: Sequence[str] = (),
    cover: Picture | None = None,
    details: Sequence[tuple[str, str]] = (),
) -> Book:
    """The book, which must say something."""
    if not chapters:
        raise BookError(f"{name!r} has no text to speak")
    return Book(
        title or None,
        author or None,
        tuple(chapters),
        tuple(left_out),
        cover,
        tuple(details),
    )


def without_front_pages(chapters: list[Chapter], title: str | None):
    """The leading chapters that are a title page or a copyright page with
    no semantics to say so (EPUB 2's, a PDF's), left out by what they say;
    and what was left out."""
    left_out = []
    while len(chapters) > 1:
        words = chapters[0].text.split()
        if len(words) > _FRONT_MATTER_WORDS:
            break
        if title and chapters[0].text.startswith(title) and len(words) <= 60:
            kind = "title page"
        elif _COPYRIGHT.search(chapters[0].text):
            kind = "copyright page"
        else:
            break
        left_out.append(f"the {kind} ({chapters[0].title!r})")
        chapters = chapters[1:]
    return chapters, left_out


def notes_read(notes: Sequence[Sequence[str]]) -> list[str]:
    """Notes read at the end of a chapter (``--footnotes chapter-end``): each
    numbered in order, "Note N." before its first paragraph."""
    read = []
    for number, paragraphs in enumerate(notes, start=1):
        if paragraphs:
            read += [f"Note {number}. {paragraphs[0]}", *paragraphs[1:]]
    return read


def counted(kind: str, count: int) -> str:
    """A line of ``Book.left_out`` for ``count`` things of one kind ("" for none)."""
    if not count:
        return ""
    if count > 1:
        return f"{count} {kind}{'es' if kind.endswith('x') else 's'}"
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"


def _megabytes(size: int) -> str:
    return f"{size / MIB:.1f}".removesuffix(".0")
