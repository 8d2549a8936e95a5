"""KV caches that write into preallocated blocks instead of concatenating.

They plug into mlx-audio's GPT-2 attention (``offset`` and
``update_and_fetch``); the keys and values they return are the same numbers a
concatenating cache returns, without copying the history every step.
"""

from __future__ import annotations

import mlx.core as mx

BLOCK = 256


def in_blocks(positions: int) -> int:
    """The capacity, a whole number of blocks, that holds ``positions``."""
    return -(-positions // BLOCK) * BLOCK


class BlockKVCache:
    def __init__(self):
        self.keys: mx.array | None = None
        self.values: mx.array | None = None
        self.offset = 0

    def update_and_fetch(
        self, keys: mx.array, values: mx.array
    ) -> tuple[mx.array, mx.array]:
        start, end = self.offset, self.offset + keys.shape[2]
        if self.keys is None or end > self.keys.shape[2]:
            self._grow(keys, values, end)
        self.keys[..., start:end, :] = keys
        self.values[..., start:end, :] = values
        self.offset = end
        return self.keys[..., :end, :], self.values[..., :end, :]

    def _grow(self, keys: mx.array, values: mx.array, needed: int) -> None:
        size = in_blocks(needed)
        batch, heads, _, dim = keys.shape
        grown_keys = mx.zeros((batch, heads, size, dim), keys.dtype)
        grown_values = mx.zeros((batch, heads, size, values.shape[3]), values.dtype)
        if self.keys is not None and self.offset:
            grown_keys[..., : self.offset, :] = self.keys[..., : self.offset, :]
            grown_values[..., : self.offset, :] = self.values[..., : self.offset, :]
        self.keys, self.values = grown_keys, grown_values


def block_caches(layers: int) -> list[BlockKVCache]:
    return [BlockKVCache() for _ in range(layers)]


Snapshot = list[tuple[mx.array, mx.array]]


def snapshot(caches: list[BlockKVCache]) -> Snapshot:
    """The filled part of each layer's keys and values, evaluated, in arrays
    of their own (a slice would keep the whole block-sized buffer alive)."""
    taken = [
        (
            mx.contiguous(c.keys[..., : c.offset, :]),
            mx.contiguous(c.values[..., : c.offset, :]),
        )
        for c in caches
    ]
    mx.eval(taken)
    return taken


def restore(taken: Snapshot) -> list[BlockKVCache]:
    """Caches that continue from a snapshot (which later writes leave untouched)."""
    caches = []
    for keys, values in taken:
        cache = BlockKVCache()
        cache.keys, cache.values, cache.offset = keys, values, keys.shape[2]
        caches.append(cache)
    return caches


def snapshot_bytes(taken: Snapshot) -> int:
    return sum(keys.nbytes + values.nbytes for keys, values in taken)
