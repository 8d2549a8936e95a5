"""Per-request sampling for the Nano heads, with explicit PRNG keys.

A request never touches MLX's global random state. ``KeySequence`` hands out
keys in the order ``mx.random.seed(seed)`` followed by global-state draws
would, so a seeded request reproduces mlx-audio's sampling exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn
import numpy as np


class KeySequence:
    def __init__(self, seed: int):
        self._key = mx.random.key(seed)

    def next(self) -> mx.array:
        self._key, subkey = mx.random.split(self._key)
        return subkey

    def words(self) -> np.ndarray:
        """The current key's two words."""
        return np.array(self._key, dtype=np.uint32)

    def continue_from(self, words: np.ndarray) -> None:
        """Go on from the key ``words``, where this sequence's draws taken
        elsewhere (on the host) left it."""
        self._key = mx.array(words, dtype=mx.uint32)


def draw_uniforms(sequences: list[KeySequence], count: int) -> mx.array:
    """The uniforms of each sequence's next ``count`` draws, ``[count,
    len(sequences), 1]``: what ``mx.random.uniform(shape=(1, 1),
    key=sequence.next())`` gives, ``count`` times per sequence, computed for
    every sequence at once (a frame of eight requests would otherwise make
    hundreds of tiny operations). Each sequence moves on by ``count`` keys."""
    keys = mx.stack([sequence._key for sequence in sequences])
    subkeys = []
    for _ in range(count):
        pairs = _split_each(keys)
        keys = pairs[:, 0]
        subkeys.append(pairs[:, 1])
    uniforms = _uniform_each(mx.concatenate(subkeys))
    for position, sequence in enumerate(sequences):
        sequence._key = keys[position]
    return uniforms.reshape(count, len(sequences), 1)


_split_each = mx.vmap(mx.random.split)
_uniform_each = mx.vmap(lambda key: mx.random.uniform(shape=(1,), key=key))


@dataclass(frozen=True)
class HeadSampler:
    """How one head draws its token; ``temperature == 0`` is greedy."""

    temperature: float
    top_k: int
    top_p: float


GREEDY_HEAD = HeadSampler(0.0, 0, 1.0)


def sample_rows(
    logits: mx.array, draws: list[tuple[HeadSampler, KeySequence] | None]
) -> mx.array:
    """One token per row of ``logits``, each row with its own sampler and keys
    (``None``: a placeholder 0); a sampling row takes its sequence's next key."""
    samplers = [None if draw is None else draw[0] for draw in draws]
    sequences = [None if draw is None else draw[1] for draw in draws]
    sampled, uniforms = next_draws(samplers, sequences, 1)
    return pick_rows(logits, samplers, None if uniforms is None else uniforms[0], sampled)


def next_draws(
    samplers: list[HeadSampler | None], sequences: list[KeySequence | None], count: int
) -> tuple[list[int], mx.array | None]:
    """The rows that sample, and their next ``count`` uniforms (``[count,
    rows that sample, 1]``, ``None`` when no row samples); only those rows'
    sequences move on."""
    sampled = [row for row, sampler in enumerate(samplers) if is_random(sampler)]
    if not sampled:
        return sampled, None
    return sampled, draw_uniforms([sequences[row] for row in sampled], count)


def pick_rows(
    logits: mx.array,
    samplers: list[HeadSampler | None],
    uniforms: mx.array | None,
    sampled: list[int],
) -> mx.array:
    """One token per row with its sampler (``None``: a placeholder 0), as
    ``uint32`` (what MLX's argmax and draws give; a frame casts its codes
    once); ``uniforms[i]`` is the draw of row ``sampled[i]``, the rows that
    sample. Rows that share a sampler are filtered and drawn together; every
    operation works row by row, so each row gets the token it would get alone."""
    tokens: list[mx.array | None] = [None] * len(samplers)
    groups: dict[HeadSampler, list[int]] = {}
    for row, sampler in enumerate(samplers):
        if sampler is None:
            tokens[row] = mx.zeros((1,), dtype=mx.uint32)
        else:
            groups.setdefault(sampler, []).append(row)
    for sampler, rows in groups.items():
        everyone = len(rows) == len(samplers)
        part = logits if everyone else logits[mx.array(rows)]
        if not is_random(sampler):
            picked = mx.argmax(part, axis=-1)
        else:
            positions = [sampled.index(row) for row in rows]
            every_sampling_row = positions == list(range(len(sampled)))
            own = uniforms if every_sampling_row else uniforms[mx.array(positions)]
            picked = _filtered_draw(part, own, sampler)
        if everyone:
            return picked
        for position, row in enumerate(rows):
            tokens[row] = picked[position : position + 1]
    return mx.concatenate(tokens)


def is_random(sampler: HeadSampler | None) -> bool:
    """Whether a row with this sampler draws (and so takes a key)."""
    return sampler is not None and sampler.temperature != 0


