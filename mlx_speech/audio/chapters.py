"""A whole audiobook as one file with chapter marks, written as its chunks
arrive: a book is hours of audio, so it never sits whole in memory. PyAV
writes m4b (AAC in MP4), mp3, Ogg Opus and FLAC; libsndfile writes wav."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import soundfile

from .formats import BOOK_FORMATS, FORMATS, AudioFormat
from .pictures import PICTURE_FORMATS, Picture, embed_picture
from .resample import StreamingResampler


@dataclass(frozen=True)
class ChapterMark:
    title: str
    start: int  # first sample of the chapter, in the audio's samples at its own rate
    end: int  # one past the last


# PyAV's muxer and encoder for each book format but wav. "ipod" is MP4 with
# iTunes' brands and tags, which audiobook players read.
_PYAV_WRITERS = {
    "m4b": ("ipod", "aac"),
    "mp3": ("mp3", "libmp3lame"),
    "opus": ("ogg", "libopus"),
    "flac": ("flac", "flac"),
}
_MUXER_OPTIONS = {"m4b": {"brand": "M4B "}}  # the audiobook brand, not a song's "M4A "
# Chapters as Vorbis-comment CHAPTERnnn tags, which we write ourselves: FLAC's
# muxer writes no chapters, and Ogg's rounds their seconds to nearest
# (1.5 s is written as 00:00:02.500).
_VORBIS_COMMENT_FORMATS = ("opus", "flac")
# The most chapters a format's marks hold: Vorbis comments number theirs in
# three digits, ID3's table of contents counts its entries in one byte. m4b
# holds every chapter in its QuickTime chapter track (its Nero list, which
# some players read instead, the first 255); wav holds none.
CHAPTER_LIMITS = {"opus": 999, "flac": 999, "mp3": 255}
_SPEECH_BITRATES = {1: 64_000, 2: 96_000}  # plenty for speech in AAC, MP3 and Opus
_LAYOUTS = {1: "mono", 2: "stereo"}
_SFC_RF64_AUTO_DOWNGRADE = 0x1210  # libsndfile's sf_command


def book_media_type(name: str) -> str:
    """A book format's media type (m4b is audio in MP4)."""
    return "audio/mp4" if name == "m4b" else FORMATS[name].content_type


def book_format(path: str | Path, name: str | None = None) -> str:
    """The book format to write: ``name``, else the path's suffix."""
    kind = (name or Path(path).suffix).lstrip(".").lower()
    if kind not in BOOK_FORMATS:
        allowed = ", ".join(f".{known}" for known in BOOK_FORMATS[:-1])
        raise ValueError(
            f"cannot write {name or Path(path).name!r} as a book: a book is written as "
            f"{allowed} or .{BOOK_FORMATS[-1]}"
        )
    return kind


def check_chapter_count(name: str, chapters: int) -> None:
    """``ValueError`` where book format ``name`` cannot mark that many."""
    limit = CHAPTER_LIMITS.get(name)
    if limit is not None and chapters > limit:
        raise ValueError(
            f"a book of {chapters} chapters cannot be written as .{name}, which marks "
            f"{limit} at most: write it as .m4b, which marks them all"
        )


