"""A lone request's frame step on host buffers, outside MLX's graph.

Stepped alone, a request pushes one row through every block: 133 matrix
products per frame at Nano's full size, each with a little work between
them. Through MLX, each piece is a graph evaluated on its own stream thread,
and the waits between them cost about as much as the products. Here the
whole frame runs on the worker thread: each block is one call into the C
library (``exact_activations.c``: layer norm, rotation, attention and GELU as
MLX computes them), its products through the BLAS library MLX itself calls,
and each head's draw in C too; only the frame's uniforms come from MLX (the
request's keys are MLX's), all in one graph.

The products come in two kinds. ``sgemm`` as MLX calls it gives MLX's numbers,
so the codes are mlx-audio's bit for bit (greedy requests, and every request
in the reference mode, ``MLX_SPEECH_EXACT=1``). ``sgemv`` reads the weights
once where OpenBLAS's sgemm first copies them, in about half the time, but
adds up each row in another order (the last bits differ; the codes almost
never: ``bench/check_fast_products.py`` counts how often); sampling requests
take it.

Before use, the host step is compared bit for bit with MLX's on this
machine's BLAS (``lone_row_model``); any difference and frames stay in MLX. A
request that joins others takes its caches back to MLX (``leave_host``);
requests stepped together keep MLX's batched products.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import mlx.core as mx
import numpy as np
from mlx_audio.tts.models.moss_tts_nano import Model

from ...blas import mlx_blas
from .codec_math import exact_asked
from .exact_activations import exact_activations
from .forward import LocalPass, forward_rows, rotation_at
from .kv_cache import BLOCK, BlockKVCache, block_caches
from .sampling import HeadSampler, _filtered_draw, draw_uniforms, is_random

log = logging.getLogger("mlx_speech.engine")

_POINTER = ctypes.c_void_p
_COUNT = ctypes.c_long


# A block's layers in the order of ``struct block``'s pointers: each its
# weight, then its bias.
_BLOCK_LAYERS = ("ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.fc_in", "mlp.fc_out")


class _Block(ctypes.Structure):
    """``struct block`` of the C library."""

    _fields_ = [
        *[
            (f"{layer.replace('.', '_')}_{part}", _POINTER)
            for layer in _BLOCK_LAYERS
            for part in ("weight", "bias")
        ],
        ("width", _COUNT),
        ("heads", _COUNT),
        ("inner", _COUNT),
        ("eps", ctypes.c_float),
        ("scale", ctypes.c_float),
    ]


class _Kernels:
    """The library's row functions, bound to the BLAS MLX calls."""

    def __init__(self, library: ctypes.CDLL, blas: ctypes.CDLL):
        library.use_blas.argtypes = [_POINTER, _POINTER]
        library.use_blas(
            ctypes.cast(blas.cblas_sgemv, _POINTER), ctypes.cast(blas.cblas_sgemm, _POINTER)
        )
        # each entry's C signature, as letters: p pointer, n count, f float,
        # i int, b the block struct; the result: v none, n a count
        signatures = {
            "row_product": "ppppnni:v",
            "layer_norm": "pppfpnn:v",
            "block_row": "bpppnnppip:v",
            "block_prompt": "bnpppnnppp:v",
            "filtered_draw": "pnfniffpp:n",
        }
        types = {"p": _POINTER, "n": _COUNT, "f": ctypes.c_float, "i": ctypes.c_int}
        types["b"], types["v"] = ctypes.POINTER(_Block), None
        for name, signature in signatures.items():
            arguments, result = signature.split(":")
            entry = getattr(library, name)
            entry.argtypes = [types[letter] for letter in arguments]
            entry.restype = types[result]
            setattr(self, name, entry)
        self._draw_work = np.empty(0, dtype=np.float32)
        # struct ranked: a float and a long, aligned as C lays them out
        ranked = np.dtype([("value", np.float32), ("index", np.int64)], align=True)
        self._ranks = np.empty(0, dtype=ranked)

    def product(self, x: np.ndarray, weight: np.ndarray, bias, gemv: bool) -> np.ndarray:
        out = np.empty(weight.shape[0], dtype=np.float32)
        self.row_product(
            x.ctypes.data,
            weight.ctypes.data,
            None if bias is None else bias.ctypes.data,
            out.ctypes.data,
            weight.shape[0],
            weight.shape[1],
            int(gemv),
        )
        return out

    def draw(self, logits: np.ndarray, sampler: HeadSampler, uniform: float) -> int:
        """``sampling._filtered_draw`` of one row, here; MLX's where a tie
        at the top-k boundary leaves the kept tokens to MLX's partition."""
        vocab = logits.size
        top_k = sampler.top_k if 0 < sampler.top_k < vocab else 0
        if self._draw_work.size < 2 * vocab + top_k + 1:
            self._draw_work = np.empty(2 * vocab + top_k + 1, dtype=np.float32)
        if self._ranks.size < vocab:
            self._ranks = np.empty(vocab, dtype=self._ranks.dtype)
        top_p = 0 < sampler.top_p < 1
        token = self.filtered_draw(
            logits.ctypes.data,
            vocab,
            float(sampler.temperature),
            top_k,
            int(top_p),
            1 - sampler.top_p,
            uniform,
            self._draw_work.ctypes.data,
            self._ranks.ctypes.data,
        )
        if token >= 0:
            return token
        draw = _filtered_draw(mx.array(logits[None]), mx.array([[uniform]]), sampler)
        return draw.item()

    def norm(self, x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float):
        out = np.empty_like(x)
        self.layer_norm(
            x.ctypes.data,
            weight.ctypes.data,
            bias.ctypes.data,
            eps,
            out.ctypes.data,
            x.size,
            x.shape[-1],
        )
        return out


