"""The audio formats we write, in one table: what each is called, its media
type, how libsndfile writes it and at which rates; and whole-file encoding,
which ``Audio.write`` and buffered HTTP responses share."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile

from .pcm import to_pcm16


@dataclass(frozen=True)
class AudioFormat:
    name: str
    content_type: str
    soundfile: tuple[str, str] | None  # (format, subtype); None: headerless PCM16
    takes_pcm16: bool  # libsndfile gets 16-bit samples (exact), else float
    rates: tuple[int, ...] | None = None  # None: any rate

    def samples_for(self, samples: np.ndarray) -> np.ndarray:
        return to_pcm16(samples) if self.takes_pcm16 else samples


FORMATS = {
    audio_format.name: audio_format
    for audio_format in (
        AudioFormat("pcm", "audio/pcm", None, True),
        AudioFormat("wav", "audio/wav", ("WAV", "PCM_16"), True),
        AudioFormat("flac", "audio/flac", ("FLAC", "PCM_16"), True),
        AudioFormat("ogg", "audio/ogg", ("OGG", "VORBIS"), False),
        AudioFormat(
            "opus", "audio/ogg", ("OGG", "OPUS"), False, (8000, 12000, 16000, 24000, 48000)
        ),
        AudioFormat(
            "mp3",
            "audio/mpeg",
            ("MP3", "MPEG_LAYER_III"),
            False,
            (8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000),
        ),
    )
}


def format_for_path(path: str | Path, name: str | None = None) -> AudioFormat:
    """The format of a file to write: ``name``, else the path's suffix."""
    path = Path(path)
    kind = (name or path.suffix.lstrip(".")).lower()
    if kind not in FORMATS:
        raise ValueError(
            f"cannot write {path.name!r}: unknown audio format {kind!r}; "
            f"use one of {', '.join(FORMATS)}"
        )
    return FORMATS[kind]


def encode_whole(samples: np.ndarray, sample_rate: int, name: str) -> bytes:
    """A complete file with exact sizes in its headers."""
    audio_format = FORMATS[name]
    if audio_format.soundfile is None:
        return to_pcm16(samples).tobytes()
    container, subtype = audio_format.soundfile
    buffer = io.BytesIO()
    soundfile.write(
        buffer,
        audio_format.samples_for(samples),
        sample_rate,
        format=container,
        subtype=subtype,
    )
    return buffer.getvalue()
