"""The batched transformer forward of the Nano loop: several jobs' new rows
through mlx-audio's GPT-2 blocks at once, and the local transformer over one
frame for all jobs side by side (worker thread).

Everything but attention runs on all rows at once and works row by row; each
job attends over its own KV cache from its own position, so its numbers are
the ones mlx-audio computes for that job alone.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import mlx.core as mx
from mlx_audio.tts.models.moss_tts_nano.gpt2 import _causal_additive_mask

from .accelerator import MLX_OPS, ArrayOps
from .blocks import (
    activate_rows,
    attention_inputs,
    attention_inputs_compiled,
    block_output,
    block_output_compiled,
    local_step_compiled,
    settings,
)
from .kv_cache import BlockKVCache


@dataclass(frozen=True)
class BlockVariant:
    """How the row-wise parts of a block run: their two functions."""

    attention_inputs: Callable
    block_output: Callable


def block_variant(single_rows: bool, ops: ArrayOps) -> BlockVariant:
    """One row per job is the frame step: its row-wise parts run compiled
    (their shapes repeat every frame). Prompts of any length run uncompiled,
    so they leave no compiled variants behind, and take ``ops``' activation
    where it applies (``activate_rows``)."""
    if single_rows:
        return BlockVariant(attention_inputs_compiled, block_output_compiled)
    activate = partial(activate_rows, ops=ops)
    return BlockVariant(attention_inputs, partial(block_output, activate=activate))


@dataclass(frozen=True)
class Spans:
    """Where each job's rows lie in the stacked input, and where they start
    in that job's sequence."""

    bounds: list[tuple[int, int]]  # [start, end) of each job's rows
    offsets: list[int]  # positions already in each job's cache

    @classmethod
    def of(cls, inputs: list[mx.array], caches: list[list[BlockKVCache]]) -> Spans:
        lengths = [rows.shape[1] for rows in inputs]
        bounds = list(itertools.pairwise(itertools.accumulate(lengths, initial=0)))
        return cls(bounds, [cache[0].offset for cache in caches])

    @property
    def lengths(self) -> list[int]:
        return [end - start for start, end in self.bounds]

    @property
    def single_rows(self) -> bool:
        return all(length == 1 for length in self.lengths)

    def positions(self, dtype=mx.int32) -> mx.array:
        if self.single_rows:  # a frame: each job's row is at its offset
            return mx.array(self.offsets, dtype=dtype)
        return mx.concatenate(
            [
                mx.arange(offset, offset + length, dtype=dtype)
                for offset, length in zip(self.offsets, self.lengths, strict=True)
            ]
        )

    def masks(self, dtype) -> list[mx.array | None]:
        """One query row sees every key: the frame step needs no mask."""
        if self.single_rows:
            return [None] * len(self.bounds)
        return [
            _causal_additive_mask(length, offset + length, dtype)
            for offset, length in zip(self.offsets, self.lengths, strict=True)
        ]


def forward_rows(
    transformer,
    inputs: list[mx.array],
    caches: list[list[BlockKVCache]],
    ops: ArrayOps = MLX_OPS,
) -> mx.array:
    """mlx-audio's GPT-2 forward for several jobs' new rows (``[1, rows,
    width]`` each), laid end to end → each job's last hidden state (a
    prompt's GELU and attention from ``ops`` where they apply)."""
    spans = Spans.of(inputs, caches)
    x = mx.concatenate(inputs, axis=1)
    if transformer.wpe is not None:
        x = x + transformer.wpe(spans.positions())
    variant = block_variant(spans.single_rows, ops)
    rotary = transformer.h[0].attn.rotary_emb
    rotation = None
    if rotary is not None:
        rotation = rotation_at(rotary, spans.positions(mx.float32), spans.single_rows)
    masks = spans.masks(x.dtype)
    for layer, block in enumerate(transformer.h):
        shape = settings(block)
        queries, keys_values = variant.attention_inputs(
            block, x, rotation, shape.heads, shape.eps
        )
        attended = _attend_spans(
            [cache[layer] for cache in caches],
            spans,
            masks,
            queries,
            keys_values,
            scale=shape.scale,
            ops=ops,
        )
        x = variant.block_output(block, x, attended, shape.eps, shape.activation)
    return transformer.ln_f(x[0, mx.array([end - 1 for _, end in spans.bounds])])


