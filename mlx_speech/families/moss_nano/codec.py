"""Codec side of the Nano family: frames of codes → mono float PCM, streamed,
for several requests in one pass; and a reference clip → its codes.

mlx-audio's streaming decoder takes one request at a time. Here the frames of
all requests due for audio run through the codec's decoder stages together:
every operation that works time step by time step (codebook lookups, patch
reshapes, projections, norms, feed-forwards) runs once on all requests' steps
laid end to end; attention runs per request over that request's own history,
as mlx-audio's streaming step computes it. Encoding runs mlx-audio's encoder
stages over the whole clip. In both, the attention and the GELU take most of
the time; both run as ``codec_math`` says (their costly parts in vectorized C,
or in halves on two threads). Encoding computes
every number as mlx-audio does; decoding does too with ``codec_math.EXACT``,
and within a stated bound with ``codec_math.FAST``.
"""

from __future__ import annotations

import itertools
import math
from functools import lru_cache, partial

import mlx.core as mx
import numpy as np
from mlx_audio.codec import MossAudioTokenizer
from mlx_audio.codec.models.moss_audio_tokenizer.moss_audio_tokenizer import (
    AttentionStepCache,
    LayerScale,
    MultiheadAttention,
    PatchedPretransform,
    ProjectedTransformer,
    TransformerLayer,
)

from .codec_math import EXACT, CodecMath
from .pair_rotation import rotate_pairs
from .quantizer import QuantizerLookup


def samples_per_frame(codec: MossAudioTokenizer) -> int:
    """Output samples per channel for one frame, from the decoder's stages."""
    upsampling = math.prod(stage.downsample_ratio for stage in codec.decoder)
    interleaved = codec.channels if codec.enable_channel_interleave else 1
    return upsampling // interleaved


class DecoderState:
    """One request's place in the codec decoder: the attention history of
    every transformer layer, across all its segments."""

    def __init__(self, codec: MossAudioTokenizer, channels: int = 1):
        self.channels = channels  # of the audio handed out: 1 is a downmix
        self.caches = [
            stage.make_step_cache() if isinstance(stage, ProjectedTransformer) else None
            for stage in codec.decoder
        ]


class MlxDecoder:
    """The decoder through MLX (what every platform runs; an accelerator's
    ``CodecDecoder`` stands in for it where it applies), with the GELU and
    attention of ``numerics``."""

    def __init__(self, codec: MossAudioTokenizer, n_vq: int, numerics: CodecMath = EXACT):
        self._codec = codec
        self._n_vq = n_vq
        self._numerics = numerics
        self._lookup = QuantizerLookup(codec.quantizer)

    def state(self, channels: int = 1) -> DecoderState:
        return DecoderState(self._codec, channels)

    def decode_together(self, work: list[tuple[DecoderState, list[mx.array]]]) -> list:
        audio = self.queue_together(work)
        mx.eval(audio)
        return audio

    def queue_together(self, work: list[tuple[DecoderState, list[mx.array]]]) -> list:
        """``decode_together``'s audio, queued on the device, not waited
        for: reading it waits, unless a later wait covered it."""
        audio = decode_together(self._codec, self._n_vq, work, self._numerics, self._lookup)
        mx.async_eval(audio)
        return audio


