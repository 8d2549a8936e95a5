"""Per-request sampling for the Nano heads, with explicit PRNG keys.

A request never touches MLX's global random state. ``KeySequence`` hands out
keys in the order ``mx.random.seed(seed)`` followed by global-state draws
would, so a seeded request reproduces mlx-audio's sampling exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
from mlx_audio.tts.models.moss_tts_nano.sampling import apply_top_k, apply_top_p


class KeySequence:
    def __init__(self, seed: int):
        self._key = mx.random.key(seed)

    def next(self) -> mx.array:
        self._key, subkey = mx.random.split(self._key)
        return subkey


@dataclass(frozen=True)
class HeadSampler:
    """Draws one token from logits; ``temperature == 0`` is greedy."""

    temperature: float
    top_k: int
    top_p: float

    def __call__(self, logits: mx.array, keys: KeySequence) -> mx.array:
        if self.temperature == 0:
            return mx.argmax(logits, axis=-1).astype(mx.int32)
        scores = logits / float(self.temperature)
        scores = apply_top_k(scores, self.top_k)
        scores = apply_top_p(scores, self.top_p)
        return mx.random.categorical(scores, axis=-1, key=keys.next()).astype(mx.int32)


def penalize_repeats(
    logits: mx.array, seen: mx.array, repetition_penalty: float
) -> mx.array:
    """Scale down the logits of tokens already in this segment's history."""
    if repetition_penalty == 1.0:
        return logits
    penalized = mx.where(
        logits < 0,
        logits * float(repetition_penalty),
        logits / float(repetition_penalty),
    )
    return mx.where(seen, penalized, logits)


class RepetitionHistory:
    """Which tokens each codebook has emitted so far, as a boolean mask."""

    def __init__(self, codebook_sizes: list[int]):
        self._vocab = max(codebook_sizes)
        self.seen = mx.zeros((len(codebook_sizes), self._vocab), dtype=mx.bool_)

    def add(self, frame: mx.array) -> None:
        hits = mx.arange(self._vocab)[None, :] == frame.reshape(-1, 1)
        self.seen = mx.logical_or(self.seen, hits)
