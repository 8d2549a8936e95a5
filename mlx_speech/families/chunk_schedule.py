"""How a stream groups frames into chunks: one frame first, then growing
with the audio already sent.

The plan depends on nothing but the request: a codec's rounding can depend
on how many frames it decodes at once, so a plan that followed the clock
would make a seeded request's audio differ from run to run.
"""

from __future__ import annotations


class ChunkSchedule:
    """How many frames to gather before decoding the next chunk: half the
    frames sent so far (one while fewer than four were sent), up to
    ``max_frames``: 1, 1, 1, 1, 2, 3, 4, 6, 9, 14, 16, ….

    The first chunk is one frame, so audio starts as early as possible;
    larger chunks later cut the per-chunk decode cost. Growing by half keeps
    a listener who started playing with the first frame from ever waiting
    while frames come 1.5 times as fast as real time: a chunk of ``s`` frames
    after ``c`` sent takes ``s`` frames to make while ``c`` play, and ``s <=
    c / 2``. (Doubling would need them twice as fast.)"""

    def __init__(self, max_frames: int = 16):
        self._max_frames = max_frames
        self._sent = 0

    def chunk_done(self, frames: int) -> None:
        self._sent += frames

    def frames_for_next_chunk(self) -> int:
        return min(self._max_frames, max(1, self._sent // 2))
