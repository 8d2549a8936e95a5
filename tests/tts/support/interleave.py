"""Reading several streams at once, a chunk from each in turn, so their jobs
run side by side on the worker."""

from __future__ import annotations

import numpy as np


def read_in_turn(streams) -> list[np.ndarray]:
    """Each stream's whole audio."""
    parts: list[list[np.ndarray]] = [[] for _ in streams]
    live = list(range(len(streams)))
    while live:
        for index in list(live):
            chunk = next(streams[index], None)
            if chunk is None:
                live.remove(index)
            else:
                parts[index].append(chunk.samples)
    return [np.concatenate(p) if p else np.zeros(0, np.float32) for p in parts]
