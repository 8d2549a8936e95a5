"""An audiobook's level: each chapter brought to a target integrated
loudness (EBU R128), its true peak under -1 dBTP, measured on the written
file by ffmpeg's own ebur128 filter."""

from __future__ import annotations

import re
import subprocess

import pytest

from mlx_speech.book.source import read_book
from mlx_speech.book.speech import BookSpeech, speak_book
from mlx_speech.book.store import SpokenStore
from mlx_speech.request import SpeechRequest

SPOKEN = {"max_new_tokens": 80, "seed": 5}  # 1.6 s a sentence: R128 gates 400 ms blocks
BOOK = "".join(
    f"# Part {part}\n\n" + " ".join(f"Sentence {part}-{n} here." for n in range(3)) + "\n\n"
    for part in range(2)
)


def _r128(
    path, start: float | None = None, end: float | None = None
) -> tuple[float, float]:
    """ffmpeg's integrated loudness (LUFS) and true peak (dBTP) of ``path``,
    or of its part from ``start`` to ``end`` seconds."""
    trim = f"atrim={start}:{end}," if start is not None else ""
    command = ["ffmpeg", "-nostats", "-i", str(path), "-af", f"{trim}ebur128=peak=true"]
    done = subprocess.run([*command, "-f", "null", "-"], capture_output=True, text=True)
    summary = done.stderr[done.stderr.rindex("Summary:") :]
    integrated = float(re.search(r"I:\s+(-?[\d.]+) LUFS", summary).group(1))
    peak = float(re.search(r"Peak:\s+(-?[\d.]+|-inf) dBFS", summary).group(1))
    return integrated, peak


@pytest.fixture(scope="module")
def book(speaking_tts, tmp_path_factory):
    path = tmp_path_factory.mktemp("loud") / "two.md"
    path.write_text(BOOK)
    return speak_book(speaking_tts, path, **SPOKEN)


@pytest.mark.parametrize("target", [-18.0, -23.0])
def test_each_chapter_is_brought_to_the_target(book, tmp_path, target):
    path = book.write(tmp_path / "two.flac", loudness=target)
    start = 0.0
    for chapter in book.chapters:
        end = start + chapter.audio.duration
        integrated, peak = _r128(path, start, end)
        assert abs(integrated - target) <= 1.0
        assert peak <= -1.0 + 0.05  # 16-bit samples
        start = end


def test_off_leaves_the_book_as_spoken(book, tmp_path):
    loud, _ = _r128(book.write(tmp_path / "as-spoken.flac", loudness=None))
    levelled, _ = _r128(book.write(tmp_path / "levelled.flac"))
    assert abs(levelled + 18.0) <= 1.0
    assert abs(loud - levelled) > 3.0  # the tiny checkpoint speaks far louder


def test_the_command_and_jobs_level_each_chapter_too(speaking_tts, tmp_path):
    """``BookSpeech.write``, which the command and the jobs write through."""
    source = tmp_path / "two.md"
    source.write_text(BOOK)
    speech = BookSpeech(speaking_tts, read_book(source), SpeechRequest.of("", **SPOKEN))
    with SpokenStore(tmp_path / "kept") as store:
        speech.speak(store)
        speech.write(store, tmp_path / "two.flac")
        speech.write_chapters(store, tmp_path / "chapters", ".flac")
        marks = [m for m in speech.captions(store) if m.text.startswith("Part")]
        ends = [*[m.start_seconds for m in marks[1:]], None]
    for mark, end in zip(marks, ends, strict=True):
        integrated, peak = _r128(tmp_path / "two.flac", mark.start_seconds, end or 1e9)
        assert abs(integrated + 18.0) <= 1.0 and peak <= -0.95
    for chapter in sorted((tmp_path / "chapters").iterdir()):  # the chapter files too
        integrated, peak = _r128(chapter)
        assert abs(integrated + 18.0) <= 1.0 and peak <= -0.95
