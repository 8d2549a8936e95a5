"""How a stream groups frames into chunks: small first, larger while ahead."""

from __future__ import annotations

import time


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
