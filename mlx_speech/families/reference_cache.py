"""Per-reference state kept in memory (LRU, bounded in bytes): encoded clips,
and the prompt prefix's KV state for each voice."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict

import numpy as np

DEFAULT_MAX_BYTES = 64 * 1024 * 1024


def content_key(array: np.ndarray) -> str:
    """Identifies an array by its shape, dtype and values: decoded audio however
    it was sent (base64, file, samples), or a voice's codes."""
    digest = hashlib.sha256(f"{array.shape}{array.dtype}".encode())
    digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


class ByteBoundedLRU:
    """Values with a size in bytes; the least recently used go first."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES):
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, tuple[object, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: str):
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return entry[0]

    def put(self, key: str, value, size: int) -> None:
        if size > self.max_bytes:
            return
        with self._lock:
            previous = self._entries.pop(key, None)
            if previous is not None:
                self._bytes -= previous[1]
            self._entries[key] = (value, size)
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, (_, evicted) = self._entries.popitem(last=False)
                self._bytes -= evicted
