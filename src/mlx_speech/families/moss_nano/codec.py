"""Codec side of the Nano family: frames of codes → mono float PCM, streamed,
for several requests in one pass.

mlx-audio's streaming decoder takes one request at a time. Here the frames of
all requests due for audio run through the codec's decoder stages together:
every operation that works time step by time step (codebook lookups, patch
reshapes, projections, norms, feed-forwards) runs once on all requests' steps
laid end to end; attention runs per request over that request's own history,
as mlx-audio's streaming step computes it. The attention and the exact GELU,
which take most of the time, run in halves on two threads (``halves``).
"""

from __future__ import annotations

import itertools
import math

import mlx.core as mx
import numpy as np
from mlx_audio.codec import MossAudioTokenizer
from mlx_audio.codec.models.moss_audio_tokenizer.moss_audio_tokenizer import (
    AttentionStepCache,
    MultiheadAttention,
    PatchedPretransform,
    ProjectedTransformer,
    TransformerLayer,
    _apply_rope,
    _exact_gelu,
)

from ...errors import GenerationError
from .halves import in_halves


def samples_per_frame(codec: MossAudioTokenizer) -> int:
    """Output samples per channel for one frame, from the decoder's stages."""
    upsampling = math.prod(stage.downsample_ratio for stage in codec.decoder)
    interleaved = codec.channels if codec.enable_channel_interleave else 1
    return upsampling // interleaved


class DecoderState:
    """One request's place in the codec decoder: the attention history of
    every transformer layer, across all its segments."""

    def __init__(self, codec: MossAudioTokenizer):
        self.caches = [
            stage.make_step_cache() if isinstance(stage, ProjectedTransformer) else None
            for stage in codec.decoder
        ]


def decode_together(
    codec: MossAudioTokenizer, n_vq: int, work: list[tuple[DecoderState, list[mx.array]]]
) -> list[mx.array]:
    """Decode each request's frames (``[n_vq]`` codes each), which follow that
    request's previous call → per request its audio, ``[samples, channels]``
    (lazy)."""
    codes = mx.stack([frame for _, frames in work for frame in frames])  # [steps, n_vq]
    hidden = codec.quantizer.decode_codes(codes[:, :n_vq].T[:, None, :].astype(mx.int32))
    lengths = [len(frames) for _, frames in work]
    for index, stage in enumerate(codec.decoder):
        if isinstance(stage, PatchedPretransform):
            hidden, _ = stage.decode(hidden, mx.array([sum(lengths)]))
            lengths = [length * stage.patch_size for length in lengths]
        else:
            states = [state.caches[index] for state, _ in work]
            hidden = _transformer_step(stage, hidden, lengths, states)
    if codec.enable_channel_interleave and codec.channels > 1:
        audio = hidden[0, 0].reshape(-1, codec.channels)
        lengths = [length // codec.channels for length in lengths]
    else:
        audio = hidden[0].T
    return [audio[start:end] for start, end in _spans(lengths)]


def mono(audio: mx.array) -> np.ndarray:
    """Evaluated ``[samples, channels]`` audio → mono float32, checked finite."""
    samples = np.asarray(audio, dtype=np.float32).mean(axis=1, dtype=np.float32)
    if not np.isfinite(samples).all():
        raise GenerationError(
            "the codec produced non-finite audio; the checkpoint may be corrupt"
        )
    return samples


def _spans(lengths: list[int]) -> list[tuple[int, int]]:
    """Where each request's steps sit when laid end to end."""
    return list(itertools.pairwise(itertools.accumulate(lengths, initial=0)))


def _transformer_step(
    stage: ProjectedTransformer,
    hidden: mx.array,
    lengths: list[int],
    caches: list[list[AttentionStepCache]],
) -> mx.array:
    """``stage.step`` for requests laid end to end in ``hidden`` (``[1, channels,
    steps]``), each with its own attention caches."""
    x = stage.input_proj(hidden.transpose(0, 2, 1))
    transformer = stage.transformer
    if transformer.positional_embedding in {"sin", "sin_rope"}:
        x = x + transformer.positional_scale * _sinusoids(transformer, x, lengths, caches)
    for depth, layer in enumerate(transformer.layers):
        x = _layer_step(layer, x, lengths, [cache[depth] for cache in caches])
    return stage.output_proj(x).transpose(0, 2, 1)


def _sinusoids(transformer, x: mx.array, lengths: list[int], caches) -> mx.array:
    """The sinusoidal position embedding of every step, each request counting
    from its own offset."""
    positions = mx.concatenate(
        [
            mx.arange(cache[0].offset, cache[0].offset + length, dtype=x.dtype)
            for length, cache in zip(lengths, caches, strict=True)
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
) -> mx.array:
    attention = layer.self_attn
    qkv = attention.in_proj(layer.norm1(x))
    mixed = mx.concatenate(
        [
            _attend(attention, qkv[:, start:end], cache)
            for (start, end), cache in zip(_spans(lengths), caches, strict=True)
        ],
        axis=1,
    )
    x = x + layer.layer_scale_1(attention.out_proj(mixed))
    inner = in_halves(_exact_gelu, -1, layer.ffn[0](layer.norm2(x)))
    feed_forward = layer.ffn[2](inner)
    return x + layer.layer_scale_2(feed_forward)


def _attend(
    attention: MultiheadAttention, qkv: mx.array, cache: AttentionStepCache
) -> mx.array:
    """One request's causal attention over its history and its new steps
    (``qkv``: ``[1, steps, 3 * width]``); its history moves forward, keeping
    the last ``context - 1`` steps when the attention has a window."""
    steps = qkv.shape[1]
    heads, dim = attention.num_heads, attention.head_dim
    parts = qkv.reshape(1, steps, 3, heads, dim)
    queries, keys, values = (parts[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
    if attention.use_rope:
        queries, keys = _apply_rope(
            queries, keys, max_period=attention.max_period, offset=cache.offset
        )
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
    out = in_halves(  # split by head
        lambda q, k, v: mx.fast.scaled_dot_product_attention(
            q, k, v, scale=dim**-0.5, mask=mask
        ),
        1,
        queries,
        keys,
        values,
    )
    cache.offset += steps
    kept = None if attention.context is None else attention.context - 1
    if kept is None:
        cache.keys, cache.values = keys, values
    elif kept <= 0:
        cache.keys = cache.values = None
    else:
        cache.keys, cache.values = keys[:, :, -kept:], values[:, :, -kept:]
    return out.transpose(0, 2, 1, 3).reshape(1, steps, heads * dim)
