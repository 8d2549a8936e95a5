"""The audio formats we write, in one table: what each is called, its media
type, which encoder writes it (libsndfile; PyAV for AAC) and at which rates;
and whole-file encoding, which ``Audio.write`` and buffered HTTP responses
share."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile

from .aac import RATES as AAC_RATES
from .aac import encode_aac
from .empty import completed_empty
from .pcm import to_pcm16

MP3_RATES = (8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000)
OPUS_RATES = (8000, 12000, 16000, 24000, 48000)


@dataclass(frozen=True)
class AudioFormat:
    name: str
    content_type: str
    soundfile: tuple[str, str] | None  # libsndfile's (format, subtype), if it writes it
    takes_pcm16: bool  # the encoder gets 16-bit samples (exact), else float
    rates: tuple[int, ...] | None = None  # None: any rate
    # False: the header states the length (FLAC's STREAMINFO, which libsndfile
    # trusts), so a streamed response carries the file whole at its end.
    streams: bool = True

    def samples_for(self, samples: np.ndarray) -> np.ndarray:
        return to_pcm16(samples) if self.takes_pcm16 else samples


FORMATS = {
    audio_format.name: audio_format
    for audio_format in (
        AudioFormat("pcm", "audio/pcm", None, True),
        AudioFormat("wav", "audio/wav", ("WAV", "PCM_16"), True),
        AudioFormat("flac", "audio/flac", ("FLAC", "PCM_16"), True, streams=False),
        AudioFormat("ogg", "audio/ogg", ("OGG", "VORBIS"), False),
        AudioFormat("opus", "audio/ogg", ("OGG", "OPUS"), False, OPUS_RATES),
        AudioFormat("mp3", "audio/mpeg", ("MP3", "MPEG_LAYER_III"), False, MP3_RATES),
        AudioFormat("aac", "audio/aac", None, False, AAC_RATES),
    )
}

# Where each surface differs from FORMATS, every format a file of speech can
# be (``mlx-speech speak -o``, ``Audio.write``), and why:
# - the speech endpoint takes OpenAI's list: Vorbis (``ogg``) is no OpenAI
#   format, and no client of it asks for one;
RESPONSE_FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")
# - a book is a file a player keeps, with its chapters: m4b (AAC in MP4, the
#   audiobook's own) and the formats that hold chapter marks or a length
#   (``audio.chapters``); a raw stream (``pcm``, ``aac``) has neither, and
#   Vorbis holds nothing Opus does not, smaller.
BOOK_FORMATS = ("m4b", "mp3", "opus", "flac", "wav")


def format_for_path(path: str | Path, name: str | None = None) -> AudioFormat:
    """The format of a file to write: ``name``, else the path's suffix."""
    path = Path(path)
    kind = (name or path.suffix.lstrip(".")).lower()
    if not kind:
        raise ValueError(
            f"cannot tell the audio format of {path.name!r}: its name has no suffix; "
            f"end it with one of {', '.join('.' + known for known in FORMATS)}, or "
            "name the format"
        )
    if kind not in FORMATS:
        raise ValueError(
            f"cannot write {path.name!r}: unknown audio format {kind!r}; "
            f"use one of {', '.join(FORMATS)}"
        )
    return FORMATS[kind]


def encode_whole(samples: np.ndarray, sample_rate: int, name: str) -> bytes:
    """A complete file with exact sizes in its headers; with no samples, the
    format's empty file (``empty_audio``)."""
    audio_format = FORMATS[name]
    channels = 1 if samples.ndim == 1 else samples.shape[1]
    if name == "aac":
        if len(samples):
            return encode_aac(samples, sample_rate)
        return completed_empty(name, b"", sample_rate, channels)  # it writes nothing
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
    if len(samples):
        return buffer.getvalue()
    return completed_empty(name, buffer.getvalue(), sample_rate, channels)
