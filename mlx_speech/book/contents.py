"""What a book holds before a word is spoken (``--list``, a job's
``contents``): each chapter's number, title, sentences and estimated
minutes; and which chapters a run speaks (``--chapters 3-5,7``)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .model import Book
from .plan import book_sentences

# A narrator's pace, for an estimate only: about 150 words a minute, at
# about 6 characters a word with its space.
CHARACTERS_PER_SECOND = 15.0
_RANGE = re.compile(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?")


@dataclass(frozen=True)
class ChapterContents:
    number: int  # from 1, as --chapters and --redo name it
    title: str
    sentences: int
    minutes: float  # estimated from its characters


def book_contents(book: Book) -> list[ChapterContents]:
    """Each chapter that says something, numbered in the book's order."""
    counts: dict[int, list[int]] = {}
    for sentence in book_sentences(book, ""):
        count = counts.setdefault(sentence.chapter, [0, 0])
        count[0] += 1
        count[1] += len(sentence.shown)
    return [
        ChapterContents(
            index + 1,
            book.chapters[index].title,
            sentences,
            characters / CHARACTERS_PER_SECOND / 60,
        )
        for index, (sentences, characters) in counts.items()
    ]


def chosen_chapters(spec: str | None, chapters: int) -> frozenset[int] | None:
    """The chapter indexes ``spec`` names ("3-5,7", numbered from 1), or
    None (every chapter) where it is None; ``ValueError`` for a bad one."""
    if spec is None:
        return None
    chosen: set[int] = set()
    for part in str(spec).split(","):
        match = _RANGE.fullmatch(part)
        if match is None:
            raise ValueError(
                f"chapters {spec!r}: name chapters by number and range, as 3-5,7"
            )
        first, last = int(match.group(1)), int(match.group(2) or match.group(1))
        if not 1 <= first <= last <= chapters:
            raise ValueError(
                f"chapters {spec!r}: the book has chapters 1 to {chapters}"
                " (mlx-speech book FILE --list shows them)"
            )
        chosen.update(range(first - 1, last))
    return frozenset(chosen)
