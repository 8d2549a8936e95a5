"""Audio containers, encoded incrementally as chunks arrive (libsndfile, no ffmpeg)."""

from __future__ import annotations

import io
import struct

import numpy as np
import soundfile

from ..pcm import to_pcm16

CONTENT_TYPES = {
    "wav": "audio/wav",
    "pcm": "audio/pcm",
    "flac": "audio/flac",
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
}
# format → (libsndfile format, subtype, takes PCM16 input)
_SOUNDFILE = {
    "wav": ("WAV", "PCM_16", True),
    "flac": ("FLAC", "PCM_16", True),
    "mp3": ("MP3", "MPEG_LAYER_III", False),
    "opus": ("OGG", "OPUS", False),
}
OPUS_RATES = (8000, 12000, 16000, 24000, 48000)
MP3_RATES = (8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000)

_SFC_SET_BITRATE_MODE = 0x1305
_SF_BITRATE_MODE_CONSTANT = 0
_UNKNOWN_SIZE = 0xFFFFFFFF


def unsupported_rate(response_format: str, sample_rate: int) -> tuple[int, ...] | None:
    """The rates the container allows, when ``sample_rate`` is not one of them."""
    allowed = {"opus": OPUS_RATES, "mp3": MP3_RATES}.get(response_format)
    return allowed if allowed and sample_rate not in allowed else None


def _input(response_format: str, samples: np.ndarray) -> np.ndarray:
    return to_pcm16(samples) if _SOUNDFILE[response_format][2] else samples


def encode_whole(samples: np.ndarray, sample_rate: int, response_format: str) -> bytes:
    """A complete file with exact sizes in its headers."""
    if response_format == "pcm":
        return to_pcm16(samples).tobytes()
    container, subtype, _ = _SOUNDFILE[response_format]
    buffer = io.BytesIO()
    soundfile.write(
        buffer,
        _input(response_format, samples),
        sample_rate,
        format=container,
        subtype=subtype,
    )
    return buffer.getvalue()


def streaming_wav_header(sample_rate: int) -> bytes:
    """A PCM16 mono WAV header whose sizes say "unknown, read to the end"."""
    fmt = struct.pack("<HHIIHH", 1, 1, sample_rate, 2 * sample_rate, 2, 16)
    return (
        b"RIFF"
        + struct.pack("<I", _UNKNOWN_SIZE)
        + b"WAVEfmt "
        + struct.pack("<I", len(fmt))
        + fmt
        + b"data"
        + struct.pack("<I", _UNKNOWN_SIZE)
    )


class _ForwardSink:
    """A write-only file for libsndfile that hands out bytes as they are written.

    libsndfile seeks back to patch headers when it closes; bytes already sent
    cannot change, so those patches are dropped (the stream then carries the
    "unknown length" values written at the start).
    """

    def __init__(self):
        self._buffer = bytearray()
        self._position = 0
        self._sent = 0

    def write(self, data) -> int:
        data = bytes(data)
        end = self._position + len(data)
        if end > len(self._buffer):
            self._buffer.extend(bytes(end - len(self._buffer)))
        self._buffer[self._position : end] = data
        self._position = end
        return len(data)

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._position, 2: len(self._buffer)}[whence]
        self._position = base + offset
        return self._position

    def tell(self) -> int:
        return self._position

    def read(self, size: int = -1) -> bytes:
        return b""

    def take(self) -> bytes:
        fresh = bytes(self._buffer[self._sent :])
        self._sent = len(self._buffer)
        return fresh


class StreamEncoder:
    """``start()``, then ``encode(chunk)`` per chunk, then ``finish()``: the
    returned bytes, concatenated, are one continuous file."""

    def __init__(self, response_format: str, sample_rate: int):
        self.response_format = response_format
        self.sample_rate = sample_rate
        self._file: soundfile.SoundFile | None = None
        self._sink = _ForwardSink()
        if response_format in ("flac", "mp3", "opus"):
            container, subtype, _ = _SOUNDFILE[response_format]
            self._file = soundfile.SoundFile(
                self._sink, "w", sample_rate, 1, format=container, subtype=subtype
            )
            if response_format == "mp3":
                self._constant_bitrate()

    def _constant_bitrate(self) -> None:
        # Streamed MP3 cannot get its VBR header patched; with a constant
        # bitrate, decoders compute the right length from the size.
        mode = soundfile._ffi.new("int*", _SF_BITRATE_MODE_CONSTANT)
        soundfile._snd.sf_command(
            self._file._file, _SFC_SET_BITRATE_MODE, mode, soundfile._ffi.sizeof("int")
        )

    def start(self) -> bytes:
        if self.response_format == "wav":
            return streaming_wav_header(self.sample_rate)
        return self._sink.take()

    def encode(self, samples: np.ndarray) -> bytes:
        if self._file is None:
            return to_pcm16(samples).tobytes()
        if len(samples):
            self._file.write(_input(self.response_format, samples))
        return self._sink.take()

    def finish(self) -> bytes:
        if self._file is None:
            return b""
        self._file.close()
        return self._sink.take()
