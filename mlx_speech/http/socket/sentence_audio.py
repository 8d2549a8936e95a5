"""One segment's audio as a session sends it."""

from __future__ import annotations

import numpy as np

from ...audio.formats import encode_whole
from ...audio.pcm import to_pcm16
from ...audio.resample import StreamingResampler
from .config import SocketConfig


class SentenceAudio:
    """One segment's audio as the socket sends it: PCM chunks as they come
    (``stream_audio``), else one whole file at the segment's end; ``samples``
    counts it at the output rate."""

    def __init__(self, config: SocketConfig, native_rate: int):
        request = config.request
        self.rate = request.sample_rate or native_rate
        self._format = request.response_format
        self._progressive = config.stream_audio
        self._resampler = StreamingResampler(native_rate, self.rate)
        self._held: list[np.ndarray] = []
        self.samples = 0

    def add(self, samples: np.ndarray) -> bytes:
        return self.add_resampled(self._resampler.process(samples))

    def add_resampled(self, resampled: np.ndarray) -> bytes:
        self.samples += len(resampled)
        if self._progressive:
            return to_pcm16(resampled).tobytes()
        self._held.append(resampled)
        return b""

    def seam(self) -> bytes:
        """A part of the segment ended (a pause begins or ends): the
        resampler starts afresh, so the pause stays exact silence."""
        return self.add_resampled(self._resampler.restart())

    def finish(self) -> bytes:
        data = self.add_resampled(self._resampler.flush())
        if self._progressive:
            return data
        return encode_whole(np.concatenate(self._held), self.rate, self._format)
