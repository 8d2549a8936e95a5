"""The codec decoder's streaming step on host buffers, outside MLX's graph.

``codec.decode_together`` runs the decoder's stages as MLX graphs: a few
hundred small operations a pass, and a wait for the host at every layer of
every request (its attention's softmax comes from C). For a stream's first
chunks, one frame or two, that overhead was most of the decode (one frame:
12 ms, of which 2 ms are products). Here a pass is the quantizer's lookup in
MLX (one graph, with the rotation tables), then each transformer layer one
call into the C library (``codec_layer`` in ``csrc/codec_layer.c``) over
all requests' steps, with each request attending over its own history kept
in host buffers, and the patch reshapes in numpy. Every number is computed
as MLX computes it (products through the sgemm MLX calls, MLX's layer norm,
rotation, attention and exact GELU), and the decoder is checked against
MLX's bit for bit before it is used (``host_decoder``); except, in the fast
mode, the attention: the library's own, each query over only the keys it
sees, whose audio is checked against the exact decoder's within
``FAST_LARGEST_ERROR``.
"""

from __future__ import annotations

import logging
import math

import mlx.core as mx
import numpy as np
from mlx_audio.codec import MossAudioTokenizer
from mlx_audio.codec.models.moss_audio_tokenizer.moss_audio_tokenizer import (
    Identity,
    PatchedPretransform,
    ProjectedTransformer,
)

from ..families.moss_nano.codec import DecoderState, decode_together
from ..families.moss_nano.codec_math import EXACT
from ..families.moss_nano.quantizer import QuantizerLookup
from .kernels import Kernels, host_view, trust_chained_shapes
from .library import ExactActivations

log = logging.getLogger("mlx_speech.engine")


def _layer_struct(kernels: Kernels, layer) -> tuple[object, list[np.ndarray]]:
    """``layer``'s ``struct codec_layer`` and the host arrays it points to."""
    attention = layer.self_attn
    width = attention.embed_dim

    def scale(module) -> np.ndarray:
        if isinstance(module, Identity):
            return np.ones(width, np.float32)  # times 1 changes no number
        return host_view(module.scale)

    weights = {
        "norm1_w": host_view(layer.norm1.weight),
        "norm1_b": host_view(layer.norm1.bias),
        "in_w": host_view(attention.in_proj.weight),
        "out_w": host_view(attention.out_proj.weight),
        "scale1": scale(layer.layer_scale_1),
        "norm2_w": host_view(layer.norm2.weight),
        "norm2_b": host_view(layer.norm2.bias),
        "ffn_in_w": host_view(layer.ffn[0].weight),
        "ffn_out_w": host_view(layer.ffn[2].weight),
        "scale2": scale(layer.layer_scale_2),
    }
    struct = kernels.struct(
        "codec_layer",
        {
            **weights,
            "width": width,
            "heads": attention.num_heads,
            "inner": layer.ffn[0].weight.shape[0],
            "context": attention.context or 0,
            "eps": layer.norm1.eps,
            "scale": attention.head_dim**-0.5,
        },
    )
    return struct, list(weights.values())


