"""The checks a host step passes before it runs a frame: its numbers
against MLX's frame step on random rows, bit for bit; the draws and their
uniforms against MLX's; the library's own product against float64 sums.
Any difference and frames stay in MLX (``host_step``)."""

from __future__ import annotations

import functools
import logging

import mlx.core as mx
import numpy as np
from mlx_audio.tts.models.moss_tts_nano import Model

from ..families.moss_nano.codec_math import exact_asked
from ..families.moss_nano.forward import LocalPass, forward_rows
from ..families.moss_nano.kv_cache import BlockKVCache, block_caches
from ..families.moss_nano.sampling import (
    HeadSampler,
    KeySequence,
    _filtered_draw,
    draw_uniforms,
)
from .caches import HostJob, copied_to_host
from .frame_step import HostStep, prompt_shapes
from .kernels import (
    BLOCK_LAYERS,
    Kernels,
    own_product_sound,
    stacking_holds,
    trust_chained_shapes,
    trust_lone_shapes,
)
from .library import ExactActivations

log = logging.getLogger("mlx_speech.engine")

_CHECKED_SAMPLERS = (
    HeadSampler(0.8, 25, 0.95),
    HeadSampler(1.0, 50, 1.0),
    HeadSampler(0.6, 0, 0.8),
    HeadSampler(1.3, 0, 1.0),
)


def _draws_match(kernels: Kernels, generator: np.random.Generator) -> bool:
    """The host draw against MLX's on rows of logits of several spreads,
    some with tokens at minus infinity, with each checked sampler."""
    for row in range(24):
        logits = generator.standard_normal(1024) * 2.0 ** (row % 6 - 2)
        logits[generator.random(1024) < 0.05 * (row % 3)] = -np.inf
        logits = logits.astype(np.float32)
        uniform = float(np.float32(generator.random()))
        for sampler in _CHECKED_SAMPLERS:
            theirs = _filtered_draw(mx.array(logits[None]), mx.array([[uniform]]), sampler)
            if kernels.draw(logits, sampler, uniform) != theirs.item():
                return False
    return True


def _uniforms_match(kernels: Kernels) -> bool:
    """The host's uniforms, and the keys they leave, against MLX's
    ``draw_uniforms`` for a few seeds and counts of draws."""
    for seeds, count in (((0, 1, 2**40 + 3), 1), ((5, 6, 7, 8), 17), ((9,), 3)):
        theirs = [KeySequence(seed) for seed in seeds]
        ours = [KeySequence(seed) for seed in seeds]
        expected = np.array(draw_uniforms(theirs, count))[:, :, 0]
        keys = np.stack([sequence.words() for sequence in ours])
        if not np.array_equal(kernels.uniforms(keys, count), expected):
            return False
        if not np.array_equal(keys, np.stack([sequence.words() for sequence in theirs])):
            return False
    return True


def host_step(model: Model, activations: ExactActivations, blas: str) -> HostStep | None:
    """The host step for ``model`` with the library and the BLAS library at
    ``blas``, or ``None`` where it does not apply (no checked GELU or
    softmax, weights other than float32 or quantized, another activation)
    or where it does not give MLX's numbers."""
    if activations.gelu_tanh is None or activations.softmax is None:
        return None
    blocks = [*model.transformer.h, *model.local_transformer.h]
    if any(
        block.attn.c_attn.weight.dtype != mx.float32
        or "scales" in block.attn.c_attn
        or block.mlp.activation_function != "gelu_new"
        for block in blocks
    ):
        return None
    kernels = Kernels(activations.native, blas)
    generator = np.random.default_rng(5)
    shapes = _product_shapes(model)
    trust_chained_shapes(kernels, shapes, generator)  # a prompt's products
    lone_everywhere = trust_lone_shapes(kernels, shapes, generator)
    stacking = stacking_holds(kernels, prompt_shapes(model), generator)
    own_for_sampling = not (exact_asked() or lone_everywhere)
    host = HostStep(model, kernels, own_for_sampling, stacking, panelled=lone_everywhere)
    if (
        _matches_mlx(host, model)
        and _draws_match(host._kernels, generator)
        and _uniforms_match(host._kernels)
        and own_product_sound(host._kernels, generator)
    ):
        return host
    log.info("the host frame step differs from MLX's here; frames stay in MLX")
    return None


def _product_shapes(model: Model) -> set[tuple[int, int]]:
    """The (outputs, inputs) of the frame step's products of a row each."""
    blocks = [*model.transformer.h, *model.local_transformer.h]
    layers = [
        functools.reduce(getattr, name.split("."), block)
        for block in blocks
        for name in BLOCK_LAYERS
        if name not in ("ln_1", "ln_2")
    ]
    tables = [embedding.weight for embedding in model.audio_embeddings]
    shapes = {tuple(array.shape) for array in [layer.weight for layer in layers] + tables}
    return shapes | {(2, model.config.hidden_size)}  # the text head: slot or end