def _filtered_draw(logits: mx.array, uniform: mx.array, sampler: HeadSampler) -> mx.array:
    """mlx-audio's temperature, top-k and top-p filters, then each row's draw
    with its ``uniform``, as one compiled function: a few dozen small
    operations per head and frame run as a handful of fused kernels, with the
    same numbers. The temperature and the top-p threshold enter as arrays, so
    a new value is not a new compiled function; ``top_k`` sets shapes, and
    MLX traces again for each value used (about 0.3 ms, once)."""
    vocab = logits.shape[-1]
    top_k = sampler.top_k if 0 < sampler.top_k < vocab else 0
    # mlx-audio compares with the float ``1 - top_p``, rounded to float32.
    threshold = None if not 0 < sampler.top_p < 1 else mx.array(1 - sampler.top_p)
    temperature = mx.array(float(sampler.temperature))
    return _filtered_draw_compiled(logits, uniform, temperature, top_k, threshold)


@mx.compile
def _filtered_draw_compiled(
    logits: mx.array,
    uniform: mx.array,
    temperature: mx.array,
    top_k: int,
    top_p_threshold: mx.array | None,
) -> mx.array:
    scores = logits / temperature
    if top_k:
        scores = _keep_top_k(scores, top_k)
    if top_p_threshold is not None:
        scores = _keep_top_p(scores, top_p_threshold)
    return inverse_cdf(scores, uniform)


def _keep_top_k(scores: mx.array, top_k: int) -> mx.array:
    """mlx-audio's ``apply_top_k``: all but the ``top_k`` largest become -inf."""
    logprobs = nn.log_softmax(scores, axis=-1)
    dropped = mx.argpartition(-logprobs, kth=top_k - 1, axis=-1)[..., top_k:]
    filtered = mx.put_along_axis(
        logprobs, dropped, mx.array(-float("inf"), logprobs.dtype), axis=-1
    )
    return mx.where(filtered == -mx.inf, -mx.inf, scores)


def _keep_top_p(scores: mx.array, threshold: mx.array) -> mx.array:
    """mlx-audio's ``apply_top_p``: tokens whose probability, added to those of
    every less likely token, stays at or below ``1 - top_p`` become -inf."""
    logprobs = nn.log_softmax(scores, axis=-1)
    order = mx.argsort(logprobs, axis=-1)
    running = mx.cumsum(mx.take_along_axis(mx.exp(logprobs), order, axis=-1), axis=-1)
    positions = mx.put_along_axis(
        mx.zeros_like(order), order, mx.arange(order.shape[-1], dtype=order.dtype), axis=-1
    )
    running = mx.take_along_axis(running, positions, axis=-1)
    kept = mx.where(running > threshold, logprobs, -float("inf"))
    return mx.where(kept == -mx.inf, -mx.inf, scores)


def inverse_cdf(scores: mx.array, uniform: mx.array) -> mx.array:
    """``mx.random.categorical(scores[i:i+1], key=k_i)`` for every row at
    once, given ``uniform[i]``, the uniform drawn with ``k_i``.

    MLX 0.32.4 draws from one row of logits by inverse CDF: weights
    ``exp(x - max)`` (a one-hot of the maximum when it is infinite), their
    running sum, and the first index whose running sum reaches ``u * total``
    for one uniform ``u`` drawn with the key. Those steps are row by row, so
    running them on all rows gives each row's own draw (tested against
    ``mx.random.categorical``).
    """
    top = mx.max(scores, axis=-1, keepdims=True)
    weights = mx.where(
        mx.isinf(top), (scores == top).astype(scores.dtype), mx.exp(scores - top)
    )
    running = mx.cumsum(weights, axis=-1)
    total = mx.sum(weights, axis=-1, keepdims=True)
    return mx.sum(running < uniform * total, axis=-1).astype(mx.uint32)


def penalize_repeats(logits: mx.array, seen: mx.array, penalties: list[float]) -> mx.array:
    """Scale down, row by row, the logits of tokens already in that row's history."""
    if all(penalty == 1.0 for penalty in penalties):
        return logits
    penalty = mx.array([[penalty] for penalty in penalties], dtype=logits.dtype)
    return _penalized(logits, seen, penalty)


@mx.compile
def _penalized(logits: mx.array, seen: mx.array, penalty: mx.array) -> mx.array:
    scaled = mx.where(logits < 0, logits * penalty, logits / penalty)
    return mx.where(seen, scaled, logits)


class RepetitionHistory:
    """Which tokens each codebook has emitted so far, as a boolean mask."""

    def __init__(self, codebook_sizes: list[int]):
        self._vocab = max(codebook_sizes)
        self.seen = mx.zeros((len(codebook_sizes), self._vocab), dtype=mx.bool_)

    def add(self, frame: mx.array) -> None:
        hits = mx.arange(self._vocab)[None, :] == frame.reshape(-1, 1)
        self.seen = mx.logical_or(self.seen, hits)