def write_book_audio(
    path: Path,
    chunks: Iterable[np.ndarray],
    sample_rate: int,
    channels: int,
    marks: Sequence[ChapterMark],
    *,
    title: str | None = None,
    author: str | None = None,
    format: str | None = None,
    narrator: str | None = None,
    details: Sequence[tuple[str, str]] = (),
    picture: Picture | None = None,
) -> None:
    """Encode to ``path`` (which the caller later renames into place): chapter
    marks with their titles and the book's title/author as metadata wherever
    the format holds them.

    ``chunks``: float32, ``[n]`` mono or ``[n, channels]``, in order, as many
    samples as ``marks[-1].end``. ``marks``: contiguous from sample 0, in
    order; none for a book without chapters. ``format``: one of
    ``BOOK_FORMATS``, else the path's suffix.

    Tags: the title also as album, the author as artist, ``narrator`` as
    composer (where Audiobookshelf looks for it), ``details`` (language,
    publisher, date, description) under their own names, genre "Audiobook";
    each format keeps those it holds. ``picture``: the front cover, where
    the format holds one (``pictures``).

    Chapters: m4b holds them as a QuickTime chapter track and a Nero ``chpl``
    atom, mp3 as ID3v2 CHAP/CTOC frames, opus and flac as CHAPTERnnn /
    CHAPTERnnnNAME Vorbis comments (to the millisecond, the start rounded
    down); wav holds none. Title and author: the title also as album, the
    author as artist (MP4 and ID3 tags, Vorbis comments, WAV's LIST INFO).
    m4b, mp3 and opus are encoded at ``sample_rate`` where they take it, else
    resampled to the next rate up they take; flac and wav hold 16-bit samples
    from ``to_pcm16``.
    """
    name = book_format(path, format)
    if channels not in _LAYOUTS:
        raise ValueError(f"a book is mono or stereo, not {channels} channels")
    _check_marks(marks)
    check_chapter_count(name, len(marks))
    chunks = iter(chunks)
    # Found before a file is made, so that no audio leaves no file.
    first = next((chunk for chunk in chunks if len(chunk)), None)
    if first is None:
        raise ValueError("no audio to write")
    audio = _book_audio(itertools.chain([first], chunks), channels, marks)
    tags = _tags(title, author, narrator, details)
    if name == "wav":
        _write_wav(path, audio, sample_rate, channels, tags)
    else:
        _write_with_pyav(path, name, audio, sample_rate, channels, marks, tags)
    if picture is not None and name in PICTURE_FORMATS:
        embed_picture(path, name, picture)


def _check_marks(marks: Sequence[ChapterMark]) -> None:
    start = 0
    for mark in marks:
        if mark.start != start or mark.end <= mark.start:
            raise ValueError(
                f"chapter {mark.title!r} spans samples {mark.start} to {mark.end}; "
                "chapters follow one another from sample 0, each with audio"
            )
        start = mark.end


def _book_audio(
    chunks: Iterable[np.ndarray], channels: int, marks: Sequence[ChapterMark]
) -> Iterator[np.ndarray]:
    """The chunks as float32 ``[n, channels]``, checked against ``channels``
    and, at their end, against where the marks end."""
    total = 0
    for chunk in chunks:
        samples = np.asarray(chunk, dtype=np.float32)
        if samples.ndim == 1:
            samples = samples[:, None]
        if samples.ndim != 2 or samples.shape[1] != channels:
            raise ValueError(f"a chunk shaped {np.shape(chunk)} is not {channels}-channel")
        total += len(samples)
        yield samples
    if marks and total != marks[-1].end:
        raise ValueError(
            f"the chapters end at sample {marks[-1].end}, the audio at {total}"
        )


def _tags(
    title: str | None,
    author: str | None,
    narrator: str | None,
    details: Sequence[tuple[str, str]],
) -> dict[str, str]:
    """Title also as album, where players of books and music look for it."""
    tags = {"genre": "Audiobook", **dict(details)}
    if title:
        tags["title"] = tags["album"] = title
    if author:
        tags["artist"] = author
    if narrator:
        tags["composer"] = narrator
    return tags


def _write_wav(
    path: Path,
    audio: Iterable[np.ndarray],
    sample_rate: int,
    channels: int,
    tags: dict[str, str],
) -> None:
    """PCM16 WAV, which holds no chapters. RF64, written as plain WAV while
    under 4 GiB (libsndfile's auto-downgrade): hours of stereo pass 4 GiB,
    where WAV's 32-bit sizes end."""
    wav = FORMATS["wav"]
    with soundfile.SoundFile(
        path, "w", sample_rate, channels, format="RF64", subtype=wav.soundfile[1]
    ) as file:
        downgrade = soundfile._ffi.new("int*", 1)
        soundfile._snd.sf_command(
            file._file, _SFC_RF64_AUTO_DOWNGRADE, downgrade, soundfile._ffi.sizeof("int")
        )
        for key, value in tags.items():
            if key in soundfile._str_types:  # what LIST INFO holds: INAM, IART...
                setattr(file, key, value)
        for samples in audio:
            file.write(wav.samples_for(samples))


