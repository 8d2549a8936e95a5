"""A book spoken through the Python API: chapter by chapter as ``speak
--captions`` speaks a text, many sentences at once, kept so that a stopped
call resumes, and written as one chaptered file."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import mlx_speech
from mlx_speech.book.source import read_book
from mlx_speech.book.speech import BookSpeech, speak_book
from mlx_speech.book.store import SpokenStore, StoreBusy
from mlx_speech.request import SpeechRequest
from tests.tts.support.probe import probed

SHORT = {"max_new_tokens": 3, "seed": 5}
KEPT = 2.0**-24  # a sentence is kept at 24 bits: within half a step of its samples
BOOK = """# The Crossing

## Morning

The boat left at dawn. Nobody waved.

[voice:grandma] Grandma spoke first. She always did.

## Evening

The sea was calm. [pause:0.2s] We slept.
"""


@pytest.fixture(scope="module")
def voiced_tts(speaking_dir, reference_clip, tmp_path_factory):
    tts = mlx_speech.load(speaking_dir, voices_dir=tmp_path_factory.mktemp("book-voices"))
    tts.voice_store.add("grandma", reference_clip.read_bytes())
    return tts


@pytest.fixture
def book_file(tmp_path):
    path = tmp_path / "crossing.md"
    path.write_text(BOOK, encoding="utf-8")
    return path


def _said_as_a_text_stream(tts, text: str) -> np.ndarray:
    """What ``speak --captions`` gives for ``text``: sentence by sentence."""
    stream = tts.stream_text([text], **SHORT)
    return np.concatenate([chunk.samples for chunk in stream])


def test_each_chapter_is_its_text_spoken_sentence_by_sentence(voiced_tts, book_file):
    book = speak_book(voiced_tts, book_file, **SHORT)
    assert book.title == "The Crossing"
    assert [chapter.title for chapter in book.chapters] == ["Morning", "Evening"]
    morning = "Morning\n\nThe boat left at dawn. Nobody waved.\n\n"
    morning += "[voice:grandma] Grandma spoke first. She always did."
    # the voice tag holds across the chapter's end, as in a text stream
    evening = "[voice:grandma] Evening\n\n[voice:grandma] The sea was calm. "
    evening += "[pause:0.2s] We slept."
    for chapter, text in zip(book.chapters, (morning, evening), strict=True):
        expected = np.concatenate(
            [_said_as_a_text_stream(voiced_tts, part) for part in text.split("\n\n")]
        )
        np.testing.assert_allclose(chapter.audio.samples, expected, rtol=0, atol=KEPT)
    # the wrong voice would not pass: the tag is heard
    untagged = _said_as_a_text_stream(voiced_tts, "Evening")
    assert not np.array_equal(book.chapters[1].audio.samples[: len(untagged)], untagged)


def test_captions_run_on_across_chapters_and_end_with_the_audio(voiced_tts, book_file):
    book = speak_book(voiced_tts, book_file, **SHORT)
    captions = book.captions
    assert [c.text for c in captions][:3] == [
        "Morning",
        "The boat left at dawn.",
        "Nobody waved.",
    ]
    assert captions[-1].text == "We slept."
    assert all(a.end == b.start for a, b in zip(captions, captions[1:], strict=False))
    total = sum(len(chapter.audio.samples) for chapter in book.chapters)
    assert captions[0].start == 0 and captions[-1].end == total
    for chapter in book.chapters:
        assert chapter.captions[-1].end == len(chapter.audio.samples)


def test_a_stopped_book_resumes_from_its_store(voiced_tts, book_file, tmp_path):
    store = tmp_path / "kept"
    told = []
    speak_book(voiced_tts, book_file, store=store, spoken=told.append, **SHORT)
    first = len(told)
    assert first == 8  # two headings and six sentences
    told.clear()
    again = speak_book(voiced_tts, book_file, store=store, spoken=told.append, **SHORT)
    assert told == []  # nothing spoken twice
    edited = tmp_path / "edited.md"
    edited.write_text(BOOK.replace("We slept.", "We slept well."), encoding="utf-8")
    changed = speak_book(voiced_tts, edited, store=store, spoken=told.append, **SHORT)
    assert [t.sentence.shown for t in told] == ["We slept well."]
    np.testing.assert_array_equal(
        changed.chapters[0].audio.samples, again.chapters[0].audio.samples
    )


def test_other_options_are_other_sentences(voiced_tts, book_file, tmp_path):
    book = read_book(book_file)
    plain = BookSpeech(voiced_tts, book, SpeechRequest.of("", **SHORT))
    faster = BookSpeech(voiced_tts, book, SpeechRequest.of("", speed=1.5, **SHORT))
    voiced = BookSpeech(voiced_tts, book, SpeechRequest.of("", "grandma", **SHORT))
    keys = [{s.key for s in speech.sentences} for speech in (plain, faster, voiced)]
    assert not keys[0] & keys[1] and not keys[0] & keys[2]


def test_a_bad_voice_tag_fails_before_any_work(voiced_tts, tmp_path):
    path = tmp_path / "bad.md"
    path.write_text("# One\n\nFine.\n\n# Two\n\n[voice:nobody] Not fine.\n")
    with pytest.raises(ValueError, match="nobody"):
        speak_book(voiced_tts, path, store=tmp_path / "kept", **SHORT)
    assert not list((tmp_path).glob("kept/*.flac"))


def test_one_run_at_a_time_holds_a_store(tmp_path):
    with SpokenStore(tmp_path / "kept"):
        with pytest.raises(StoreBusy, match="another run"):
            SpokenStore(tmp_path / "kept")
    SpokenStore(tmp_path / "kept").close()  # free again once the first ends


def test_the_written_book_has_its_chapters(voiced_tts, book_file, tmp_path):
    book = speak_book(voiced_tts, book_file, **SHORT)
    path = book.write(tmp_path / "crossing.m4b")
    found = probed(path)
    assert [c["tags"]["title"] for c in found["chapters"]] == ["Morning", "Evening"]
    assert found["format"]["tags"]["title"] == "The Crossing"


def test_an_ssml_paragraph_is_spoken_whole(voiced_tts, tmp_path):
    ssml = '<speak>Hello Bob. <voice name="grandma">Hi Alice!</voice></speak>'
    path = tmp_path / "play.txt"
    path.write_text(f"A first line.\n\n{ssml}\n")
    book = speak_book(voiced_tts, path, **SHORT)
    assert [c.text for c in book.captions] == ["A first line.", "Hello Bob. Hi Alice!"]
    whole = voiced_tts.speak(ssml, **SHORT).samples
    spoken = book.chapters[0].audio.samples[book.captions[1].start :]
    np.testing.assert_allclose(spoken, whole, rtol=0, atol=KEPT)
    alone = voiced_tts.speak("Hello Bob. Hi Alice!", **SHORT).samples
    assert len(alone) != len(whole) or not np.allclose(alone, whole, atol=KEPT)


def test_a_book_of_voice_tags_alone_says_nothing(voiced_tts, tmp_path):
    path = tmp_path / "tags.md"
    path.write_text("# One\n\n[voice:grandma]\n")
    book = read_book(path)
    assert [c.text for c in book.chapters] == ["One\n\n[voice:grandma]"]
    only_tags = replace(book, chapters=(replace(book.chapters[0], text="[voice:grandma]"),))
    with pytest.raises(ValueError, match="says nothing"):
        BookSpeech(voiced_tts, only_tags, SpeechRequest.of("", **SHORT))


def test_the_lexicon_and_the_pace_hold_in_a_book(speaking_dir, tmp_path):
    said = mlx_speech.load(speaking_dir, lexicon=mlx_speech.Lexicon([("SQL", "sequel")]))
    path = tmp_path / "db.txt"
    path.write_text("We use SQL daily.\n")
    book = speak_book(said, path, speed=1.5, **SHORT)
    expected = said.speak("We use sequel daily.", speed=1.5, **SHORT).samples
    np.testing.assert_allclose(book.chapters[0].audio.samples, expected, rtol=0, atol=KEPT)
    plain = mlx_speech.load(speaking_dir).speak("We use SQL daily.", speed=1.5, **SHORT)
    assert not np.allclose(plain.samples[: len(expected)], expected[: len(plain.samples)])
