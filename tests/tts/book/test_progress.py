"""The book's progress: a bar on a terminal, plain lines elsewhere; both
say the chapter, the sentences done, the minutes of audio and the time
left."""

from __future__ import annotations

import io

import pytest

import mlx_speech
from mlx_speech.book.source import read_book
from mlx_speech.book.speech import BookSpeech
from mlx_speech.book.store import SpokenStore
from mlx_speech.cli import progress
from mlx_speech.request import SpeechRequest

SHORT = {"max_new_tokens": 3, "seed": 5}


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def speech(speaking_tts: mlx_speech.TTS, tmp_path) -> BookSpeech:
    path = tmp_path / "two.md"
    path.write_text("# One\n\nA first. A second.\n\n# Two\n\nA third. A fourth.\n")
    return BookSpeech(speaking_tts, read_book(path), SpeechRequest.of("", **SHORT))


def test_lines_say_where_the_book_is(speech, tmp_path, monkeypatch):
    monkeypatch.setattr(progress, "LINE_SECONDS", 0.0)
    out = io.StringIO()
    report = progress.BookProgress(speech, set(), 0, out)
    with SpokenStore(tmp_path / "kept") as store:
        speech.speak(store, in_flight=1, spoken=report)
    lines = out.getvalue().splitlines()
    assert len(lines) == 6  # one a sentence: two headings, four sentences
    assert lines[0].startswith("book: chapter 1/2: One, 1/6 sentences, 0.0 min of audio")
    assert "chapter 2/2: Two, 6/6 sentences" in lines[-1]
    assert lines[-1].endswith("time left about 0 min 00 s")


def test_a_terminal_gets_a_bar(speech, tmp_path):
    out = Terminal()
    with SpokenStore(tmp_path / "kept") as store:
        speech.speak(store, in_flight=1)  # all kept before the bar starts
        done = {s.key for s in speech.sentences[:4]}
        report = progress.BookProgress(speech, done, 48000 * 60, out)
        report.close()
    bar = out.getvalue()
    assert "chapter 2/2: Two" in bar and "4/6" in bar and "1.0 min of audio" in bar


def test_writing_says_how_much_of_the_audio_is_written(speech, tmp_path, monkeypatch):
    monkeypatch.setattr(progress, "LINE_SECONDS", 0.0)
    out = io.StringIO()
    with SpokenStore(tmp_path / "kept") as store:
        speech.speak(store, in_flight=1)
        total = sum(store.frames(sentence.key) for sentence in speech.sentences)
        report = progress.WritingProgress(total, speech.rate, out)
        speech.write(store, tmp_path / "two.wav", written=report)
    lines = out.getvalue().splitlines()
    assert len(lines) == 6  # a line a sentence written
    assert lines[-1].startswith(f"book: writing, {total / 48000 / 60:.1f} of ")
    assert lines[-1].endswith("time left about 0 min 00 s")
