"""Turning a family's frames into audio chunks, the same way for every family:
frames gathered by the ``ChunkSchedule``, decoded, checked finite."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

import numpy as np

from ..audio.samples import Audio
from ..errors import GenerationError
from .chunk_schedule import ChunkSchedule

Frame = TypeVar("Frame")


def finite_audio(samples: np.ndarray, sample_rate: int) -> Audio:
    """A chunk of decoded samples; non-finite audio is an error, never noise."""
    if not np.isfinite(samples).all():
        raise GenerationError(
            "the model produced non-finite audio; the checkpoint may be corrupt"
        )
    return Audio(samples, sample_rate)


def chunks_of(
    frames: Iterable[Frame],
    schedule: ChunkSchedule,
    decode: Callable[[list[Frame], bool], Audio | None],
) -> Iterator[Audio | None]:
    """One item per frame: ``None`` while the next chunk gathers, then the
    chunk ``decode(its frames, False)`` makes; after the last frame,
    ``decode(the frames left, True)`` unless it gives ``None``."""
    gathered: list[Frame] = []
    for frame in frames:
        gathered.append(frame)
        if len(gathered) < schedule.frames_for_next_chunk():
            yield None
            continue
        chunk = decode(gathered, False)
        schedule.chunk_done(len(gathered))
        gathered = []
        yield chunk
    last = decode(gathered, True)
    if last is not None:
        schedule.chunk_done(len(gathered))
        yield last
