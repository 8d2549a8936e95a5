"""AAC in ADTS frames, encoded incrementally with PyAV (FFmpeg's native AAC
encoder, bundled in PyAV's wheels). ADTS has no file header, so the bytes
of each call can be sent as soon as they exist."""

from __future__ import annotations

import av
import numpy as np

# Speech, per channel: FFmpeg's encoder is transparent enough at these rates.
LOW_RATE_BITRATE, HIGH_RATE_BITRATE = 64_000, 96_000
RATES = (8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000)
FRAME_SAMPLES = 1024  # per channel, in each ADTS frame of AAC-LC


class _Collected:
    """A write-only file for the muxer; ``take()`` hands out what was written."""

    def __init__(self):
        self._pending = bytearray()

    def write(self, data) -> int:
        self._pending += data
        return len(data)

    def take(self) -> bytes:
        taken = bytes(self._pending)
        self._pending.clear()
        return taken


class AacEncoder:
    """``encode(samples)`` per chunk, then ``finish()``; the bytes returned,
    concatenated, are one ADTS stream."""

    def __init__(self, sample_rate: int, channels: int = 1):
        self._sink = _Collected()
        self._container = av.open(self._sink, "w", format="adts")
        self._layout = "mono" if channels == 1 else "stereo"
        self._stream = self._container.add_stream(
            "aac", rate=sample_rate, layout=self._layout
        )
        low = sample_rate <= 24000
        self._stream.bit_rate = (LOW_RATE_BITRATE if low else HIGH_RATE_BITRATE) * channels
        self._sample_rate = sample_rate

    def encode(self, samples: np.ndarray) -> bytes:
        """``samples``: ``[samples]`` or ``[samples, channels]``."""
        if len(samples):
            interleaved = np.ascontiguousarray(samples, dtype=np.float32).reshape(1, -1)
            frame = av.AudioFrame.from_ndarray(
                interleaved, format="flt", layout=self._layout
            )
            frame.sample_rate = self._sample_rate
            self._mux(frame)
        return self._sink.take()

    def finish(self) -> bytes:
        self._mux(None)
        self._container.close()
        return self._sink.take()

    def _mux(self, frame: av.AudioFrame | None) -> None:
        for packet in self._stream.encode(frame):
            self._container.mux(packet)


def encode_aac(samples: np.ndarray, sample_rate: int) -> bytes:
    encoder = AacEncoder(sample_rate, 1 if samples.ndim == 1 else samples.shape[1])
    return encoder.encode(samples) + encoder.finish()


def silent_adts_frame(sample_rate: int, channels: int) -> bytes:
    """One ADTS frame of silence, the encoder's first for silent input:
    ``FRAME_SAMPLES`` samples, the least AAC there is."""
    shape = (FRAME_SAMPLES, channels) if channels > 1 else (FRAME_SAMPLES,)
    encoder = AacEncoder(sample_rate, channels)
    stream = encoder.encode(np.zeros(shape, np.float32)) + encoder.finish()
    # ADTS header bytes 3-5 hold the frame's length, header included: 13 bits
    length = (stream[3] & 0b11) << 11 | stream[4] << 3 | stream[5] >> 5
    return stream[:length]
