"""Audio containers, encoded incrementally as chunks arrive (libsndfile; PyAV for AAC)."""

from __future__ import annotations

import struct

import numpy as np
import soundfile

from .aac import AacEncoder
from .empty import completed_empty
from .formats import FORMATS, encode_whole
from .pcm import to_pcm16

_SFC_SET_BITRATE_MODE = 0x1305
_SF_BITRATE_MODE_CONSTANT = 0
_UNKNOWN_SIZE = 0xFFFFFFFF


def streaming_wav_header(sample_rate: int, channels: int = 1) -> bytes:
    """A PCM16 WAV header whose sizes say "unknown, read to the end"."""
    frame_bytes = 2 * channels
    fmt = struct.pack(
        "<HHIIHH", 1, channels, sample_rate, frame_bytes * sample_rate, frame_bytes, 16
    )
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

    def written(self) -> bytes:
        return bytes(self._buffer)

    def take(self) -> bytes:
        fresh = bytes(self._buffer[self._sent :])
        self._sent = len(self._buffer)
        return fresh


class StreamEncoder:
    """``start()``, then ``encode(chunk)`` per chunk, then ``finish()``: the
    returned bytes, concatenated, are one continuous file. A format that
    cannot stream (``AudioFormat.streams``) comes whole from ``finish()``."""

    def __init__(self, response_format: str, sample_rate: int, channels: int = 1):
        self.response_format = response_format
        self.sample_rate = sample_rate
        self.channels = channels
        self._format = FORMATS[response_format]
        self._file: soundfile.SoundFile | None = None
        self._aac: AacEncoder | None = None
        self._held: list[np.ndarray] = []
        self._any_samples = False
        self._sink = _ForwardSink()
        if response_format == "aac":
            self._aac = AacEncoder(sample_rate, channels)
        elif self._format.streams and self._format.soundfile and response_format != "wav":
            container, subtype = self._format.soundfile
            self._file = soundfile.SoundFile(
                self._sink, "w", sample_rate, channels, format=container, subtype=subtype
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
            return streaming_wav_header(self.sample_rate, self.channels)
        return self._sink.take()

    def encode(self, samples: np.ndarray) -> bytes:
        if not self._format.streams:
            self._held.append(samples)
            return b""
        if self._aac is not None:
            self._any_samples |= bool(len(samples))
            return self._aac.encode(samples)
        if self._file is None:
            return to_pcm16(samples).tobytes()
        if len(samples):
            self._file.write(self._format.samples_for(samples))
            self._any_samples = True
        return self._sink.take()

    def finish(self) -> bytes:
        if not self._format.streams:
            held = (
                np.concatenate(self._held)
                if self._held
                else np.zeros((0, self.channels) if self.channels > 1 else 0, np.float32)
            )
            return encode_whole(held, self.sample_rate, self.response_format)
        if self._aac is not None:
            rest = self._aac.finish()
            if self._any_samples:
                return rest
            return completed_empty("aac", b"", self.sample_rate, self.channels)
        if self._file is None:
            return b""
        self._file.close()
        rest = self._sink.take()
        if self._any_samples:
            return rest
        written = self._sink.written()
        whole = completed_empty(
            self.response_format, written, self.sample_rate, self.channels
        )
        return rest + whole[len(written) :]
