"""The C library's GELUs and softmax are MLX's to the bit, or not used at all."""

from __future__ import annotations

import logging
import platform
import sys

import mlx.core as mx
import numpy as np
import pytest
from mlx_audio.codec.models.moss_audio_tokenizer.moss_audio_tokenizer import _exact_gelu
from mlx_audio.tts.models.moss_tts_nano.gpt2 import gelu_new

from mlx_speech.families.moss_nano.blocks import activate_rows
from mlx_speech.families.moss_nano.codec_math import EXACT, codec_math
from mlx_speech.host_engine import library
from mlx_speech.host_engine.engine import HostEngine
from tests.tts.support.host_engine import needs_host_library

needs_library = needs_host_library


def _bits(array: mx.array) -> np.ndarray:
    return np.asarray(array).view(np.int32)


def _values(count: int, seed: int) -> mx.array:
    generator = np.random.default_rng(seed)
    magnitudes = 2.0 ** generator.uniform(-30, 6, count)
    signs = np.where(generator.random(count) < 0.5, -1.0, 1.0)
    return mx.array((signs * magnitudes).astype(np.float32))


@needs_library
def test_this_machine_builds_and_passes_the_check():
    kernels = library.exact_activations()
    assert kernels is not None
    assert kernels.gelu_tanh is not None and kernels.gelu_erf is not None
    assert kernels.softmax is not None


# 3 rows of 5: short rows; 40 x 1216: large enough for the second thread;
# 11 x 37: a group of eight rows summed side by side and three left over,
# rows with a NaN, an infinity, every score masked, or a zero maximum
@needs_library
@pytest.mark.parametrize("shape", [(3, 5), (2, 3, 77), (40, 1216), (11, 37)])
def test_the_softmax_equals_mlx_bit_for_bit(shape):
    generator = np.random.default_rng(shape[-1])
    scores = generator.standard_normal(shape) * 8
    scores[generator.random(shape) < 0.3] = np.finfo(np.float32).min  # masked
    if shape == (11, 37):
        scores[2, 5], scores[4, 30], scores[6] = np.nan, np.inf, np.finfo(np.float32).min
        scores[9] = -np.abs(scores[9])
        scores[9, [3, 20]] = [0.0, -0.0]
    scores = mx.array(scores.astype(np.float32))
    ours = library.exact_activations().softmax(scores)
    assert (_bits(ours) == _bits(mx.softmax(scores, axis=-1, precise=True))).all()


@needs_library
@pytest.mark.parametrize(
    "heads, rows, length, mask",
    [
        (4, 300, 300, "lowest"),
        (2, 16, 120, "infinity"),
        (3, 1, 50, None),
        (2, 8, 8, "bool"),
    ],
)
def test_attention_equals_mlx_bit_for_bit(heads, rows, length, mask):
    generator = np.random.default_rng(rows)
    queries, keys, values = (
        mx.array(generator.standard_normal((1, heads, count, 48)).astype(np.float32))
        for count in (rows, length, length)
    )
    allowed = generator.random((1, 1, rows, length)) < 0.6
    allowed[..., 0] = True
    masks = {
        "lowest": np.where(allowed, 0.0, np.finfo(np.float32).min).astype(np.float32),
        "infinity": np.where(allowed, 0.0, -np.inf).astype(np.float32),
        "bool": allowed,  # MLX's own attention takes these
        None: None,
    }
    chosen = None if masks[mask] is None else mx.array(masks[mask])
    attention = library.attention_with(library.exact_activations().softmax)
    ours = attention(queries, keys, values, scale=48**-0.5, mask=chosen)
    theirs = mx.fast.scaled_dot_product_attention(
        queries, keys, values, scale=48**-0.5, mask=chosen
    )
    assert (_bits(ours) == _bits(theirs)).all()


# 3 x 4099: an odd tail; 40 x 3072: large enough for the second thread
@needs_library
@pytest.mark.parametrize("shape", [(1, 3072), (3, 4099), (40, 3072)])
def test_both_gelus_equal_mlx_bit_for_bit(shape):
    kernels = library.exact_activations()
    values = _values(int(np.prod(shape)), seed=shape[0]).reshape(shape)
    assert (_bits(kernels.gelu_tanh(values)) == _bits(gelu_new(values))).all()
    assert (_bits(kernels.gelu_erf(values)) == _bits(_exact_gelu(values))).all()
    assert kernels.gelu_tanh(values).shape == shape


def _cubes(kernels, x: np.ndarray) -> np.ndarray:
    ffi = kernels.native.ffi
    out = np.empty_like(x)
    kernels.native.lib.cubes(
        ffi.from_buffer("float[]", x), ffi.from_buffer("float[]", out), x.size
    )
    return out