def _attend_spans(
    caches: list[BlockKVCache],
    spans: Spans,
    masks: list[mx.array | None],
    queries: mx.array,
    keys_values: mx.array,
    *,
    scale: float,
    ops: ArrayOps,
) -> mx.array:
    """Each job's rows attending over its own cache, joined back in order."""
    if len(caches) == 1:  # a lone job: no slicing and joining
        return _attend(caches[0], queries, keys_values, scale=scale, mask=masks[0], ops=ops)
    return mx.concatenate(
        [
            _attend(
                cache,
                *(part[:, start:end] for part in (queries, keys_values)),
                scale=scale,
                mask=mask,
                ops=ops,
            )
            for (start, end), cache, mask in zip(spans.bounds, caches, masks, strict=True)
        ],
        axis=1,
    )


def _attend(
    cache: BlockKVCache,
    queries: mx.array,
    keys_values: mx.array,
    *,
    scale: float,
    mask: mx.array | None,
    ops: ArrayOps,
) -> mx.array:
    """One job's rows (queries ``[1, rows, heads, head_dim]``, keys and
    values ``[1, rows, 2, heads, head_dim]``) attending over its cache,
    which they join → ``[1, rows, width]``."""
    history_keys, history_values = cache.update_and_fetch(
        keys_values.transpose(2, 0, 3, 1, 4)
    )
    # A prompt's rows (masked) take ``ops``' attention where it applies; a
    # frame's one row keeps MLX's (leaving the graph would cost it a wait).
    accelerated = None if mask is None else ops.takes("attention", queries)
    attend = accelerated or mx.fast.scaled_dot_product_attention
    attended = attend(
        queries.transpose(0, 2, 1, 3), history_keys, history_values, scale=scale, mask=mask
    )
    return attended.transpose(0, 2, 1, 3).reshape(1, queries.shape[1], -1)


def rotation_at(
    rotary, positions: mx.array, compiled: bool = False
) -> tuple[mx.array, mx.array]:
    """RoPE cos and sin at each row's position (float32), as mlx-audio
    computes them, shaped ``[1, rows, 1, head_dim]``; the same for every
    layer. ``compiled`` for a frame's rows (their count repeats every frame;
    a prompt's would leave a compiled variant per length)."""
    tables = _rotation_tables_compiled if compiled else _rotation_tables
    return tables(positions, _inverse_frequencies(rotary.base, rotary.dim))


@functools.lru_cache(maxsize=8)
def _inverse_frequencies(base: float, dim: int) -> mx.array:
    inverse = 1.0 / (base ** (mx.arange(0, dim, 2, dtype=mx.float32) / dim))
    mx.eval(inverse)
    return inverse


def _rotation_tables(positions: mx.array, inverse: mx.array) -> tuple[mx.array, mx.array]:
    angles = positions[:, None] * inverse[None, :]
    cos = mx.repeat(mx.cos(angles), 2, axis=-1)[None, :, None, :]
    sin = mx.repeat(mx.sin(angles), 2, axis=-1)[None, :, None, :]
    return cos, sin


_rotation_tables_compiled = mx.compile(_rotation_tables)


@functools.lru_cache(maxsize=8)
def _first_positions(base: float, dim: int, positions: int) -> tuple[mx.array, mx.array]:
    """The tables of positions ``0 .. positions - 1``, which every frame's
    local pass takes: computed once."""
    tables = _rotation_tables(
        mx.arange(positions, dtype=mx.float32), _inverse_frequencies(base, dim)
    )
    mx.eval(tables)
    return tables


class LocalPass:
    """The local transformer over one frame, a position per call, for all
    jobs side by side."""

    def __init__(self, transformer, positions: int):
        self._transformer = transformer
        self._blocks = tuple(settings(block) for block in transformer.h)
        rotary = transformer.h[0].attn.rotary_emb
        self._rotations = (
            None if rotary is None else _first_positions(rotary.base, rotary.dim, positions)
        )
        self._caches: list[mx.array] = []  # each layer's keys and values
        self._position = 0

    def __call__(self, rows: mx.array) -> mx.array:
        """``[jobs, width]`` at the next position → hidden states, the same shape."""
        x = rows[:, None, :]
        if self._transformer.wpe is not None:
            x = x + self._transformer.wpe(mx.array([self._position]))
        arguments = (
            self._transformer,
            x,
            self._caches,
            self._rotations,
            self._blocks,
            self._transformer.ln_f.eps,
        )
        hidden, self._caches = local_step_compiled(*arguments)
        self._position += 1
        return hidden[:, -1, :]
