"""RoPE on interleaved pairs as element-wise arithmetic alone, so MLX fuses
it into one pass.

Both of Nano's rotations (GPT-2's ``rotate_half`` and the codec's
``_apply_rope``) turn each pair ``(a, b)`` into ``(a·cos − b·sin, b·cos +
a·sin)``. mlx-audio builds the turned pair ``(−b, a)`` with a negation and a
concatenation (or two stacks) per tensor; here it is the pair's reversed
view times ``(−1, 1)``, the same numbers.
"""

from __future__ import annotations

import mlx.core as mx


def rotate_pairs(
    pairs: mx.array, reversed_pairs: mx.array, cos: mx.array, sin: mx.array
) -> mx.array:
    """``pairs`` (``[..., 2]``) rotated; ``reversed_pairs`` is
    ``pairs[..., ::-1]``, taken by the caller (a shapeless compiled function
    cannot slice)."""
    signs = mx.array([-1, 1], dtype=pairs.dtype)
    return (pairs * cos) + ((reversed_pairs * signs) * sin)