@needs_library
@pytest.mark.skipif(platform.machine() != "x86_64", reason="the port is of x86-64's powf")
def test_the_cube_port_gives_powf_even_where_powf_is_not_the_rounded_cube():
    kernels = library.exact_activations()
    assert kernels.cubes_ported
    generator = np.random.default_rng(11)
    magnitudes = 2.0 ** generator.uniform(-41, 41, 1 << 20)
    signs = np.where(generator.random(magnitudes.size) < 0.5, -1.0, 1.0)
    edges = [2.0**-41, 2.0**41, 2.0**-42, 2.0**42, 1e-40, 0.0, np.inf, np.nan, 1e30]
    x = np.concatenate([edges, np.negative(edges), signs * magnitudes]).astype(np.float32)
    theirs = np.asarray(mx.power(mx.array(x), 3))
    with np.errstate(over="ignore"):  # the cubes of the large edges
        rounded = (x.astype(np.float64) ** 3).astype(np.float32)
    assert np.count_nonzero(rounded.view(np.int32) != theirs.view(np.int32)) > 50
    ours = _cubes(kernels, x)
    assert np.array_equal(ours.view(np.int32), theirs.view(np.int32))


@needs_library
def test_a_cube_port_that_differs_from_mlx_is_not_used(monkeypatch):
    kernels = library.exact_activations()
    monkeypatch.setattr(library, "_checked", lambda *arguments: None)
    try:
        assert library._port_cubes(kernels.native, [library._probe()]) is False
        values = _values(3 * 4099, seed=5)
        theirs = np.asarray(mx.power(values, 3))
        assert np.array_equal(_cubes(kernels, np.asarray(values)), theirs)
        values = values.reshape(3, 4099)
        assert (_bits(kernels.gelu_tanh(values)) == _bits(gelu_new(values))).all()
    finally:
        kernels.native.lib.port_cubes(int(kernels.cubes_ported))


@needs_library
def test_the_transformer_and_codec_activations_take_them_with_mlx_numbers():
    """Through the engine's ``ArrayOps``, as the family takes them."""
    ops = HostEngine(library.exact_activations(), "").array_ops()
    values = _values(2 * 3072, seed=7).reshape(1, 2, 3072)
    ours = activate_rows(values, "gelu_new", ops)
    assert (_bits(ours) == _bits(gelu_new(values))).all()
    assert (_bits(codec_math(ops).gelu(values)) == _bits(_exact_gelu(values))).all()


def test_without_its_library_the_engine_is_unavailable_and_mlx_computes_the_same(
    monkeypatch,
):
    """As where the build at install failed: no ``_nano_kernels`` module."""
    monkeypatch.setitem(sys.modules, "mlx_speech.host_engine._nano_kernels", None)
    with pytest.raises(library.Unavailable, match="C library was not built when"):
        library._load()
    values = _values(4 * 3072, seed=3).reshape(1, 4, 3072)
    assert (_bits(activate_rows(values, "gelu_new")) == _bits(gelu_new(values))).all()
    assert (_bits(EXACT.gelu(values)) == _bits(_exact_gelu(values))).all()
    queries = values.reshape(1, 4, 3, 1024)[..., :64]
    attended = EXACT.attention(queries, queries, queries, 0.125, None)
    plain = mx.fast.scaled_dot_product_attention(queries, queries, queries, scale=0.125)
    assert (_bits(attended) == _bits(plain)).all()


def test_a_function_that_differs_from_mlx_anywhere_is_not_used(caplog):
    def one_ulp_off_at_one_value(x: mx.array) -> mx.array:
        out = np.asarray(gelu_new(x)).copy()
        out.view(np.int32)[12345] += 1
        return mx.array(out)

    with caplog.at_level(logging.INFO, logger="mlx_speech.engine"):
        assert library._checked(one_ulp_off_at_one_value, gelu_new, "gelu_tanh") is None
    assert "gelu_tanh differs from MLX's" in caplog.text
    assert library._checked(gelu_new, gelu_new, "gelu_tanh") is gelu_new


@needs_library
def test_with_the_library_the_fast_codec_decodes_the_exact_audio(speaking_tts):
    from mlx_speech.families.moss_nano.codec import DecoderState, decode_together

    ops = HostEngine(library.exact_activations(), "").array_ops()
    codec = speaking_tts._service._codec
    generator = np.random.default_rng(4)
    frames = [mx.array(generator.integers(0, 16, 4).astype(np.int32)) for _ in range(6)]
    exact, fast = (
        decode_together(codec, 4, [(DecoderState(codec), frames)], numerics)[0]
        for numerics in (codec_math(ops, fast=False), codec_math(ops, fast=True))
    )
    assert (_bits(fast) == _bits(exact)).all()
