"""A book's audio as one file with chapters, read back by ffprobe and PyAV."""

from __future__ import annotations

import shutil
from pathlib import Path

import av
import numpy as np
import pytest

from mlx_speech.audio.chapters import (
    ChapterMark,
    _vorbis_chapter_tags,
    book_format,
    write_book_audio,
)
from mlx_speech.audio.pcm import to_pcm16
from tests.tts.support.probe import probed

if shutil.which("ffprobe") is None:
    pytest.skip("ffprobe reads the chapters back", allow_module_level=True)

CHAPTERS = (("One", 1.0, 220.0), ("Ch. 2 — Überfahrt", 0.5, 330.0), ("Three", 1.5, 440.0))
TITLE, AUTHOR = "Die Reise — ein Hörbuch", "Jörg Beispiel"
CHUNK_SIZES = (1000, 4801, 17)
# How far a chapter's end may move to where the audio ends: a frame of AAC at
# 48 kHz (Opus's are 20 ms).
TOLERANCE_S = 1024 / 48000


def _book(rate: int, channels: int) -> tuple[np.ndarray, list[ChapterMark]]:
    """Each chapter a tone of its own (stereo: a fifth higher on the right)."""
    tones, marks, start = [], [], 0
    for title, seconds, frequency in CHAPTERS:
        count = round(seconds * rate)
        time = np.arange(count) / rate
        tone = [0.5 * np.sin(2 * np.pi * frequency * ratio * time) for ratio in (1, 1.5)]
        tones.append(np.stack(tone[:channels], axis=1) if channels == 2 else tone[0])
        marks.append(ChapterMark(title, start, start + count))
        start += count
    return np.concatenate(tones).astype(np.float32), marks


def _chunks(samples: np.ndarray):
    """In irregular pieces, with an empty one among them."""
    start, index = 0, 0
    while start < len(samples):
        size = CHUNK_SIZES[index % len(CHUNK_SIZES)]
        yield samples[start : start + size]
        if index == 1:
            yield samples[:0]
        start, index = start + size, index + 1


def _written(tmp_path: Path, name: str, rate: int, channels: int = 1, chapters=True):
    samples, marks = _book(rate, channels)
    path = tmp_path / f"book.{name}"
    write_book_audio(
        path,
        _chunks(samples),
        rate,
        channels,
        marks if chapters else [],
        title=TITLE,
        author=AUTHOR,
    )
    return path, samples, marks


def _decoded(path: Path) -> tuple[np.ndarray, int]:
    """``[samples, channels]`` and the rate, as the decoder gives them."""
    with av.open(str(path)) as container:
        stream = container.streams.audio[0]
        pieces = []
        for frame in container.decode(stream):
            array = frame.to_ndarray()
            planar = frame.format.is_planar
            pieces.append(array.T if planar else array.reshape(-1, stream.channels))
        return np.concatenate(pieces), stream.rate


def _tags(probe: dict, name: str) -> dict:
    # Ogg keeps its comments with the stream, and ffprobe shows them there.
    return probe["streams"][0]["tags"] if name == "opus" else probe["format"]["tags"]


CASES = [
    ("m4b", 48000, 1),
    ("mp3", 48000, 1),
    ("opus", 48000, 1),
    ("flac", 48000, 1),
    ("m4b", 48000, 2),
    ("m4b", 24000, 1),
    ("mp3", 24000, 1),
    ("opus", 24000, 1),
    ("opus", 44100, 1),  # resampled: Opus takes 48 kHz, not 44.1
    ("m4b", 96000, 2),  # resampled: AAC takes up to 48 kHz
]


@pytest.mark.parametrize(("name", "rate", "channels"), CASES)
def test_chapters_titles_and_tags_read_back(tmp_path, name, rate, channels):
    path, samples, marks = _written(tmp_path, name, rate, channels)
    probe = probed(path)
    chapters = probe["chapters"]
    assert [chapter["tags"]["title"] for chapter in chapters] == [m.title for m in marks]
    for chapter, mark in zip(chapters, marks, strict=True):
        assert float(chapter["start_time"]) == pytest.approx(mark.start / rate, abs=0.001)
        assert float(chapter["end_time"]) == pytest.approx(mark.end / rate, abs=TOLERANCE_S)
    tags = _tags(probe, name)
    assert (tags["title"], tags["artist"], tags["album"]) == (TITLE, AUTHOR, TITLE)
    decoded, decoded_rate = _decoded(path)
    assert decoded.shape[1] == channels
    assert len(decoded) / decoded_rate == pytest.approx(len(samples) / rate, abs=0.05)


