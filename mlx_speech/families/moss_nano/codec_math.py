"""The codec's GELU and attention: mlx-audio's exact ones (encoding always
uses them), or, for decoding, faster ones whose audio stays within a stated
bound.

MLX's CPU backend computes ``erf`` (in the exact GELU) and ``exp`` (in the
attention softmax) one element at a time, through scalar ``fma`` calls, and
they take most of a decode. The fast mode writes them from plain multiplies
and adds, compiled by MLX into fused loops:

- ``erf(x) ≈ x · P(x²) / Q(x²)`` on ``[-4, 4]`` (outside it ``erf`` is ±1 to
  float precision), our least-squares fit in float64; in float32 it is within
  3.7e-7 of ``erf`` everywhere, and ``Q ≥ 1``, so it has no poles;
- ``exp(x) = 2^k · exp(r)`` with ``k`` the nearest integer to ``x / ln 2``, so
  ``|r| ≤ ln 2 / 2``, where a degree-7 Taylor polynomial is within 1e-7
  (relative); ``2^k`` is built from its float bits.

The fast mode is the default on MLX's CPU backend only; on a GPU the exact
functions are (``fast_by_default``). Where an accelerator's ``ArrayOps``
give the exact GELU or attention (MLX's numbers, faster), both modes take
them.

``bench/check_codec_math.py`` measures both, and the audio of a whole decode
against the exact one (``docs/speech/families.md``, "Speed", states the bound;
``tests/tts/families/test_parity.py`` holds it). The codes never depend on this: the
decoder runs after they are chosen, and encoding a reference clip always uses
the exact functions, so its codes stay mlx-audio's.

``MLX_SPEECH_EXACT=1`` asks for mlx-audio's numbers everywhere.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import mlx.core as mx
from mlx_audio.codec.models.moss_audio_tokenizer.moss_audio_tokenizer import _exact_gelu

from .accelerator import MLX_OPS, ArrayOps
from .halves import in_halves

EXACT_VARIABLE = "MLX_SPEECH_EXACT"

_ERF_NUMERATOR = (
    1.1283791828654146,
    0.1846422054333134,
    0.05432954516604746,
    0.003837554529644013,
    0.000382897042760196,
    4.7872742277350676e-06,
    -1.3694798182200638e-08,
)
_ERF_DENOMINATOR = (
    1.0,
    0.4969684484654166,
    0.1138034429661039,
    0.015450241626279875,
    0.0013094599513875816,
    6.407436226656496e-05,
)
_EXP_TAYLOR = tuple(1 / math.factorial(n) for n in range(8))
_LN2_HIGH = 0.693145751953125  # ln 2 in two parts: k · high is exact in float32
_LN2_LOW = 1.428606765330187e-06
_ROUNDING = 12582912.0  # 1.5 · 2^23: adding it rounds a float32 to an integer
_SMALLEST_EXPONENT = -87.0  # exp below it is under float32's normal range
_QUERY_BLOCK = 32


def exact_asked() -> bool:
    """Whether ``MLX_SPEECH_EXACT`` asks for the reference numbers."""
    return os.environ.get(EXACT_VARIABLE, "") not in ("", "0")


Attention = Callable[[mx.array, mx.array, mx.array, float, mx.array | None], mx.array]


@dataclass(frozen=True)
class CodecMath:
    """The two functions the codec's layers call (each splits its work over
    two threads its own way)."""

    gelu: Callable[[mx.array], mx.array]
    attention: Attention  # (queries, keys, values, scale, additive mask or None)


def fast_by_default() -> bool:
    """Whether decoding takes the fast mode unless asked otherwise: on MLX's
    CPU backend, where ``erf`` and ``exp`` run element by element, and not
    with ``MLX_SPEECH_EXACT``. A GPU computes them in its own kernels."""
    return not exact_asked() and mx.default_device().type == mx.cpu


def codec_math(ops: ArrayOps = MLX_OPS, fast: bool = False) -> CodecMath:
    """The exact functions, or the fast ones with ``fast``; either way
    ``ops``' where they apply (MLX's numbers: faster than any approximation)."""

    def gelu(x: mx.array) -> mx.array:
        accelerated = ops.takes("gelu_erf", x)
        if accelerated is not None:
            return accelerated(x)
        return in_halves(_rational_gelu if fast else _exact_gelu_fused, -1, x)

    def attention(queries, keys, values, scale, mask):
        accelerated = ops.takes("attention", queries)
        if accelerated is not None:
            return accelerated(queries, keys, values, scale=scale, mask=mask)
        attend = partial(
            _fast_attention if fast else _mlx_attention, scale=scale, mask=mask
        )
        return in_halves(attend, 1, queries, keys, values)

    return CodecMath(gelu=gelu, attention=attention)


def _mlx_attention(queries, keys, values, *, scale, mask):
    return mx.fast.scaled_dot_product_attention(
        queries, keys, values, scale=scale, mask=mask
    )


def rational_erf(x: mx.array) -> mx.array:
    x = mx.clip(x, -4.0, 4.0)
    squared = x * x
    return x * _horner(_ERF_NUMERATOR, squared) / _horner(_ERF_DENOMINATOR, squared)


@partial(mx.compile, shapeless=True)  # element-wise: no retrace per shape
def _exp_parts(x: mx.array, shift: mx.array) -> tuple[mx.array, mx.array]:
    """``exp(x - shift) = exp(r) · 2^k`` → ``exp(r)`` and the float32 bits of
    ``2^k``. (Reinterpreting the bits as floats inside a compiled function
    splits MLX's fused loop in a way that costs more than the exp saves, so
    the caller does it.)"""
    x = mx.maximum(x - shift, _SMALLEST_EXPONENT)
    k = (x * (1 / math.log(2.0)) + _ROUNDING) - _ROUNDING
    r = x - k * _LN2_HIGH - k * _LN2_LOW
    return _horner(_EXP_TAYLOR, r), mx.left_shift(k.astype(mx.int32) + 127, 23)


def polynomial_exp(x: mx.array, shift: mx.array | float = 0.0) -> mx.array:
    """``exp(x - shift)`` for float32 ``x - shift ≤ 88``; results under
    ``exp(-87)`` (denormal or zero in float32) come out as about ``exp(-87)``,
    which no softmax weight can tell from zero."""
    power, two_to_k = _exp_parts(x, mx.array(shift, dtype=x.dtype))
    return power * two_to_k.view(mx.float32)


def _horner(coefficients: tuple[float, ...], x: mx.array) -> mx.array:
    """``c[0] + c[1]·x + c[2]·x² + …``"""
    total = mx.array(coefficients[-1], dtype=x.dtype)
    for coefficient in reversed(coefficients[:-1]):
        total = total * x + coefficient
    return total


_exact_gelu_fused = mx.compile(_exact_gelu, shapeless=True)  # the same numbers


@partial(mx.compile, shapeless=True)
def _rational_gelu(x: mx.array) -> mx.array:
    return 0.5 * x * (1.0 + rational_erf(x * (1 / math.sqrt(2.0))))


def _softmax_weights(scores: mx.array) -> mx.array:
    powers = polynomial_exp(scores, mx.max(scores, axis=-1, keepdims=True))
    return powers / mx.sum(powers, axis=-1, keepdims=True)


def _fast_attention(queries, keys, values, *, scale, mask):
    """A few query rows at a time: their scores against a long history stay
    in the CPU's caches through the softmax's passes (measured on 512 queries
    × 4000 keys, 2 heads: 70 ms as one SDPA, 40 ms in blocks of 32)."""
    keys_t = keys.swapaxes(-1, -2)
    blocks = []
    for start in range(0, queries.shape[2], _QUERY_BLOCK):
        rows = slice(start, start + _QUERY_BLOCK)
        scores = (queries[:, :, rows] * scale) @ keys_t
        if mask is not None:
            scores = scores + mask[:, :, rows]
        blocks.append(_softmax_weights(scores) @ values)
    return blocks[0] if len(blocks) == 1 else mx.concatenate(blocks, axis=2)


EXACT = codec_math(MLX_OPS, fast=False)  # MLX's own, mlx-audio's numbers
FAST = codec_math(MLX_OPS, fast=True)
