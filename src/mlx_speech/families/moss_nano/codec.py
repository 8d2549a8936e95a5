"""Codec side of the Nano family: frames of codes → mono float PCM, streamed."""

from __future__ import annotations

import math
import time

import mlx.core as mx
import numpy as np
from mlx_audio.codec import MossAudioTokenizer

from ...errors import GenerationError


def samples_per_frame(codec: MossAudioTokenizer) -> int:
    """Output samples per channel for one frame, from the decoder's stages."""
    upsampling = math.prod(stage.downsample_ratio for stage in codec.decoder)
    interleaved = codec.channels if codec.enable_channel_interleave else 1
    return upsampling // interleaved


class StreamingAudioDecoder:
    """One request's codec state across all its segments."""

    def __init__(self, codec: MossAudioTokenizer, n_vq: int):
        self._decoder = codec.make_streaming_decoder(num_quantizers=n_vq)

    def decode(self, frames: list[mx.array]) -> np.ndarray:
        """Decode frames that follow the previous call's → mono float32 samples."""
        audio = self._decoder.decode_frames(mx.stack(frames))
        samples = np.asarray(audio, dtype=np.float32).mean(axis=1, dtype=np.float32)
        if not np.isfinite(samples).all():
            raise GenerationError(
                "the codec produced non-finite audio; the checkpoint may be corrupt"
            )
        return samples


class ChunkSchedule:
    """How many frames to gather before decoding the next chunk.

    The first chunk is one frame, so audio starts as early as possible. Each
    later chunk may double: while the audio already delivered is ahead of real
    time, only as far as that lead covers the time the chunk takes to
    generate; once generation falls behind real time, pauses in playback are
    unavoidable and larger chunks keep them fewer by cutting per-chunk decode
    overhead.
    """

    def __init__(self, frame_seconds: float, max_frames: int = 16):
        self._frame_seconds = frame_seconds
        self._max_frames = max_frames
        self._first_chunk_at: float | None = None
        self._last_frame_at: float | None = None
        self._last_chunk = 0
        self._delivered_seconds = 0.0
        self._seconds_per_frame = 0.0

    def frame_done(self) -> None:
        now = time.perf_counter()
        if self._last_frame_at is not None:
            spent = now - self._last_frame_at
            if self._seconds_per_frame == 0.0:
                self._seconds_per_frame = spent
            else:  # smoothed, so one slow frame does not shrink every later chunk
                self._seconds_per_frame = 0.7 * self._seconds_per_frame + 0.3 * spent
        self._last_frame_at = now

    def chunk_done(self, frames: int) -> None:
        if self._first_chunk_at is None:
            self._first_chunk_at = time.perf_counter()
        self._delivered_seconds += frames * self._frame_seconds
        self._last_chunk = frames

    def frames_for_next_chunk(self) -> int:
        if self._first_chunk_at is None:
            return 1
        doubled = min(self._max_frames, 2 * self._last_chunk)
        played = time.perf_counter() - self._first_chunk_at
        lead = self._delivered_seconds - played
        affordable = int(lead / (2 * max(self._seconds_per_frame, 1e-6)))
        if affordable < 1:
            return doubled
        return min(doubled, affordable)
