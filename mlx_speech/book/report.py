"""The sentences of a spoken book whose kept take is still suspect
(``takes``), with where they are: for the summary, a job's JSON and
``--report``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .plan import Sentence
from .source import Book
from .store import SpokenStore


@dataclass(frozen=True)
class Suspect:
    chapter: int  # numbered from 1, as --list shows it
    title: str  # the chapter's
    start: float  # seconds into the book's audio
    text: str  # as its caption says it
    why: str

    def line(self) -> str:
        minutes, seconds = divmod(int(self.start), 60)
        hours, minutes = divmod(minutes, 60)
        at = f"{hours}:{minutes:02d}:{seconds:02d}"
        return f"chapter {self.chapter} ({self.title}) at {at}: {self.why}: {self.text}"

    def as_dict(self) -> dict:
        return {
            "chapter": self.chapter,
            "title": self.title,
            "start_seconds": round(self.start, 2),
            "text": self.text,
            "why": self.why,
        }


def suspects(
    book: Book, sentences: Sequence[Sentence], store: SpokenStore, rate: int
) -> list[Suspect]:
    """Each kept sentence whose take is suspect, in the book's order; a
    sentence said twice is listed where it is first heard."""
    found, position, marks = [], 0, store.suspects()
    for sentence in sentences:
        if not store.has(sentence.key):
            continue  # not spoken yet
        why = marks.pop(sentence.key, None)  # once: where first heard
        if why is not None:
            title = book.chapters[sentence.chapter].title
            start = position / rate
            found.append(Suspect(sentence.chapter + 1, title, start, sentence.shown, why))
        position += store.frames(sentence.key)
    return found


def report_text(found: Sequence[Suspect]) -> str:
    """``--report``'s file: a line a suspect sentence, or one saying none is."""
    if not found:
        return "no sentence is suspect: every take was checked and kept as it came\n"
    return "".join(suspect.line() + "\n" for suspect in found)
