"""How a stream groups frames into chunks: one frame first, then doubling.

The plan depends on nothing but the request: a codec's rounding can depend
on how many frames it decodes at once, so a plan that followed the clock
would make a seeded request's audio differ from run to run.
"""

from __future__ import annotations


class ChunkSchedule:
    """How many frames to gather before decoding the next chunk: 1, 2, 4, …
    up to ``max_frames``. The first chunk is one frame, so audio starts as
    early as possible; larger chunks later cut the per-chunk decode cost."""

    def __init__(self, max_frames: int = 16):
        self._max_frames = max_frames
        self._last_chunk = 0

    def chunk_done(self, frames: int) -> None:
        self._last_chunk = frames

    def frames_for_next_chunk(self) -> int:
        return min(self._max_frames, max(1, 2 * self._last_chunk))
