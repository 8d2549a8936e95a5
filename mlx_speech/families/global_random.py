"""A request's own place in MLX's global random sequence.

mlx-audio's Qwen3-TTS and VoxCPM2 draw from MLX's global random key, which is
per thread. Requests take turns on the worker thread, so each keeps its key
here: installed before each of its steps and read back after, so a seeded
request draws exactly what it would draw alone. ``mx.random.seed(s)`` sets the
key to ``(s >> 32, s & 0xFFFFFFFF)``, which lets any key be installed exactly.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeVar

import mlx.core as mx

T = TypeVar("T")


class GlobalRandomKey:
    def __init__(self, seed: int):
        self._seed = seed  # mx.random.seed(seed) gives the key a fresh run starts from

    @contextmanager
    def installed(self) -> Iterator[None]:
        """Worker thread: global random draws inside come from this request's key."""
        mx.random.seed(self._seed)
        try:
            yield
        finally:
            high, low = mx.random.state[0].tolist()
            self._seed = (high << 32) | low

    def steps(self, items: Iterator[T]) -> Iterator[T]:
        """``items``, each one computed with this request's key installed."""
        while True:
            with self.installed():
                item = next(items, None)
            if item is None:
                return
            yield item
