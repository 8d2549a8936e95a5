"""KV caches that write into preallocated blocks instead of concatenating.

Each layer keeps its keys and values side by side in one buffer, so a step
writes both with one operation; the keys and values it returns are the
same numbers a concatenating cache (mlx-audio's) returns, without copying
the history every step.
"""

from __future__ import annotations

import mlx.core as mx

BLOCK = 256


def in_blocks(positions: int) -> int:
    """The capacity, a whole number of blocks, that holds ``positions``."""
    return -(-positions // BLOCK) * BLOCK


class BlockKVCache:
    def __init__(self):
        self.kept: mx.array | None = None  # [2, batch, heads, capacity, head_dim]
        self.offset = 0

    @property
    def keys(self) -> mx.array | None:
        return None if self.kept is None else keys_and_values(self.kept)[0]

    @property
    def values(self) -> mx.array | None:
        return None if self.kept is None else keys_and_values(self.kept)[1]

    def update_and_fetch(self, keys_values: mx.array) -> tuple[mx.array, mx.array]:
        """New positions' keys and values (``[2, batch, heads, rows,
        head_dim]``) → the keys and values of every position so far."""
        start, end = self.offset, self.offset + keys_values.shape[3]
        if self.kept is None or end > self.kept.shape[3]:
            self._grow(keys_values, end)
        self.kept[..., start:end, :] = keys_values
        self.offset = end
        return keys_and_values(self.kept[..., :end, :])

    def _grow(self, keys_values: mx.array, needed: int) -> None:
        two, batch, heads, _, dim = keys_values.shape
        grown = mx.zeros((two, batch, heads, in_blocks(needed), dim), keys_values.dtype)
        if self.kept is not None and self.offset:
            grown[..., : self.offset, :] = self.kept[..., : self.offset, :]
        self.kept = grown


def keys_and_values(kept: mx.array) -> tuple[mx.array, mx.array]:
    """Keys and values, views of ``kept`` (``[2, …]``; split, not indexed:
    indexing the first axis would gather)."""
    keys, values = (half.squeeze(0) for half in mx.split(kept, 2))
    return keys, values


def block_caches(layers: int) -> list[BlockKVCache]:
    return [BlockKVCache() for _ in range(layers)]


Snapshot = list[mx.array]


def snapshot(caches: list[BlockKVCache]) -> Snapshot:
    """The filled part of each layer's keys and values, evaluated, in arrays
    of their own (a slice would keep the whole block-sized buffer alive)."""
    taken = [mx.contiguous(cache.kept[..., : cache.offset, :]) for cache in caches]
    mx.eval(taken)
    return taken


def restore(taken: Snapshot) -> list[BlockKVCache]:
    """Caches that continue from a snapshot (which later writes leave untouched)."""
    caches = []
    for kept in taken:
        cache = BlockKVCache()
        cache.kept, cache.offset = kept, kept.shape[3]
        caches.append(cache)
    return caches


def snapshot_bytes(taken: Snapshot) -> int:
    return sum(kept.nbytes for kept in taken)
