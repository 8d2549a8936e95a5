"""The host engine's C library (``csrc/``): loaded, and its activations
checked against MLX's.

MLX's CPU backend on Linux computes ``tanh`` and ``pow`` one element at a time
through the C library, and ``erf`` and ``exp`` from its own formulas through
scalar ``fma`` calls. The transformer's ``gelu_new`` (tanh, pow) is a fifth of
a prompt's forward; the codec's exact GELU (erf) and its attention's softmax
(exp) most of encoding a reference clip and of decoding. The library
computes them number for number as MLX does, vectorized: measured here on
8 × 3072 values, the GELU with erf takes 33 µs instead of 980, the one with
tanh 125 instead of 655 (its cubes from a port of the ``powf`` glibc runs on
x86-64 with FMA, checked on all 2^32 inputs by ``bench/check_cubes.py``;
elsewhere ``powf`` itself); attention over 4 heads × 1216 × 1216 scores,
composed with this softmax, 58 ms instead of 131. The rest of the library
(products, blocks, draws, the codec layer) is bound in ``kernels``.

The library (``csrc/``, its interface declared in ``nano_kernels.h``) is
built by ``pip install`` on Linux, as the cffi module ``_nano_kernels``
(``setup.py``), for the CPU it is installed on; where that build failed
there is no module, and the host engine cannot run. Before a function is
used, its results on probes (every magnitude, both signs, zeros,
infinities; rows of scores, partly masked; attention composed with it
against MLX's) are compared bit for bit with MLX's; a function that differs
anywhere (another C library, another MLX) is not used.
"""

from __future__ import annotations

import importlib
import logging
import sys
import threading
from collections.abc import Callable

import mlx.core as mx
import numpy as np
from mlx_audio.codec.models.moss_audio_tokenizer.moss_audio_tokenizer import _exact_gelu
from mlx_audio.tts.models.moss_tts_nano.gpt2 import gelu_new

log = logging.getLogger("mlx_speech.engine")

_PROBE_SIZE = 1 << 18

HostFunction = Callable[[mx.array], mx.array]


class ExactActivations:
    """The library's functions that passed the check, each ``None`` if not:
    ``gelu_tanh`` (GPT-2's ``gelu_new``), ``gelu_erf`` (the exact GELU) and
    ``softmax`` (over the last axis, as ``mx.softmax(..., precise=True)``,
    also checked inside ``scaled_dot_product_attention``)."""

    def __init__(self, native):
        self.native = native  # its other entries are checked where they are used
        probes = [_probe()]
        self.cubes_ported = _port_cubes(native, [*probes, _wide_probe()])
        self.gelu_tanh = _checked(
            _host_function(native, "gelu_tanh"), gelu_new, "gelu_tanh", probes
        )
        self.gelu_erf = _checked(
            _host_function(native, "gelu_erf"), _exact_gelu, "gelu_erf", probes
        )
        self.softmax = _checked(
            _host_function(native, "softmax", per_row=True),
            _mlx_softmax,
            "softmax",
            _softmax_probe(),
        )
        if self.softmax is not None and not _attention_matches(self.softmax):
            log.info("attention with the C softmax differs from MLX's; not used")
            self.softmax = None


class Unavailable(Exception):
    """Why the host engine cannot run here, in a few words."""


def attention_with(softmax: HostFunction):
    """``mx.fast.scaled_dot_product_attention`` with an additive mask, number
    for number, with the library's ``softmax``. On the CPU, MLX composes it
    from the scaled queries, their product with the keys, the mask, a softmax
    and the product with the values; so does this (on 4 heads × 1216 × 1216
    scores: 58 ms instead of 131). Shapes it does not compose (grouped
    heads, boolean masks) take MLX's own."""

    def attention(queries, keys, values, *, scale: float, mask=None) -> mx.array:
        if keys.shape[1] != queries.shape[1] or (
            mask is not None and mask.dtype == mx.bool_
        ):
            return mx.fast.scaled_dot_product_attention(
                queries, keys, values, scale=scale, mask=mask
            )
        return _composed_attention(softmax, queries, keys, values, scale, mask)

    return attention


def _composed_attention(softmax, queries, keys, values, scale, mask) -> mx.array:
    scores = (mx.array(scale, dtype=queries.dtype) * queries) @ keys.swapaxes(-1, -2)
    if mask is not None:
        scores = scores + mask
    return softmax(scores) @ values


_lock = threading.Lock()
_loaded: list[ExactActivations | Unavailable] = []


def exact_activations() -> ExactActivations:
    """The checked library, loaded on first use (MLX's thread: the
    check runs MLX); raises ``Unavailable`` where it cannot be."""
    with _lock:
        if not _loaded:
            try:
                _loaded.append(_load())
            except Unavailable as reason:
                _loaded.append(reason)
        if isinstance(_loaded[0], Unavailable):
            raise _loaded[0]
        return _loaded[0]


