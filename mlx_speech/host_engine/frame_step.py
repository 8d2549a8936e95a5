"""The Nano frame step on host buffers, outside MLX's graph.

A frame pushes one row per request through every block: 133 matrix products
at Nano's full size, each with a little work between them. Through MLX, each
piece is a graph evaluated on its own stream thread, and the waits between
them cost about as much as the products. Here the whole frame runs on the
worker thread: each block is one call into the C library
(``csrc/``: layer norm, rotation, attention and GELU as MLX
computes them), and each head's draw is in C too, with the uniforms MLX
draws from the requests' keys (its Threefry hash, in C). A request's
prompt runs all its rows through each product at once with sgemm's numbers,
and the prompts of requests that start in one round share each product
where a load check finds each prompt's rows keep those numbers
(``stacking_holds``), each prompt attending over its own cache.

Requests stepped together have their rows stacked in each product, in one of
two kinds, each reading every weight once for all rows (OpenBLAS's sgemm
first copies the weights). Greedy requests, and every request in the
reference mode (``MLX_SPEECH_EXACT=1``), take MLX's numbers: the library's
lone order (each row's numbers those of ``sgemm`` of the BLAS library MLX
itself calls for that row alone, as mlx-audio computes a lone request) for
each product shape where it gives them, ``sgemm`` over the stacked rows
elsewhere; their codes are mlx-audio's bit for bit. Sampling requests take
MLX's numbers too where the lone order holds for every product shape
(OpenBLAS); elsewhere they take the library's own product, which adds up
each row in a fixed order of its own, whatever rows share it: their numbers
differ from MLX's in the last bits (the codes almost never:
``bench/check_fast_products.py`` counts how often), but never with company.

Before use, each product shape's lone order is compared bit for bit with
``sgemm`` of each row alone (a shape that differs takes ``sgemm`` over the
stacked rows), the host step with MLX's on this machine's BLAS, the draws
and their uniforms with MLX's, and the own product with float64 sums
(``host_step``); any difference and frames stay in MLX.
"""

from __future__ import annotations

import functools
import logging
import weakref
from collections.abc import Iterator
from dataclasses import dataclass

import mlx.core as mx
import numpy as np
from mlx_audio.tts.models.moss_tts_nano import Model

from ..families.moss_nano.forward import rotation_at
from ..families.moss_nano.sampling import (
    HeadSampler,
    is_random,
)
from .caches import HostJob, cache_addresses, entered
from .kernels import (
    BLOCK_FIELDS,
    BLOCK_LAYERS,
    PANELLED_LAYERS,
    Kernels,
    Picks,
    host_view,
    panels,
)

log = logging.getLogger("mlx_speech.engine")

# The most prompt rows stacked in one product (the scratch of a block grows
# by about 43 KB a row at Nano's size).
STACKED_ROWS = 256


@dataclass
class _Norm:
    weight: np.ndarray
    bias: np.ndarray
    eps: float