def decode_together(
    codec: MossAudioTokenizer,
    n_vq: int,
    work: list[tuple[DecoderState, list[mx.array]]],
    numerics: CodecMath = EXACT,
    lookup: QuantizerLookup | None = None,
) -> list[mx.array]:
    """Decode each request's frames (``[n_vq]`` codes each), which follow that
    request's previous call → per request its audio, ``[samples, channels]``
    (lazy), with the GELU and attention of ``numerics``; the quantizer's
    weights from ``lookup`` when given, else built for this call."""
    lookup = lookup or QuantizerLookup(codec.quantizer)
    codes = mx.stack([frame for _, frames in work for frame in frames])  # [steps, n_vq]
    hidden = lookup.decode(codes[:, :n_vq].T[:, None, :].astype(mx.int32))
    lengths = [len(frames) for _, frames in work]
    for index, stage in enumerate(codec.decoder):
        if isinstance(stage, PatchedPretransform):
            hidden, _ = stage.decode(hidden, mx.array([sum(lengths)]))
            lengths = [length * stage.patch_size for length in lengths]
        else:
            states = [state.caches[index] for state, _ in work]
            hidden = _transformer_step(stage, hidden, lengths, states, numerics)
    if codec.enable_channel_interleave and codec.channels > 1:
        audio = hidden[0, 0].reshape(-1, codec.channels)
        lengths = [length // codec.channels for length in lengths]
    else:
        audio = hidden[0].T
    return [audio[start:end] for start, end in _spans(lengths)]


def encode(
    codec: MossAudioTokenizer, samples: np.ndarray, n_vq: int, numerics: CodecMath = EXACT
) -> np.ndarray:
    """A clip (``[samples, channels]`` at the codec rate) → its codes,
    ``[frames, n_vq]``, as mlx-audio's ``encode_audio`` computes them
    (``numerics``: exact ones, MLX's own or an accelerator's)."""
    waveform = codec._load_audio_array(samples, sample_rate=codec.sample_rate)
    values, lengths = codec._prepare_waveform_batch([mx.array(waveform.T.copy())])
    hidden, lengths = codec._flatten_channels_for_codec(values, lengths)
    for stage in codec.encoder:
        if isinstance(stage, ProjectedTransformer):
            hidden = _transformer_whole(stage, hidden, lengths, numerics)
        else:
            hidden, lengths = stage(hidden, lengths)
    _, codes, code_lengths = codec.quantizer(hidden.astype(mx.float32), lengths, n_vq)
    mx.eval(codes, code_lengths)
    return np.asarray(codes[:, 0, : int(code_lengths[0])].T, dtype=np.int32)


def with_channels(audio: mx.array, channels: int) -> np.ndarray:
    """Evaluated ``[samples, codec channels]`` audio → float32 ``[samples]``
    (``channels`` 1: their mean) or as decoded."""
    samples = np.asarray(audio, dtype=np.float32)
    if channels != 1:
        return samples
    if samples.shape[1] == 2:
        # numpy's mean over a two-wide axis is about three times slower;
        # halving the sum is exact, so this is that mean to the bit
        return np.add(samples[:, 0], samples[:, 1]) * np.float32(0.5)
    return samples.mean(axis=1, dtype=np.float32)


def _spans(lengths: list[int]) -> list[tuple[int, int]]:
    """Where each request's steps sit when laid end to end."""
    return list(itertools.pairwise(itertools.accumulate(lengths, initial=0)))


def _transformer_step(
    stage: ProjectedTransformer,
    hidden: mx.array,
    lengths: list[int],
    caches: list[list[AttentionStepCache]],
    numerics: CodecMath,
) -> mx.array:
    """``stage.step`` for requests laid end to end in ``hidden`` (``[1, channels,
    steps]``), each with its own attention caches."""
    x = stage.input_proj(hidden.transpose(0, 2, 1))
    transformer = stage.transformer
    if transformer.positional_embedding in {"sin", "sin_rope"}:
        offsets = [cache[0].offset for cache in caches]
        x = x + transformer.positional_scale * _sinusoids(transformer, x, lengths, offsets)
    for depth, layer in enumerate(transformer.layers):
        x = _layer_step(layer, x, lengths, [cache[depth] for cache in caches], numerics)
    return stage.output_proj(x).transpose(0, 2, 1)


def _sinusoids(
    transformer, x: mx.array, lengths: list[int], offsets: list[int]
) -> mx.array:
    """The sinusoidal position embedding of every step, each request counting
    from its own offset."""
    positions = mx.concatenate(
        [
            mx.arange(offset, offset + length, dtype=x.dtype)
            for length, offset in zip(lengths, offsets, strict=True)
        ]
    )
    half = x.shape[-1] // 2
    scale = transformer.max_period ** (mx.arange(half, dtype=x.dtype) / max(half - 1, 1))
    phase = positions[:, None] / scale[None, :]
    return mx.concatenate([mx.cos(phase), mx.sin(phase)], axis=-1)[None]


def _layer_step(
    layer: TransformerLayer,
    x: mx.array,
    lengths: list[int],
    caches: list[AttentionStepCache],
    numerics: CodecMath,
) -> mx.array:
    attention = layer.self_attn
    qkv = attention.in_proj(layer.norm1(x))
    mixed = mx.concatenate(
        [
            _attend(attention, qkv[:, start:end], cache, numerics)
            for (start, end), cache in zip(_spans(lengths), caches, strict=True)
        ],
        axis=1,
    )
    x = _residual(x, layer.layer_scale_1, attention.out_proj(mixed))
    return _feed_forward(layer, x, numerics)


def _feed_forward(layer: TransformerLayer, x: mx.array, numerics: CodecMath) -> mx.array:
    inner = numerics.gelu(layer.ffn[0](layer.norm2(x)))
    return _residual(x, layer.layer_scale_2, layer.ffn[2](inner))


def _residual(x: mx.array, layer_scale, update: mx.array) -> mx.array:
    """``x + layer_scale(update)``, in one pass where the layer scales."""
    if isinstance(layer_scale, LayerScale):
        return _scaled_sum(x, layer_scale.scale, update)
    return x + layer_scale(update)


@partial(mx.compile, shapeless=True)
def _scaled_sum(x: mx.array, scale: mx.array, update: mx.array) -> mx.array:
    return x + scale * update


def _transformer_whole(
    stage: ProjectedTransformer, hidden: mx.array, lengths: mx.array, numerics: CodecMath
) -> mx.array:
    """``stage(hidden, lengths)`` over a whole clip (``[1, channels, steps]``).
    Its layers share one attention mask (mlx-audio builds the same one per
    layer)."""
    x = stage.input_proj(hidden.transpose(0, 2, 1))
    transformer = stage.transformer
    steps = x.shape[1]
    if transformer.positional_embedding in {"sin", "sin_rope"}:
        embedding = _sinusoids(transformer, x, [steps], [0])
        x = x + transformer.positional_scale * embedding
    mask = transformer.layers[0].self_attn._mask(lengths.astype(mx.int32), steps, x.dtype)
    rows = mx.arange(steps, dtype=mx.int32)[None, None, :, None]
    padding = rows >= lengths[:, None, None, None]
    for layer in transformer.layers:
        attention = layer.self_attn
        qkv = attention.in_proj(layer.norm1(x))
        attended = _attend_whole(attention, qkv, mask, padding, numerics)
        x = _residual(x, layer.layer_scale_1, attention.out_proj(attended))
        x = _feed_forward(layer, x, numerics)
    return stage.output_proj(x).transpose(0, 2, 1)


def _attend_whole(
    attention: MultiheadAttention,
    qkv: mx.array,
    mask: mx.array,
    padding: mx.array,
    numerics: CodecMath,
) -> mx.array:
    """Attention over a whole clip (``qkv``: ``[1, steps, 3 * width]``);
    padding rows come out as zeros, as in mlx-audio."""
    queries, keys, values = _heads(attention, qkv, offset=0)
    scale = attention.head_dim**-0.5
    out = numerics.attention(queries, keys, values, scale, mask)
    return _merged(mx.where(padding, mx.zeros((), dtype=out.dtype), out))


def _heads(
    attention: MultiheadAttention, qkv: mx.array, offset: int
) -> tuple[mx.array, mx.array, mx.array]:
    """``[1, steps, 3 * width]`` → queries, keys, values as ``[1, heads, steps,
    head_dim]``; queries and keys rotated from position ``offset`` when the
    attention uses RoPE."""
    parts = qkv.reshape(1, qkv.shape[1], 3, attention.num_heads, attention.head_dim)
    if attention.use_rope:
        rotated = _rotated(parts[:, :, :2], offset, attention.max_period)
        queries, keys = (rotated[:, :, i].transpose(0, 2, 1, 3) for i in range(2))
    else:
        queries, keys = (parts[:, :, i].transpose(0, 2, 1, 3) for i in range(2))
    return queries, keys, parts[:, :, 2].transpose(0, 2, 1, 3)


def _rotated(queries_keys: mx.array, offset: int, max_period: float) -> mx.array:
    """mlx-audio's ``_apply_rope`` of queries and keys side by side
    (``[1, steps, 2, heads, head_dim]``) in one element-wise pass
    (``rotate_pairs``)."""
    _, steps, _, _, dim = queries_keys.shape
    pairs = queries_keys.reshape(*queries_keys.shape[:-1], dim // 2, 2)
    positions = mx.arange(offset, offset + steps, dtype=mx.float32)
    rotated = _rotated_pairs(
        pairs,
        pairs[..., ::-1],
        positions.reshape(1, steps, 1, 1, 1, 1),
        _frequencies(dim, max_period),
    )
    return rotated.reshape(queries_keys.shape)


@lru_cache(maxsize=8)
def _frequencies(dim: int, max_period: float) -> mx.array:
    """``_apply_rope``'s frequencies, ``[dim / 2, 1]``, computed once."""
    exponents = mx.arange(dim // 2, dtype=mx.float32)
    frequencies = mx.exp(exponents * (-math.log(float(max_period)) * 2.0 / dim))
    frequencies = frequencies.reshape(dim // 2, 1)
    mx.eval(frequencies)  # so any thread may use it
    return frequencies


@partial(mx.compile, shapeless=True)  # element-wise: no retrace per shape
def _rotated_pairs(
    pairs: mx.array, reversed_pairs: mx.array, positions: mx.array, frequencies
) -> mx.array:
    phase = positions * frequencies
    return rotate_pairs(pairs, reversed_pairs, mx.cos(phase), mx.sin(phase))


def _merged(out: mx.array) -> mx.array:
    """``[1, heads, steps, head_dim]`` → ``[1, steps, width]``."""
    return out.transpose(0, 2, 1, 3).reshape(1, out.shape[2], -1)


def _attend(
    attention: MultiheadAttention,
    qkv: mx.array,
    cache: AttentionStepCache,
    numerics: CodecMath,
) -> mx.array:
    """One request's causal attention over its history and its new steps
    (``qkv``: ``[1, steps, 3 * width]``); its history moves forward, keeping
    the last ``context - 1`` steps when the attention has a window."""
    steps = qkv.shape[1]
    queries, keys, values = _heads(attention, qkv, offset=cache.offset)
    first_key = cache.offset
    if cache.keys is not None:
        first_key -= cache.keys.shape[2]
        keys = mx.concatenate([cache.keys, keys], axis=2)
        values = mx.concatenate([cache.values, values], axis=2)
    mask = attention._step_mask(
        query_start=cache.offset,
        key_start=first_key,
        query_len=steps,
        key_len=keys.shape[2],
        dtype=qkv.dtype,
    )
    scale = attention.head_dim**-0.5
    out = numerics.attention(queries, keys, values, scale, mask)
    cache.offset += steps
    kept = None if attention.context is None else attention.context - 1
    if kept is None:
        cache.keys, cache.values = keys, values
    elif kept <= 0:
        cache.keys = cache.values = None
    else:
        cache.keys, cache.values = keys[:, :, -kept:], values[:, :, -kept:]
    return _merged(out)
