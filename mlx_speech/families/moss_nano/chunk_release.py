"""When a request's chunks go to the shared decode (see ``batch``: a round
takes on about ``FRAMES_PER_ROUND`` frames of decoding)."""

from __future__ import annotations

from collections.abc import Iterator

import mlx.core as mx

from ...engine.batching import DeferredOutput
from ..chunk_schedule import ChunkSchedule
from .batch import CodecBatch


class ChunkRelease:
    """One request's frames on their way to the shared decode: gathered into
    chunks by the ``ChunkSchedule``; a complete chunk is handed over when
    this round's decoding has room for it, or it is the first, or the next
    chunk is complete too (so a chunk waits at most one chunk's frames)."""

    def __init__(self, decodes: CodecBatch, decoder):
        """``decoder``: the request's place in ``decodes``' decoder."""
        self._decodes = decodes
        self._decoder = decoder
        self._schedule = ChunkSchedule()
        self._gathering: list[mx.array] = []
        self._complete: list[mx.array] | None = None
        self._handed_any = False

    def add(self, frame: mx.array) -> None:
        self._gathering.append(frame)

    def due(self) -> DeferredOutput | None:
        """The chunk to decode this round, if one goes now."""
        if len(self._gathering) >= self._schedule.frames_for_next_chunk():
            held = self._hand_over() if self._complete is not None else None
            self._complete, self._gathering = self._gathering, []
            self._schedule.chunk_done(len(self._complete))
            if held is not None:
                return held
        if self._complete is None:
            return None
        if self._handed_any and not self._decodes.has_room(len(self._complete)):
            return None
        return self._hand_over()

    def rest(self) -> Iterator[DeferredOutput]:
        """After the last frame: what is left, in order, one chunk a round
        (a request's chunks must not share a decode pass: its decoder state
        carries from one to the next)."""
        if self._complete is not None:
            yield self._hand_over()
        if self._gathering:
            self._complete, self._gathering = self._gathering, []
            yield self._hand_over()

    def _hand_over(self) -> DeferredOutput:
        frames, self._complete = self._complete, None
        first, self._handed_any = not self._handed_any, True
        return self._decodes.decode(self._decoder, frames, first)
