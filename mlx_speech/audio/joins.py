"""Joining parts spoken apart without clicks: a part that meets another
part or a pause is faded in over its first ``EDGE_SECONDS`` and out over
its last (a raised cosine), so the join starts and ends at silence; the
rest of its audio is untouched."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace

import numpy as np

from .samples import Audio

EDGE_SECONDS = 0.002


def edge_samples(rate: int) -> int:
    return max(1, round(EDGE_SECONDS * rate))


def ramp(samples: int) -> np.ndarray:
    """Gains rising from near 0 to near 1 over ``samples``."""
    return (0.5 - 0.5 * np.cos(np.pi * (np.arange(samples) + 0.5) / samples)).astype(
        np.float32
    )


def faded(
    chunks: Iterable[Audio], rate: int, fade_in: bool, fade_out: bool
) -> Iterator[Audio]:
    """``chunks`` with their first samples faded in and their last faded out
    (the last are held back until the part ends, so the stream lags by
    ``EDGE_SECONDS`` at most)."""
    edge = edge_samples(rate)
    rising = ramp(edge)
    started = 0  # samples seen, for the fade-in
    held: np.ndarray | None = None
    for chunk in chunks:
        samples = chunk.samples
        if fade_in and started < edge and len(samples):
            samples = samples.copy()
            count = min(edge - started, len(samples))
            samples[:count] *= _shaped(rising[started : started + count], samples)
        started += len(samples)
        if fade_out:
            samples = samples if held is None else np.concatenate([held, samples])
            samples, held = samples[:-edge], samples[-edge:]
        if len(samples):
            yield replace(chunk, samples=samples)
    if fade_out and held is not None and len(held):
        tail = held * _shaped(rising[::-1][-len(held) :], held)
        yield Audio(tail.astype(np.float32), rate)


def _shaped(gains: np.ndarray, samples: np.ndarray) -> np.ndarray:
    """``gains`` for ``samples`` of one channel or several."""
    return gains if samples.ndim == 1 else gains[:, None]