def _write_with_pyav(
    path: Path,
    name: str,
    audio: Iterable[np.ndarray],
    sample_rate: int,
    channels: int,
    marks: Sequence[ChapterMark],
    tags: dict[str, str],
) -> None:
    """m4b, mp3, opus or flac, encoded by PyAV as the audio arrives."""
    muxer, codec = _PYAV_WRITERS[name]
    audio_format = FORMATS["aac" if name == "m4b" else name]
    rate = _encoder_rate(audio_format, sample_rate)
    layout = _LAYOUTS[channels]
    options = _MUXER_OPTIONS.get(name, {})
    with av.open(str(path), "w", format=muxer, options=options) as container:
        stream = container.add_stream(codec, rate=rate, layout=layout)
        if codec != "flac":
            stream.bit_rate = _SPEECH_BITRATES[channels]
        if codec == "libopus":
            stream.format = "flt"  # not its default s16: one float → int16 is to_pcm16
        container.metadata.update(tags)
        _add_chapters(container, name, marks, sample_rate)  # before the header holds them
        frame_format = "s16" if audio_format.takes_pcm16 else "flt"
        written = 0
        # PyAV's encode() cuts what it gets into the encoder's frames (1024
        # samples of AAC, 960 of Opus at 48 kHz...), keeping a partial one
        # for the next chunk and encoding it in the flush, encode(None).
        for samples in _resampled(audio, sample_rate, rate):
            frame = av.AudioFrame.from_ndarray(
                audio_format.samples_for(samples).reshape(1, -1),
                format=frame_format,
                layout=layout,
            )
            frame.sample_rate, frame.time_base = rate, Fraction(1, rate)
            frame.pts = written  # without it, MP4's edit list keeps AAC's priming
            written += len(samples)
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))


def _encoder_rate(audio_format: AudioFormat, sample_rate: int) -> int:
    """``sample_rate`` where the encoder takes it, else the next rate up it
    takes (or its highest)."""
    rates = audio_format.rates
    if rates is None or sample_rate in rates:
        return sample_rate
    return min((rate for rate in rates if rate > sample_rate), default=max(rates))


def _resampled(
    audio: Iterable[np.ndarray], rate_in: int, rate_out: int
) -> Iterator[np.ndarray]:
    resampler = StreamingResampler(rate_in, rate_out)  # passes through at one rate
    for samples in audio:
        resampled = resampler.process(samples)
        if len(resampled):
            yield resampled
    tail = resampler.flush()
    if len(tail):
        yield tail


def _add_chapters(
    container: av.container.OutputContainer,
    name: str,
    marks: Sequence[ChapterMark],
    sample_rate: int,
) -> None:
    """Chapter times stay in the input's samples (time base 1/sample_rate),
    exact whatever rate the encoder runs at; the muxer converts them once."""
    if name in _VORBIS_COMMENT_FORMATS:
        container.metadata.update(_vorbis_chapter_tags(marks, sample_rate))
        return
    container.set_chapters(
        [
            {
                "id": number,
                "start": mark.start,
                "end": mark.end,
                "time_base": Fraction(1, sample_rate),
                "metadata": {"title": mark.title},
            }
            for number, mark in enumerate(marks, start=1)
        ]
    )


def _vorbis_chapter_tags(marks: Sequence[ChapterMark], sample_rate: int) -> dict[str, str]:
    """CHAPTER001=HH:MM:SS.mmm and CHAPTER001NAME=title, per Xiph's chapter
    extension: starts only, each chapter ending where the next begins."""
    tags = {}
    for number, mark in enumerate(marks, start=1):
        milliseconds = mark.start * 1000 // sample_rate
        hours, rest = divmod(milliseconds, 3_600_000)
        minutes, rest = divmod(rest, 60_000)
        seconds, milliseconds = divmod(rest, 1000)
        key = f"CHAPTER{number:03d}"
        tags[key] = f"{hours:02d}:{minutes:02d}:{seconds:02d}.{milliseconds:03d}"
        tags[f"{key}NAME"] = mark.title
    return tags