def _matches_mlx(host: HostStep, model: Model) -> bool:
    """The host step with MLX's numbers against MLX's frame step on random
    rows, bit for bit: a two-row prompt after a three-row prefix and a row
    after them; two prompts stacked, each after a prefix of its own, against
    each alone; three jobs' rows together, each after a prefix of its own,
    against each job's alone; three local positions for one row and for
    three, against each row's alone; both heads the same way. And the three
    jobs' rows with the library's own products and attention, within
    float32's rounding of MLX's."""
    rows = _RandomRows(host, model)
    together, own_close = _rows_together(host, model, rows)
    pairs = [
        *_prompt_then_row(host, model, rows),
        *_prompts_stacked(host, model, rows),
        *together,
        *_local_rows(host, model, rows),
    ]
    return own_close and all(
        np.array_equal(np.reshape(ours, -1), np.array(theirs).reshape(-1))
        for ours, theirs in pairs
    )


class _RandomRows:
    """Random rows of the global transformer's width, and jobs that have
    seen some already, on the host and in MLX's caches."""

    def __init__(self, host: HostStep, model: Model):
        self._generator = np.random.default_rng(4)
        self._model = model
        self._heads, self._dim = host._global.heads, host._global.dim
        self._width = host._global.width

    def __call__(self, count: int) -> mx.array:
        shape = (1, count, self._width)
        return mx.array(self._generator.standard_normal(shape).astype(np.float32))

    def prefixed(self, count: int) -> tuple[HostJob, list[BlockKVCache]]:
        caches = block_caches(len(self._model.transformer.h))
        forward_rows(self._model.transformer, [self(count)], [caches])
        return self.on_host(caches, count), caches

    def on_host(self, caches: list[BlockKVCache], length: int) -> HostJob:
        return HostJob(
            copied_to_host(caches, self._heads, self._dim), length, None, seen=None
        )


def _prompt_then_row(host: HostStep, model: Model, rows: _RandomRows) -> list:
    pairs = []
    job, caches = rows.prefixed(3)
    for part in (rows(2), rows(1)):
        job.rows = np.array(part[0])
        ours = (
            host._global_prompts([job])[0]
            if part.shape[1] > 1
            else host._global_rows([job])[0]
        )
        pairs.append((ours, forward_rows(model.transformer, [part], [caches])[0]))
    return pairs


def _prompts_stacked(host: HostStep, model: Model, rows: _RandomRows) -> list:
    """The shortest prompt that shares its products, stacked with another."""
    pairs = []
    for count in [count for count in range(2, 65) if host.stacks(count)][:1]:
        jobs, caches = zip(*(rows.prefixed(length) for length in (2, 5)), strict=True)
        parts = [rows(count), rows(count + 1)]
        for job, part in zip(jobs, parts, strict=True):
            job.rows = np.array(part[0])
        theirs = [
            forward_rows(model.transformer, [part], [cache])[0]
            for part, cache in zip(parts, caches, strict=True)
        ]
        pairs.append((host._global_prompts(list(jobs)), mx.stack(theirs)))
    return pairs


def _rows_together(host: HostStep, model: Model, rows: _RandomRows) -> tuple[list, bool]:
    """Three jobs' rows together; and whether the library's own products
    come within float32's rounding of MLX's."""
    jobs, caches = zip(*(rows.prefixed(count) for count in (1, 2, 4)), strict=True)
    own_jobs = [
        rows.on_host(cache, job.length) for job, cache in zip(jobs, caches, strict=True)
    ]
    parts = [rows(1) for _ in jobs]
    for job, own_job, part in zip(jobs, own_jobs, parts, strict=True):
        job.rows = own_job.rows = np.array(part[0])
    ours, own = host._global_rows(list(jobs)), host._global_rows(own_jobs, own=True)
    theirs = np.concatenate(
        [
            np.array(forward_rows(model.transformer, [part], [cache]))
            for part, cache in zip(parts, caches, strict=True)
        ]
    )
    return [(ours, theirs)], bool(
        np.all(np.abs(own - theirs) <= 1e-4 * np.abs(theirs).max())
    )


def _local_rows(host: HostStep, model: Model, rows: _RandomRows) -> list:
    """Three local positions for one row and for three, and both heads."""
    pairs = []
    for count in (1, 3):
        local_rows = rows(3 * count)
        locals_ = [LocalPass(model.local_transformer, positions=3) for _ in range(count)]
        host_caches = [host._local_caches() for _ in range(count)]
        for position in range(3):
            part = local_rows[0, position * count : (position + 1) * count]
            ours = host._local_rows(np.array(part), host_caches, position, own=False)
            alone = [local(part[row : row + 1]) for row, local in enumerate(locals_)]
            pairs.append((ours, mx.concatenate(alone)))
        for table in (host._audio[0], host._text_head):
            # row arrays as the step's are (an expanded axis would make MLX
            # call sgemm with the row "transposed", which rounds otherwise)
            alone = [mx.array(row[None]) @ mx.array(table).T for row in ours]
            pairs.append((host._kernels.products(ours, table), mx.concatenate(alone)))
    return pairs
