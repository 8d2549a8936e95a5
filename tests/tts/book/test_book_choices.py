"""Seeing a book before it is spoken (its contents, what is left out), and
choosing what is spoken: some chapters only, or one chapter again with
another seed while every other kept sentence stays."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mlx_speech.book.contents import CHARACTERS_PER_SECOND, book_contents
from mlx_speech.book.source import read_book
from mlx_speech.book.speech import speak_book

FIXTURES = Path(__file__).parent / "fixtures"
SHORT = {"max_new_tokens": 3, "seed": 5, "temperature": 1.0}
BOOK = (
    "# One\n\nFirst words here. More of them.\n\n# Two\n\nSecond part.\n\n# Three\n\nEnd.\n"
)


@pytest.fixture
def book_file(tmp_path):
    path = tmp_path / "three.md"
    path.write_text(BOOK)
    return path


def test_the_contents_count_sentences_and_estimate_minutes():
    contents = book_contents(read_book(FIXTURES / "lighthouse-epub3.epub"))
    assert [(c.number, c.title, c.sentences) for c in contents] == [
        (1, "Préface", 2),
        (2, "La Tempête", 6),
        (3, "Le Matin", 4),
    ]
    characters = len("Préface") + len("Cette histoire fut écrite au bord de la mer.")
    assert contents[0].minutes == pytest.approx(characters / CHARACTERS_PER_SECOND / 60)


def test_chosen_chapters_alone_are_spoken(speaking_tts, book_file):
    book = speak_book(speaking_tts, book_file, chapters="2-3", **SHORT)
    assert [chapter.title for chapter in book.chapters] == ["Two", "Three"]
    assert [c.text for c in book.captions] == ["Two", "Second part.", "Three", "End."]


@pytest.mark.parametrize(
    ("chapters", "says"), [("4", "chapters 1 to 3"), ("2-", "as 3-5,7"), ("0", "1 to 3")]
)
def test_a_bad_choice_says_what_the_book_has(speaking_tts, book_file, chapters, says):
    with pytest.raises(ValueError, match=says):
        speak_book(speaking_tts, book_file, chapters=chapters, **SHORT)


def test_a_chapter_redone_is_another_take_and_the_rest_stays(
    speaking_tts, book_file, tmp_path
):
    store = tmp_path / "kept"
    first = speak_book(speaking_tts, book_file, store=store, **SHORT)
    told = []
    again = speak_book(
        speaking_tts, book_file, store=store, redo="1", spoken=told.append, **SHORT
    )
    assert {t.sentence.chapter for t in told} == {0} and len(told) == 3
    assert not np.array_equal(
        first.chapters[0].audio.samples, again.chapters[0].audio.samples
    )
    for before, after in zip(first.chapters[1:], again.chapters[1:], strict=True):
        np.testing.assert_array_equal(before.audio.samples, after.audio.samples)
    told.clear()
    kept = speak_book(speaking_tts, book_file, store=store, spoken=told.append, **SHORT)
    assert told == []  # the new take is what later runs keep
    np.testing.assert_array_equal(
        kept.chapters[0].audio.samples, again.chapters[0].audio.samples
    )


def test_a_redo_needs_a_store(speaking_tts, book_file):
    with pytest.raises(ValueError, match="store"):
        speak_book(speaking_tts, book_file, redo="1", **SHORT)