def _load() -> ExactActivations:
    if sys.platform != "linux":
        raise Unavailable("it runs on Linux only")
    if mx.default_device() != mx.cpu:
        raise Unavailable("MLX runs on the GPU here")
    try:
        native = importlib.import_module(f"{__package__}._nano_kernels")
    except ImportError as error:
        raise Unavailable(
            "its C library was not built when mlx-speech was installed (it needs a C "
            "compiler and cffi then; reinstall with them to build it)"
        ) from error
    return ExactActivations(native)


def _host_function(native, name: str, per_row: bool = False) -> HostFunction:
    """The library's ``name(x, out, size)`` as a function of an MLX array;
    with ``per_row`` it also takes the length of the last axis (the
    softmax's)."""
    entry, ffi = getattr(native.lib, name), native.ffi

    def run(x: mx.array) -> mx.array:
        mx.eval(x)
        values = np.ascontiguousarray(x, dtype=np.float32)
        out = np.empty_like(values)
        sizes = (values.size, values.shape[-1]) if per_row else (values.size,)
        entry(ffi.from_buffer("float[]", values), ffi.from_buffer("float[]", out), *sizes)
        return mx.array(out)

    return run


def _mlx_softmax(x: mx.array) -> mx.array:
    return mx.softmax(x, axis=-1, precise=True)


def _checked(
    function: HostFunction,
    reference: HostFunction,
    name: str,
    probes: list[mx.array] | None = None,
) -> HostFunction | None:
    for probe in probes or [_probe()]:
        got, expected = np.asarray(function(probe)), np.asarray(reference(probe))
        both_nan = np.isnan(got) & np.isnan(expected)
        same = (got.view(np.int32) == expected.view(np.int32)) | both_nan
        if not same.all():
            log.info("%s differs from MLX's on this machine; MLX's is used", name)
            return None
    return function


def _port_cubes(native, probes: list[mx.array]) -> bool:
    """Has the library take ``gelu_new``'s cubes from its vectorized port of
    glibc's ``powf`` where that is the variant it reproduces and gives MLX's
    ``x ** 3`` on ``probes``; else from ``powf`` itself."""
    if not native.lib.port_cubes(1):
        return False
    cubes = _host_function(native, "cubes")
    if _checked(cubes, lambda x: mx.power(x, 3), "the ported cube", probes) is None:
        native.lib.port_cubes(0)
        return False
    return True


def _attention_matches(softmax: HostFunction) -> bool:
    """The composition against MLX's own attention: one query row and many,
    no mask, masks of float32's lowest value and of minus infinity."""
    generator = np.random.default_rng(3)
    for heads, rows, length, size in ((2, 1, 40, 64), (2, 16, 300, 48), (3, 37, 37, 64)):
        queries, keys, values = (
            mx.array(generator.standard_normal((1, heads, count, size)).astype(np.float32))
            for count in (rows, length, length)
        )
        allowed = generator.random((1, 1, rows, length)) < 0.7
        allowed[..., 0] = True
        masks = [None] + [
            mx.array(np.where(allowed, 0.0, low).astype(np.float32))
            for low in (np.finfo(np.float32).min, -np.inf)
        ]
        for mask in masks:
            theirs = mx.fast.scaled_dot_product_attention(
                queries, keys, values, scale=size**-0.5, mask=mask
            )
            ours = _composed_attention(softmax, queries, keys, values, size**-0.5, mask)
            if not np.array_equal(np.asarray(ours), np.asarray(theirs)):
                return False
    return True


def _softmax_probe() -> list[mx.array]:
    """Rows of attention scores: widths 1 to 127 and 1000, values from tiny to
    large, some masked with float32's lowest value as the codec's masks do."""
    generator = np.random.default_rng(2)
    rows = []
    for width in [*range(1, 128), 1000]:
        scale = 2.0 ** generator.uniform(-20, 7)
        row = generator.standard_normal((4, width)) * scale
        row[generator.random((4, width)) < 0.2] += np.finfo(np.float32).min
        rows.append(row.astype(np.float32))
    return [mx.array(row) for row in rows]


def _wide_probe() -> mx.array:
    """Float32 values from 2^-48 to 2^48, both signs: across both ends of the
    cube port's range."""
    generator = np.random.default_rng(1)
    magnitudes = 2.0 ** generator.uniform(-48, 48, _PROBE_SIZE)
    signs = np.where(generator.random(_PROBE_SIZE) < 0.5, -1.0, 1.0)
    return mx.array((signs * magnitudes).astype(np.float32))


def _probe() -> mx.array:
    """Float32 values of every magnitude from 2^-40 to 2^8, both signs, and
    zeros, a denormal, infinities and large values."""
    generator = np.random.default_rng(0)
    magnitudes = 2.0 ** generator.uniform(-40, 8, _PROBE_SIZE)
    signs = np.where(generator.random(_PROBE_SIZE) < 0.5, -1.0, 1.0)
    special = [0.0, -0.0, 1e-40, -1e-40, np.inf, -np.inf, 30.0, -30.0, 1e30, -1e30]
    return mx.array(np.concatenate([special, signs * magnitudes]).astype(np.float32))