def _host(array: mx.array) -> np.ndarray:
    """A float32 host view of an MLX array's memory (kept valid by the array,
    which the model holds)."""
    mx.eval(array)
    return np.asarray(array)


@dataclass
class _Norm:
    weight: np.ndarray
    bias: np.ndarray
    eps: float


class _Transformer:
    """One transformer's blocks as C structs over host views of its weights,
    and its RoPE tables, grown as positions are reached."""

    def __init__(self, transformer):
        self.blocks = [_block_struct(block) for block in transformer.h]
        first = transformer.h[0].attn
        self.heads, self.width = first.num_heads, transformer.h[0].ln_1.weight.shape[0]
        self.dim = self.width // self.heads
        self.inner = transformer.h[0].mlp.fc_in.weight.shape[0]
        self.final = _Norm(
            _host(transformer.ln_f.weight),
            _host(transformer.ln_f.bias),
            transformer.ln_f.eps,
        )
        self._positions = None if transformer.wpe is None else _host(transformer.wpe.weight)
        self._rotary = first.rotary_emb
        self._cos = self._sin = np.empty((0, self.dim), dtype=np.float32)

    def rotation(self, start: int, count: int = 1):
        """RoPE cos and sin of positions ``start..start + count``, each
        ``[count, dim]`` (``None`` without RoPE)."""
        if self._rotary is None:
            return None, None
        if start + count > len(self._cos):
            size = -(-(start + count) // 1024) * 1024
            cos, sin = rotation_at(self._rotary, mx.arange(size, dtype=mx.float32))
            self._cos, self._sin = (
                np.array(table).reshape(size, -1) for table in (cos, sin)
            )
        return self._cos[start : start + count], self._sin[start : start + count]

    def with_positions(self, rows: np.ndarray, start: int) -> np.ndarray:
        """A copy of ``rows`` (``[count, width]``) with their position
        embeddings added, if the transformer has them."""
        if self._positions is None:
            return rows.copy()
        return rows + self._positions[start : start + len(rows)]


def _block_struct(block) -> tuple[_Block, list[np.ndarray]]:
    layers = [functools.reduce(getattr, name.split("."), block) for name in _BLOCK_LAYERS]
    views = [_host(array) for layer in layers for array in (layer.weight, layer.bias)]
    struct = _Block(
        *[view.ctypes.data for view in views],
        width=block.ln_1.weight.shape[0],
        heads=block.attn.num_heads,
        inner=block.mlp.fc_in.weight.shape[0],
        eps=block.ln_1.eps,
        scale=block.attn.scale,
    )
    return struct, views


class HostRow:
    """A lone job's state while it is stepped here: its keys and values per
    layer (``[heads, capacity, dim]``), its next input rows (``[count,
    width]``: its prompt, then one row a frame) and its history."""

    def __init__(self, caches, length: int, rows: np.ndarray, seen: np.ndarray):
        self.caches = caches
        self.length = length
        self.rows = rows
        self.seen = seen

    def room(self) -> None:
        """Grow the caches by blocks until the next rows fit."""
        capacity = self.caches[0][0].shape[1]
        needed = -(-(self.length + len(self.rows)) // BLOCK) * BLOCK
        if needed <= capacity:
            return
        grown = []
        for keys, values in self.caches:
            more = [np.zeros((keys.shape[0], needed, keys.shape[2]), np.float32)]
            more.append(np.zeros_like(more[0]))
            more[0][:, :capacity], more[1][:, :capacity] = keys, values
            grown.append(tuple(more))
        self.caches = grown


def enter_host(job, heads: int, dim: int) -> HostRow:
    """The job's MLX state (its caches: ``heads`` of ``dim``) as host buffers."""
    if job.host is None:
        mx.eval(job.inputs, job.history.seen)
        rows = np.array(job.inputs[0])
        caches = _host_caches(job.cache, heads, dim)
        job.host = HostRow(caches, job.cache[0].offset, rows, np.array(job.history.seen))
        job.inputs = job.cache = None
    return job.host


def _host_caches(caches: list[BlockKVCache], heads: int, dim: int):
    mx.eval([(cache.keys, cache.values) for cache in caches])
    length = caches[0].offset
    capacity = -(-(length + 1) // BLOCK) * BLOCK
    pairs = []
    for cache in caches:
        pair = []
        for array in (cache.keys, cache.values):
            host = np.zeros((heads, capacity, dim), np.float32)
            if length:
                host[:, :length] = np.asarray(array[0, :, :length])
            pair.append(host)
        pairs.append(tuple(pair))
    return pairs


def leave_host(job) -> None:
    """Hands a job stepped here back to MLX, where it left off."""
    host, job.host = job.host, None
    if host is None:
        return
    job.cache = []
    for keys, values in host.caches:
        cache = BlockKVCache()
        cache.keys, cache.values = mx.array(keys[None]), mx.array(values[None])
        cache.offset = host.length
        job.cache.append(cache)
    job.inputs = mx.array(host.rows)[None]
    job.history.seen = mx.array(host.seen)


class LoneRowModel:
    """The host side of one Nano model: its transformers' blocks, heads and
    embedding tables, and the library's checked functions."""

    def __init__(self, model: Model, kernels: _Kernels, fast: bool):
        self._kernels = kernels
        self.fast = fast
        self._global = _Transformer(model.transformer)
        self._local = _Transformer(model.local_transformer)
        config = model.config
        self._n_vq = config.n_vq
        text = _host(model.transformer.wte.weight)
        self._slot = text[config.audio_assistant_slot_token_id]
        self._text_head = np.ascontiguousarray(
            text[[config.audio_assistant_slot_token_id, config.audio_end_token_id]]
        )
        self._audio = [_host(embedding.weight) for embedding in model.audio_embeddings]
        self._work = np.empty(0, dtype=np.float32)

    def step(self, job) -> None:
        """One frame for ``job`` (its prompt first, if it is on it), here
        (see ``enter_host``)."""
        host = enter_host(job, self._global.heads, self._global.dim)
        gemv = self.fast and not job.sampling.greedy
        hidden = self._global_step(host, gemv)
        local = self._local_caches()
        uniforms = self._uniforms(job)
        going = self._text_choice(
            job, self._local_position(hidden, local, 0, gemv), uniforms
        )
        job.frame = None
        job.stopped = not going
        if not going:
            return
        sampler = job.sampling.audio
        previous, codes = self._slot, []
        for channel, table in enumerate(self._audio):
            out = self._local_position(previous, local, channel + 1, gemv)
            logits = self._kernels.product(out, table, None, gemv)
            logits = _penalized(logits, host.seen[channel, : len(logits)], job)
            code = self._pick(logits, sampler, uniforms)
            codes.append(code)
            previous = table[code]
        host.seen[np.arange(self._n_vq), codes] = True
        row = self._slot
        for table, code in zip(self._audio, codes, strict=True):
            row = row + table[code]
        host.rows = row[None]
        job.frame = mx.array(codes, dtype=mx.int32)
        job.frames_done += 1

    def _global_step(self, host: HostRow, gemv: bool) -> np.ndarray:
        """The global transformer over the job's next rows (a prompt's rows
        take MLX's products, as MLX would run them) → the last one's hidden
        state."""
        host.room()
        transformer, count = self._global, len(host.rows)
        x = transformer.with_positions(host.rows, host.length)
        cos, sin = transformer.rotation(host.length, count)
        for (block, _), (keys, values) in zip(transformer.blocks, host.caches, strict=True):
            if count == 1:
                self._block(block, x, keys, values, host.length, cos, sin, gemv)
            else:
                self._prompt_block(block, x, keys, values, host.length, cos, sin)
        host.length += count
        final = transformer.final
        return self._kernels.norm(x[-1], final.weight, final.bias, final.eps)

    def _local_caches(self) -> list[tuple[np.ndarray, np.ndarray]]:
        local = self._local
        shape = (local.heads, self._n_vq + 1, local.dim)
        return [
            (np.empty(shape, np.float32), np.empty(shape, np.float32)) for _ in local.blocks
        ]

    def _local_position(self, row: np.ndarray, caches, position: int, gemv: bool):
        transformer = self._local
        x = transformer.with_positions(row[None], position)
        cos, sin = transformer.rotation(position)
        for (block, _), (keys, values) in zip(transformer.blocks, caches, strict=True):
            self._block(block, x, keys, values, position, cos, sin, gemv)
        final = transformer.final
        return self._kernels.norm(x[0], final.weight, final.bias, final.eps)

    def _prompt_block(self, block: _Block, x, keys, values, start: int, cos, sin) -> None:
        rows, dim = len(x), block.width // block.heads
        work = np.empty(
            rows * (6 * block.width + 2 * block.inner + 2 * dim + start + rows), np.float32
        )
        self._kernels.block_prompt(
            ctypes.byref(block),
            rows,
            x.ctypes.data,
            keys.ctypes.data,
            values.ctypes.data,
            keys.shape[1],
            start,
            None if cos is None else cos.ctypes.data,  # rows of the tables
            None if sin is None else sin.ctypes.data,
            work.ctypes.data,
        )

    def _block(self, block: _Block, x, keys, values, position: int, cos, sin, gemv) -> None:
        needed = (
            5 * block.width + 2 * block.inner + block.width // block.heads + position + 1
        )
        if self._work.size < needed:
            self._work = np.empty(needed + 1024, dtype=np.float32)
        self._kernels.block_row(
            ctypes.byref(block),
            x.ctypes.data,
            keys.ctypes.data,
            values.ctypes.data,
            keys.shape[1],
            position,
            None if cos is None else cos.ctypes.data,
            None if sin is None else sin.ctypes.data,
            int(gemv),
            self._work.ctypes.data,
        )

    def _uniforms(self, job) -> Iterator[float]:
        """The frame's draws, taken at once (one MLX graph): the stop head's,
        then each codebook's, from the keys they would take one by one. (If
        the model stops, the codebooks' keys are spent, but the job is done.)"""
        heads = [job.sampling.text, *[job.sampling.audio] * self._n_vq]
        count = sum(map(is_random, heads))
        if not count:
            return iter(())
        return iter(np.array(draw_uniforms([job.keys], count)).reshape(-1).tolist())

    def _text_choice(self, job, hidden: np.ndarray, uniforms: Iterator[float]) -> bool:
        logits = self._kernels.product(hidden, self._text_head, None, gemv=False)
        return self._pick(logits, job.sampling.text, uniforms) == 0

    def _pick(self, logits: np.ndarray, sampler: HeadSampler, uniforms) -> int:
        if not is_random(sampler):
            return int(np.argmax(logits))
        return self._kernels.draw(logits, sampler, next(uniforms))


_CHECKED_SAMPLERS = (
    HeadSampler(0.8, 25, 0.95),
    HeadSampler(1.0, 50, 1.0),
    HeadSampler(0.6, 0, 0.8),
    HeadSampler(1.3, 0, 1.0),
)


def _draws_match(kernels: _Kernels, generator: np.random.Generator) -> bool:
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


def _penalized(logits: np.ndarray, seen: np.ndarray, job) -> np.ndarray:
    """``sampling.penalize_repeats`` for one row, the same float32 operations."""
    penalty = np.float32(job.sampling.repetition_penalty)
    if penalty == 1.0:
        return logits
    scaled = np.where(logits < 0, logits * penalty, logits / penalty)
    return np.where(seen, scaled, logits)


def lone_row_model(model: Model, blas: str | None = None) -> LoneRowModel | None:
    """The host step for ``model`` with the BLAS library at ``blas`` (by
    default the one MLX runs on), or ``None`` where it does not apply
    (another platform or device, no C library, weights other than float32 or
    quantized, another activation) or where it does not give MLX's numbers."""
    if sys.platform != "linux" or mx.default_device() != mx.cpu:
        return None
    activations, blas = exact_activations(), blas or mlx_blas()
    if activations is None or blas is None:
        return None
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
    lone = LoneRowModel(
        model, _Kernels(activations.library, ctypes.CDLL(blas)), not exact_asked()
    )
    return lone if _matches_mlx(lone, model) else None


def _matches_mlx(lone: LoneRowModel, model: Model) -> bool:
    """The host step with sgemm against MLX's frame step on random rows: a
    two-row prompt after a three-row prefix and a row after them, three
    local positions, both kinds of head, and the draws."""
    generator = np.random.default_rng(4)

    def rows(count: int) -> mx.array:
        width = lone._global.width
        return mx.array(generator.standard_normal((1, count, width)).astype(np.float32))

    prompt, caches = rows(6), block_caches(len(model.transformer.h))
    forward_rows(model.transformer, [prompt[:, :3]], [caches])
    heads, dim = lone._global.heads, lone._global.dim
    host = HostRow(_host_caches(caches, heads, dim), 3, np.array(prompt[0, 3:5]), seen=None)
    pairs = []
    for part in (prompt[:, 3:5], prompt[:, 5:]):
        ours = lone._global_step(host, gemv=False)
        pairs.append((ours, forward_rows(model.transformer, [part], [caches])[0]))
        host.rows = np.array(prompt[0, 5:])
    local_rows, local = rows(3), LocalPass(model.local_transformer, positions=3)
    host_caches = lone._local_caches()
    for position in range(3):
        row = local_rows[:, position]
        ours = lone._local_position(np.array(row[0]), host_caches, position, gemv=False)
        pairs.append((ours, local(row)[0]))
    hidden = np.array(local_rows[0, 0])
    for table in (lone._audio[0], lone._text_head):
        ours = lone._kernels.product(hidden, table, None, gemv=False)
        # a row array as the step's are (an expanded axis would make MLX
        # call sgemm with the row "transposed", which rounds otherwise)
        pairs.append((ours, mx.array(hidden.reshape(1, -1)) @ mx.array(table).T))
    same = all(np.array_equal(ours, np.array(theirs).reshape(-1)) for ours, theirs in pairs)
    same = same and _draws_match(lone._kernels, generator)
    if not same:
        log.warning("the host frame step differs from MLX's here; frames stay in MLX")
    return same