class _Stage:
    """A transformer stage: its projections (``None``: the identity), its
    layers as C structs, and its rotation's frequencies."""

    def __init__(self, stage: ProjectedTransformer, kernels: Kernels):
        def projection(module) -> np.ndarray | None:
            return None if isinstance(module, Identity) else host_view(module.weight)

        self.input = projection(stage.input_proj)
        self.output = projection(stage.output_proj)
        self.layers = [_layer_struct(kernels, layer) for layer in stage.transformer.layers]
        attention = stage.transformer.layers[0].self_attn
        self.heads, self.dim = attention.num_heads, attention.head_dim
        exponents = mx.arange(self.dim // 2, dtype=mx.float32)
        self.frequencies = mx.exp(
            exponents * (-math.log(attention.max_period) * 2.0 / self.dim)
        )


class _History:
    """One request's keys and values of one layer, ``[heads, capacity, dim]``,
    their first ``kept`` positions."""

    def __init__(self, heads: int, dim: int):
        self.keys = np.zeros((heads, 0, dim), np.float32)
        self.values = np.zeros((heads, 0, dim), np.float32)
        self.kept = 0

    def room(self, steps: int, context: int) -> None:
        """Grow until ``steps`` more positions fit after the kept ones."""
        needed, capacity = self.kept + steps, self.keys.shape[1]
        if needed <= capacity:
            return
        grown = max(needed, 2 * capacity)
        if context:
            grown = min(grown, max(needed, context - 1 + steps))
        for name in ("keys", "values"):
            old = getattr(self, name)
            # left unset past the kept positions: each step writes its own
            # before any attention reads it
            new = np.empty((old.shape[0], grown, old.shape[2]), np.float32)
            new[:, : self.kept] = old[:, : self.kept]
            setattr(self, name, new)


class HostDecoderState:
    """One request's place in the host decoder: per transformer stage, the
    position of its next step and each layer's history."""

    def __init__(self, stages: list[_Stage | None], channels: int = 1):
        self.channels = channels  # of the audio handed out: 1 is a downmix
        self.offsets = [0 for _ in stages]
        self.histories = [
            None
            if stage is None
            else [_History(stage.heads, stage.dim) for _ in stage.layers]
            for stage in stages
        ]


# LANES of the C library: the fast attention's scratch is counted in them
_LANES = 16


class HostDecoder:
    """The host side of one codec's decoder; ``fast``: with the fast mode's
    attention (``codec_layer``), else every number MLX's."""

    def __init__(self, codec: MossAudioTokenizer, n_vq: int, kernels: Kernels, fast: bool):
        self._codec = codec
        self._n_vq = n_vq
        self._kernels = kernels
        self.fast = fast
        self._quantizer = QuantizerLookup(codec.quantizer)
        self._stages = [
            _Stage(stage, kernels) if isinstance(stage, ProjectedTransformer) else None
            for stage in codec.decoder
        ]
        self._work = np.empty(0, np.float32)

    def state(self, channels: int = 1) -> HostDecoderState:
        return HostDecoderState(self._stages, channels)

    def decode_together(
        self, work: list[tuple[HostDecoderState, list[mx.array]]]
    ) -> list[np.ndarray]:
        """Each request's frames (``[n_vq]`` codes each), which follow that
        request's previous call → per request its audio, float32 ``[samples,
        codec channels]``. Between stages the steps are columns, ``[channels,
        steps]``, as in MLX."""
        lengths = [len(frames) for _, frames in work]
        hidden, tables = self._lookup(work, lengths)
        for index, stage in enumerate(self._codec.decoder):
            if isinstance(stage, PatchedPretransform):
                hidden = _unpatched(hidden, stage.patch_size)
                lengths = [length * stage.patch_size for length in lengths]
            else:
                states = [state for state, _ in work]
                hidden = self._stage(index, hidden, lengths, states, tables[index])
        codec = self._codec
        if codec.enable_channel_interleave and codec.channels > 1:
            audio = np.ascontiguousarray(hidden[0]).reshape(-1, codec.channels)
            lengths = [length // codec.channels for length in lengths]
        else:
            audio = np.ascontiguousarray(hidden.T)
        return np.split(audio, np.cumsum(lengths)[:-1])

    def _lookup(self, work, lengths: list[int]):
        """The quantizer's output (``[channels, steps]``) and, per transformer
        stage, the rotation's cos and sin at every step's position, ``[steps,
        dim]`` each: all in one MLX graph."""
        codes = mx.stack([frame for _, frames in work for frame in frames])[:, : self._n_vq]
        hidden = self._quantizer.decode(codes.T[:, None, :].astype(mx.int32))
        tables: dict[int, tuple[mx.array, mx.array]] = {}
        steps = lengths
        for index, stage in enumerate(self._codec.decoder):
            if isinstance(stage, PatchedPretransform):
                steps = [count * stage.patch_size for count in steps]
                continue
            positions = mx.concatenate(
                [
                    mx.arange(state.offsets[index], state.offsets[index] + count)
                    for (state, _), count in zip(work, steps, strict=True)
                ]
            ).astype(mx.float32)
            phase = positions[:, None] * self._stages[index].frequencies[None, :]
            tables[index] = (mx.cos(phase), mx.sin(phase))
        mx.eval(hidden, tables)
        pairs = {
            index: tuple(np.repeat(np.asarray(table), 2, axis=1) for table in pair)
            for index, pair in tables.items()
        }
        return np.ascontiguousarray(np.asarray(hidden)[0]), pairs

    def _stage(self, index: int, columns: np.ndarray, lengths, states, table) -> np.ndarray:
        """A transformer stage over the steps (``columns``: ``[channels,
        steps]``) → its output as columns."""
        stage = self._stages[index]
        if stage.input is None:
            x = np.ascontiguousarray(columns.T)
        else:
            x = self._kernels.columns(columns, stage.input)
        count = len(states)
        steps = np.array(lengths, dtype=np.int64)
        capacities = np.empty(count, dtype=np.int64)
        kept = np.empty(count, dtype=np.int64)
        cos, sin = table
        for depth, (layer, _) in enumerate(stage.layers):
            histories = [state.histories[index][depth] for state in states]
            for history, length in zip(histories, lengths, strict=True):
                history.room(length, layer.context)
            keys = np.array([history.keys.ctypes.data for history in histories], np.uintp)
            values = np.array(
                [history.values.ctypes.data for history in histories], np.uintp
            )
            capacities[:] = [history.keys.shape[1] for history in histories]
            kept[:] = [history.kept for history in histories]
            self._room(layer, len(x), max(lengths), count, int((kept + steps).max()))
            at = self._kernels.at
            self._kernels.codec_layer(
                layer,
                count,
                at(steps),
                at(x),
                at(keys),
                at(values),
                at(capacities),
                at(kept),
                at(cos),
                at(sin),
                at(self._work),
                self.fast,
            )
            for history, now in zip(histories, kept.tolist(), strict=True):
                history.kept = now
        for state, length in zip(states, lengths, strict=True):
            state.offsets[index] += length
        if stage.output is None:
            return x.T
        return self._kernels.through(self._kernels.rows_product, x, stage.output).T

    def _room(self, layer, total: int, longest: int, requests: int, span: int) -> None:
        dim = layer.width // layer.heads
        needed = total * (6 * layer.width + 2 * layer.inner) + longest * 2 * dim
        fast_scratch = requests * layer.heads * (span + dim) * _LANES
        needed += max(longest * span, fast_scratch)
        if self._work.size < needed:
            self._work = np.empty(needed, np.float32)


def _unpatched(columns: np.ndarray, patch: int) -> np.ndarray:
    """``PatchedPretransform.decode`` on columns: ``[channels * patch,
    steps]`` → ``[channels, steps * patch]``."""
    width, steps = columns.shape
    channels = width // patch
    return columns.reshape(channels, patch, steps).transpose(0, 2, 1).reshape(channels, -1)


def host_decoder(
    codec: MossAudioTokenizer,
    n_vq: int,
    fast: bool,
    activations: ExactActivations,
    blas: str,
) -> HostDecoder | None:
    """The host decoder for ``codec`` with the library and the BLAS library
    at ``blas``, or ``None`` where it does not apply (no checked GELU and
    softmax, weights other than float32, another positional embedding) or
    where it does not give MLX's numbers. ``fast``: with the fast mode's
    attention, where its audio keeps within ``FAST_LARGEST_ERROR`` of the
    exact decoder's (else with the exact attention)."""
    if activations.gelu_erf is None or activations.softmax is None:
        return None
    stages = [stage for stage in codec.decoder if isinstance(stage, ProjectedTransformer)]
    if any(
        stage.transformer.positional_embedding != "rope"
        or not layer.self_attn.causal
        or layer.self_attn.in_proj.weight.dtype != mx.float32
        for stage in stages
        for layer in stage.transformer.layers
    ):
        return None
    kernels = Kernels(activations.native, blas)
    trust_chained_shapes(kernels, _product_shapes(stages), np.random.default_rng(6))
    decoder = HostDecoder(codec, n_vq, kernels, fast=False)
    rounds = _check_frames(codec, n_vq)
    exact = _host_rounds(decoder, rounds)
    if not _matches_mlx(exact, rounds, codec, n_vq):
        log.info("the host codec decoder differs from MLX's here; decoding stays in MLX")
        return None
    if fast:
        decoder.fast = True
        if not _fast_holds(_host_rounds(decoder, rounds), exact):
            decoder.fast = False
            log.info("the fast codec attention strays here; decoding keeps the exact one")
    return decoder


def _product_shapes(stages: list[ProjectedTransformer]) -> set[tuple[int, int]]:
    """The (outputs, inputs) of the stages' products of rows: each layer's
    four and the output projections."""
    weights = [
        weight
        for stage in stages
        for layer in stage.transformer.layers
        for weight in (
            layer.self_attn.in_proj.weight,
            layer.self_attn.out_proj.weight,
            layer.ffn[0].weight,
            layer.ffn[2].weight,
        )
    ]
    weights += [
        stage.output_proj.weight
        for stage in stages
        if not isinstance(stage.output_proj, Identity)
    ]
    return {tuple(weight.shape) for weight in weights}


_CHECK_CHUNKS = ([3, 1], [2, 0], [1, 4])


def _check_frames(codec: MossAudioTokenizer, n_vq: int) -> list[list[list[mx.array]]]:
    """Per round of ``_CHECK_CHUNKS``, each request's chunk of random frames."""
    generator = np.random.default_rng(6)
    size = codec.quantizer.codebook_size
    return [
        [
            [
                mx.array(generator.integers(0, size, n_vq).astype(np.int32))
                for _ in range(count)
            ]
            for count in chunks
        ]
        for chunks in _CHECK_CHUNKS
    ]


def _rounds(decode, states: list, rounds: list[list[list[mx.array]]]) -> list:
    """``decode`` of each round's chunks (empty ones sit out), audio in order."""
    audio = []
    for chunks in rounds:
        due = [(states[index], chunk) for index, chunk in enumerate(chunks) if chunk]
        audio += [np.asarray(samples) for samples in decode(due)]
    return audio


def _host_rounds(decoder: HostDecoder, rounds: list[list[list[mx.array]]]) -> list:
    """The check's chunks through ``decoder``, two requests of its own."""
    return _rounds(decoder.decode_together, [decoder.state() for _ in range(2)], rounds)


def _matches_mlx(host: list, rounds, codec: MossAudioTokenizer, n_vq: int) -> bool:
    """The host decoder's audio of the check (two requests' chunks decoded
    together, then one alone) and MLX's: the same bit for bit."""
    mlx = _rounds(
        lambda due: decode_together(codec, n_vq, due, EXACT),
        [DecoderState(codec) for _ in range(2)],
        rounds,
    )
    return all(
        np.array_equal(got, expected, equal_nan=True)
        for got, expected in zip(host, mlx, strict=True)
    )


# The fast attention's audio against the exact decoder's, at load: far inside
# the contract (1e-4), far outside what a wrong kernel gives.
FAST_LARGEST_ERROR = 1e-5


def _fast_holds(fast: list, exact: list) -> bool:
    """The check's audio with the fast attention within ``FAST_LARGEST_ERROR``
    of the exact attention's."""
    return all(
        np.all(np.abs(got - want) <= FAST_LARGEST_ERROR)
        for got, want in zip(fast, exact, strict=True)
    )
