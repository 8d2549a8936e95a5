"""A request's state while the host steps it: its keys and values per layer
in host buffers, its next input rows and its history (worker thread)."""

from __future__ import annotations

import ctypes
import functools
import sys

import mlx.core as mx
import numpy as np

from ..families.moss_nano.kv_cache import BlockKVCache, in_blocks

_PAGE = 4096
_NO_HUGE_PAGES = 15  # madvise's MADV_NOHUGEPAGE (Linux)


class HostJob:
    """A job's state while it is stepped here: its keys and values per layer
    (``[heads, capacity, dim]``), its next input rows (``[count, width]``:
    its prompt, then one row a frame) and its history."""

    def __init__(self, caches, length: int, rows: np.ndarray, seen: np.ndarray):
        self.caches = caches
        self.length = length
        self.rows = rows
        self.seen = seen

    def room(self) -> None:
        """Grow the caches by blocks until the next rows fit."""
        capacity = self.caches[0][0].shape[1]
        needed = in_blocks(self.length + len(self.rows))
        if needed <= capacity:
            return
        keys, _ = self.caches[0]
        grown = cache_store(len(self.caches), keys.shape[0], needed, keys.shape[2])
        for old, new in zip(self.caches, grown, strict=True):
            new[0][:, :capacity], new[1][:, :capacity] = old
        self.caches = grown


def entered(job, heads: int, dim: int) -> HostJob:
    """A ``FrameJob``'s MLX state (its caches: ``heads`` of ``dim``) as host
    buffers, taken over from it (``FrameJob.hand_over``)."""
    inputs, cache, seen = job.hand_over()
    mx.eval(inputs, seen)
    return HostJob(
        copied_to_host(cache, heads, dim),
        cache[0].offset,
        np.array(inputs[0]),
        np.array(seen),
    )


def copied_to_host(caches: list[BlockKVCache], heads: int, dim: int):
    """MLX's caches of a job (``heads`` of ``dim`` each) in a store of its own."""
    mx.eval([(cache.keys, cache.values) for cache in caches])
    length = caches[0].offset
    store = cache_store(len(caches), heads, in_blocks(length + 1), dim)
    if length:
        for cache, pair in zip(caches, store, strict=True):
            for array, host in zip((cache.keys, cache.values), pair, strict=True):
                host[:, :length] = np.asarray(array)[0, :, :length]  # a view of MLX's
    return store


def cache_store(layers: int, heads: int, capacity: int, dim: int):
    """Every layer's keys and values (``[heads, capacity, dim]`` each) in one
    allocation, left unset: attention reads a cache only up to the rows
    written (zeroing 19 MB at Nano's size took 2 ms of a request's start).

    Each head's rows are written a few at a time, so the store is kept on
    small pages: numpy asks for huge ones for large arrays, and a huge page
    first touched may wait for the kernel to compact memory (40 ms a
    request, seen just after loading; on small pages 2 ms)."""
    store = np.empty((layers, 2, heads, capacity, dim), np.float32)
    _on_small_pages(store)
    return [(layer[0], layer[1]) for layer in store]


def _on_small_pages(array: np.ndarray) -> None:
    if not sys.platform.startswith("linux"):
        return
    start = -(-array.ctypes.data // _PAGE) * _PAGE
    end = (array.ctypes.data + array.nbytes) // _PAGE * _PAGE
    if end > start:  # advice only: a kernel without huge pages refuses it harmlessly
        _libc().madvise(start, end - start, _NO_HUGE_PAGES)


@functools.cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return libc


def cache_addresses(caches) -> tuple[np.ndarray, ...]:
    """For C: the addresses of each job's keys and values of a layer
    (``caches``: a pair each, ``[heads, capacity, dim]``) and their
    capacities."""
    keys = np.array([pair[0].ctypes.data for pair in caches], dtype=np.uintp)
    values = np.array([pair[1].ctypes.data for pair in caches], dtype=np.uintp)
    capacities = np.array([pair[0].shape[1] for pair in caches], dtype=np.int64)
    return keys, values, capacities