class _Transformer:
    """One transformer's blocks as C structs over host views of its weights,
    and its RoPE tables, grown as positions are reached."""

    def __init__(self, transformer, kernels: Kernels, panelled: bool = False):
        self.blocks = [_block_struct(kernels, block, panelled) for block in transformer.h]
        first = transformer.h[0].attn
        self.heads, self.width = first.num_heads, transformer.h[0].ln_1.weight.shape[0]
        self.dim = self.width // self.heads
        self.final = _Norm(
            host_view(transformer.ln_f.weight),
            host_view(transformer.ln_f.bias),
            transformer.ln_f.eps,
        )
        self._positions = (
            None if transformer.wpe is None else host_view(transformer.wpe.weight)
        )
        self._rotary = first.rotary_emb
        self._cos = self._sin = np.empty((0, self.dim), dtype=np.float32)

    @property
    def panel_bytes(self) -> int:
        """The host memory its blocks' panels take (the rest are views)."""
        return sum(
            view.nbytes
            for _, views in self.blocks
            for view in views[2 * len(BLOCK_LAYERS) :]
        )

    def rotation(self, positions: np.ndarray):
        """RoPE cos and sin at each of ``positions``, each ``[rows, dim]``
        (``None`` without RoPE)."""
        if self._rotary is None:
            return None, None
        end = int(positions.max()) + 1
        if end > len(self._cos):
            size = -(-end // 1024) * 1024
            cos, sin = rotation_at(self._rotary, mx.arange(size, dtype=mx.float32))
            self._cos, self._sin = (
                np.array(table).reshape(size, -1) for table in (cos, sin)
            )
        return self._cos[positions], self._sin[positions]

    def with_positions(self, rows: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """A copy of ``rows`` (``[count, width]``) with the embeddings of
        their ``positions`` added, if the transformer has them."""
        if self._positions is None:
            return rows.copy()
        return rows + self._positions[positions]


def _block_struct(kernels: Kernels, block, panelled: bool) -> tuple[object, list]:
    """``block``'s ``struct block`` and the host arrays it points to (with
    ``panelled``, the panels of its ``PANELLED_LAYERS`` too)."""
    layers = [functools.reduce(getattr, name.split("."), block) for name in BLOCK_LAYERS]
    views = [host_view(array) for layer in layers for array in (layer.weight, layer.bias)]
    fields = {}
    for index, field in enumerate(BLOCK_FIELDS):
        fields[f"{field}_w"], fields[f"{field}_b"] = views[2 * index : 2 * index + 2]
    for field, name in PANELLED_LAYERS.items():
        weight = views[2 * BLOCK_LAYERS.index(name)]
        panel = panels(weight) if panelled else None
        if panel is not None:
            views.append(panel)
            fields[f"{field}_panel"] = panel
    fields.update(
        width=block.ln_1.weight.shape[0],
        heads=block.attn.num_heads,
        inner=block.mlp.fc_in.weight.shape[0],
        eps=block.ln_1.eps,
        scale=block.attn.scale,
    )
    return kernels.struct("block", fields), views


class HostStep:
    """The host side of one Nano model: its transformers' blocks, heads and
    embedding tables, and the library's checked functions."""

    def __init__(
        self,
        model: Model,
        kernels: Kernels,
        own_for_sampling: bool,
        stacking: bool,
        panelled: bool = False,
    ):
        self._kernels = kernels
        self.own_for_sampling = own_for_sampling
        self._stacking = stacking  # prompts may share their products
        self._prompt_shapes = prompt_shapes(model)
        self._global = _Transformer(model.transformer, kernels)
        # read 17 times a frame, the local weights' panels (where its products
        # chain: ``panelled``) repay their memory
        self._local = _Transformer(model.local_transformer, kernels, panelled=panelled)
        config = model.config
        self._n_vq = config.n_vq
        text = host_view(model.transformer.wte.weight)
        self._slot = text[config.audio_assistant_slot_token_id]
        self._text_head = np.ascontiguousarray(
            text[[config.audio_assistant_slot_token_id, config.audio_end_token_id]]
        )
        self._audio = [host_view(embedding.weight) for embedding in model.audio_embeddings]
        self._work = np.empty(0, dtype=np.float32)
        self._jobs: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def _host_job(self, job) -> HostJob:
        """The job's state here, taken over from MLX at its first step."""
        host = self._jobs.get(job)
        if host is None:
            host = self._jobs[job] = entered(job, self._global.heads, self._global.dim)
        return host

    @property
    def held_bytes(self) -> int:
        """The host memory it keeps beside the model's own weights (of which
        it holds views): its panels, its copy of the text head and its
        scratch."""
        panels = self._global.panel_bytes + self._local.panel_bytes
        return panels + self._text_head.nbytes + self._work.nbytes

    def step(self, jobs: list) -> None:
        """One frame for each of ``jobs`` (none of them done), their prompts
        first for those on them (see ``caches.entered``). Sampling jobs in the
        fast mode take the library's own products where the lone order does
        not hold for every product shape, the others MLX's; each kind has
        its rows stacked in every product."""
        own = [self.own_for_sampling and not job.sampling.greedy for job in jobs]
        for kind in (False, True):
            group = [job for job, takes in zip(jobs, own, strict=True) if takes == kind]
            if group:
                self._step_group(group, kind)

    def _step_group(self, jobs: list, own: bool) -> None:
        hosts = [self._host_job(job) for job in jobs]
        hidden = np.empty((len(jobs), self._global.width), np.float32)
        single = [index for index, host in enumerate(hosts) if len(host.rows) == 1]
        prompts = [index for index, host in enumerate(hosts) if len(host.rows) > 1]
        for group in self._prompt_groups(hosts, prompts):
            hidden[group] = self._global_prompts([hosts[index] for index in group])
        if single:
            hidden[single] = self._global_rows([hosts[index] for index in single], own)
        self._frame(jobs, hosts, hidden, own)

    def _frame(self, jobs: list, hosts: list[HostJob], hidden: np.ndarray, own: bool):
        """The local transformer and heads over each job's global hidden
        state: the stop choice, then (for jobs that go on) one code per
        codebook."""
        local = [self._local_caches() for _ in jobs]
        uniforms = self._uniforms(jobs)
        out = self._local_rows(hidden, local, 0, own)
        text_logits = self._kernels.products(out, self._text_head)
        going = []
        for job, logits, draws in zip(jobs, text_logits, uniforms, strict=True):
            job.frame = None
            job.stopped = self._pick(logits, job.sampling.text, draws) != 0
            going.append(not job.stopped)
        live = [index for index, go in enumerate(going) if go]
        if not live:
            return
        previous = np.tile(self._slot, (len(live), 1))
        codes = np.empty((len(live), self._n_vq), dtype=np.int64)
        samplers = [jobs[index].sampling.audio for index in live]
        picks = Picks(
            self._kernels,
            samplers,
            len(self._audio[0]),  # every codebook's size
            [hosts[index].seen for index in live],
            [jobs[index].sampling.repetition_penalty for index in live],
        )
        for channel, table in enumerate(self._audio):
            out = self._local_rows(
                previous, [local[index] for index in live], channel + 1, own
            )
            logits = self._kernels.products(out, table, own)
            drawn = [
                next(uniforms[index]) if is_random(sampler) else 0.0
                for index, sampler in zip(live, samplers, strict=True)
            ]
            codes[:, channel] = picks(logits, drawn, channel)
            previous = table[codes[:, channel]]
        for row, index in enumerate(live):
            self._finish(jobs[index], hosts[index], codes[row])

    def _finish(self, job, host: HostJob, codes: np.ndarray) -> None:
        host.seen[np.arange(self._n_vq), codes] = True
        row = self._slot
        for table, code in zip(self._audio, codes, strict=True):
            row = row + table[code]
        host.rows = row[None]
        job.record_frame(mx.array(codes, dtype=mx.int32))

    def _prompt_groups(self, hosts: list[HostJob], prompts: list[int]) -> list[list[int]]:
        """The jobs on their prompts (``prompts``: indices into ``hosts``) in
        groups whose rows share each product: in order, up to
        ``STACKED_ROWS`` rows a group; alone, a prompt whose numbers could
        change beside others."""
        groups: list[list[int]] = []
        alone: list[list[int]] = []
        stacked = 0
        for index in prompts:
            count = len(hosts[index].rows)
            if not self.stacks(count):
                alone.append([index])
            elif groups and stacked + count <= STACKED_ROWS:
                groups[-1].append(index)
                stacked += count
            else:
                groups.append([index])
                stacked = count
        return groups + alone

    def stacks(self, count: int) -> bool:
        """Whether a prompt of ``count`` rows may share its products: where
        the load check found stacked rows keep their numbers, unless
        OpenBLAS's small-matrix kernel would take the prompt alone."""
        return self._stacking and not any(
            self._kernels.small_kernel_takes(count, outs, ins)
            for outs, ins in self._prompt_shapes
        )

    def _global_prompts(self, hosts: list[HostJob]) -> np.ndarray:
        """The global transformer over jobs' prompt rows, stacked in each
        product (one sgemm's numbers for each prompt's rows, as MLX would run
        it) → each job's last row's hidden state, ``[jobs, width]``."""
        transformer, counts = self._global, [len(host.rows) for host in hosts]
        for host in hosts:
            host.room()
        starts = [host.length for host in hosts]
        positions = np.concatenate(
            [
                np.arange(start, start + count)
                for start, count in zip(starts, counts, strict=True)
            ]
        )
        rows = np.concatenate([host.rows for host in hosts])
        x = transformer.with_positions(rows, positions)
        cos, sin = transformer.rotation(positions)
        work = self._scratch(self._prompt_floats(transformer, starts, counts))
        for layer, (block, _) in enumerate(transformer.blocks):
            caches = [host.caches[layer] for host in hosts]
            self._prompt_block(block, x, caches, starts, counts, cos, sin, work)
        for host, count in zip(hosts, counts, strict=True):
            host.length += count
        return self._final(transformer, x[np.cumsum(counts) - 1])

    def _global_rows(self, hosts: list[HostJob], own: bool = False) -> np.ndarray:
        """The global transformer over each job's next row → their hidden
        states, ``[jobs, width]``."""
        for host in hosts:
            host.room()
        positions = np.array([host.length for host in hosts])
        rows = np.concatenate([host.rows for host in hosts])
        x = self._through(
            self._global, rows, [host.caches for host in hosts], positions, own
        )
        for host in hosts:
            host.length += 1
        return x

    def _local_caches(self) -> list[tuple[np.ndarray, np.ndarray]]:
        local = self._local
        shape = (local.heads, self._n_vq + 1, local.dim)
        return [
            (np.empty(shape, np.float32), np.empty(shape, np.float32)) for _ in local.blocks
        ]

    def _local_rows(self, rows: np.ndarray, caches: list, position: int, own: bool):
        """The local transformer at ``position`` for each job's row (``[jobs,
        width]``; ``caches``: each job's) → their hidden states."""
        positions = np.full(len(rows), position)
        return self._through(self._local, rows, caches, positions, own)

    def _through(self, transformer: _Transformer, rows, caches, positions, own: bool):
        """Rows (one per job, each at its position, over its own caches)
        through every block and the final layer norm."""
        x = transformer.with_positions(rows, positions)
        cos, sin = transformer.rotation(positions)
        for layer, (block, _) in enumerate(transformer.blocks):
            pairs = [job_caches[layer] for job_caches in caches]
            self._block(block, x, pairs, positions, cos, sin, own)
        return self._final(transformer, x)

    def _final(self, transformer: _Transformer, x: np.ndarray) -> np.ndarray:
        final = transformer.final
        return self._kernels.norm(x, final.weight, final.bias, final.eps)

    @staticmethod
    def _prompt_floats(transformer: _Transformer, starts, counts) -> int:
        """The scratch ``block_prompts`` needs over prompts of ``counts`` rows
        from positions ``starts``."""
        block = transformer.blocks[0][0]
        longest = max(start + count for start, count in zip(starts, counts, strict=True))
        size = sum(counts) * (6 * block.width + 2 * block.inner)
        return size + max(counts) * (2 * transformer.dim + longest)

    def _scratch(self, floats: int) -> np.ndarray:
        """The library's scratch for a call, kept and grown as needed: a new
        one each call would have its pages faulted in anew (a burst's
        prompts take 9 MB at Nano's size)."""
        if self._work.size < floats:
            self._work = np.empty(floats + 1024, dtype=np.float32)
        return self._work

    def _prompt_block(self, block, x, caches, starts, counts, cos, sin, work):
        """One block over prompts' rows stacked in ``x``, in place
        (``caches``: each prompt's keys and values of this layer)."""
        keys, values, capacities = cache_addresses(caches)
        starts, counts = (np.array(each, dtype=np.int64) for each in (starts, counts))
        at = self._kernels.at
        self._kernels.block_prompts(
            block,
            len(caches),
            at(counts),
            at(x),
            at(keys),
            at(values),
            at(capacities),
            at(starts),
            at(cos),
            at(sin),
            at(work),
        )

    def _block(self, block, x, caches, positions, cos, sin, own: bool) -> None:
        """One block over rows of several jobs (``caches``: each one's keys
        and values of this layer), in place."""
        scratch = block.width // block.heads + int(positions.max()) + 1  # a row's attention
        work = self._scratch(len(x) * (5 * block.width + 2 * block.inner + scratch))
        keys, values, capacities = cache_addresses(caches)
        positions = np.ascontiguousarray(positions, dtype=np.int64)  # kept while C reads it
        at = self._kernels.at
        self._kernels.block_rows(
            block,
            len(x),
            at(x),
            at(keys),
            at(values),
            at(capacities),
            at(positions),
            at(cos),
            at(sin),
            int(own),
            at(work),
        )

    def _uniforms(self, jobs: list) -> list[Iterator[float]]:
        """Each job's draws of the frame, taken at once (one MLX graph for
        the jobs with as many draws): the stop head's, then each codebook's,
        from the keys they would take one by one. (If a job stops, its
        codebooks' keys are spent, but the job is done.)"""
        counts = [
            sum(map(is_random, [job.sampling.text, *[job.sampling.audio] * self._n_vq]))
            for job in jobs
        ]
        draws: list[Iterator[float]] = [iter(()) for _ in jobs]
        for count in set(counts) - {0}:
            members = [index for index, own in enumerate(counts) if own == count]
            keys = np.stack([jobs[index].keys.words() for index in members])
            values = self._kernels.uniforms(keys, count)
            for position, index in enumerate(members):
                jobs[index].keys.continue_from(keys[position])
                draws[index] = iter(values[:, position].tolist())
        return draws

    def _pick(self, logits: np.ndarray, sampler: HeadSampler, uniforms) -> int:
        if not is_random(sampler):
            return int(np.argmax(logits))
        return self._kernels.draw(logits, sampler, next(uniforms))


def prompt_shapes(model: Model) -> set[tuple[int, int]]:
    """The (outputs, inputs) of a global block's products, a prompt's."""
    block = model.transformer.h[0]
    layers = [block.attn.c_attn, block.attn.c_proj, block.mlp.fc_in, block.mlp.fc_out]
    return {tuple(layer.weight.shape) for layer in layers}