def test_m4b_is_an_audiobook_and_resamples_to_a_rate_aac_takes(tmp_path):
    path, _, _ = _written(tmp_path, "m4b", 96000, 2)
    probe = probed(path)
    assert probe["format"]["tags"]["major_brand"] == "M4B "
    assert probe["streams"][0]["codec_name"] == "aac"
    assert probe["streams"][0]["sample_rate"] == "48000"


@pytest.mark.parametrize("name", ["flac", "wav"])
@pytest.mark.parametrize("channels", [1, 2])
def test_lossless_books_hold_the_pcm16_samples_exactly(tmp_path, name, channels):
    path, samples, _ = _written(tmp_path, name, 48000, channels)
    decoded, rate = _decoded(path)
    assert rate == 48000
    np.testing.assert_array_equal(decoded, to_pcm16(samples).reshape(len(samples), -1))


def test_wav_holds_no_chapters_but_the_title_and_author(tmp_path):
    path, _, _ = _written(tmp_path, "wav", 48000)
    probe = probed(path)
    assert probe["chapters"] == []
    assert path.read_bytes()[:4] == b"RIFF"  # RF64 only past 4 GiB
    tags = probe["format"]["tags"]
    assert (tags["title"], tags["artist"]) == (TITLE, AUTHOR)


@pytest.mark.parametrize("name", ["m4b", "mp3", "opus", "flac"])
def test_no_marks_no_chapters(tmp_path, name):
    path, _, _ = _written(tmp_path, name, 48000, chapters=False)
    assert probed(path)["chapters"] == []


def test_vorbis_chapter_times_count_hours_and_round_down():
    start = 48000 * 3723 + 21899  # 1 h 2 min 3.456 s and 11 samples
    marks = [ChapterMark("A", 0, start), ChapterMark("B", start, start + 1)]
    tags = _vorbis_chapter_tags(marks, 48000)
    assert tags == {
        "CHAPTER001": "00:00:00.000",
        "CHAPTER001NAME": "A",
        "CHAPTER002": "01:02:03.456",
        "CHAPTER002NAME": "B",
    }


@pytest.mark.parametrize("suffix", [".aac", ".pcm", ".ogg", ""])
def test_only_book_formats_are_written(suffix):
    with pytest.raises(ValueError, match=r"\.m4b, \.mp3, \.opus, \.flac or \.wav$"):
        book_format(Path(f"book{suffix}"))


def test_a_book_format_from_its_suffix_or_its_name():
    assert book_format(Path("Book.M4B")) == "m4b"
    assert book_format(Path("book.m4b.part"), "opus") == "opus"
    with pytest.raises(ValueError, match="'aac' as a book"):
        book_format(Path("book.m4b"), "aac")


@pytest.mark.parametrize("chunks", [[], [np.zeros(0, np.float32)] * 3])
def test_no_audio_is_refused_before_a_file_is_made(tmp_path, chunks):
    path = tmp_path / "book.m4b"
    with pytest.raises(ValueError, match="^no audio to write$"):
        write_book_audio(path, chunks, 48000, 1, [])
    assert not path.exists()


def test_marks_must_cover_the_audio_contiguously(tmp_path):
    samples, marks = _book(48000, 1)
    gap = [marks[0], ChapterMark("Later", marks[1].start + 1, marks[1].end)]
    with pytest.raises(ValueError, match="'Later' spans samples"):
        write_book_audio(tmp_path / "book.mp3", [samples], 48000, 1, gap)
    with pytest.raises(ValueError, match="the chapters end at sample"):
        write_book_audio(tmp_path / "book.mp3", [samples], 48000, 1, marks[:2])


def test_chunks_must_have_the_books_channels(tmp_path):
    samples, marks = _book(48000, 1)
    with pytest.raises(ValueError, match="is not 2-channel"):
        write_book_audio(tmp_path / "book.flac", [samples], 48000, 2, marks)
