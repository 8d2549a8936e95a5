"""The C library's entries for rows on host buffers, bound to the BLAS MLX
calls (``csrc/``): the block struct, the products, layer norm
and the heads' draws; and the load checks that decide where the library's
product orders may stand in for ``sgemm``. The frame step (``frame_step``)
and the codec decoder (``codec_decoder``) build on them.
"""

from __future__ import annotations

import ctypes

import mlx.core as mx
import numpy as np

from ..families.moss_nano.sampling import HeadSampler, _filtered_draw

# A block's layers in the order of ``struct block``'s pointers: each its
# weight, then its bias.
BLOCK_LAYERS = ("ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.fc_in", "mlp.fc_out")
# Their fields in ``struct block``, in the same order.
BLOCK_FIELDS = ("ln_1", "attn", "proj", "ln_2", "fc_in", "fc_out")
# The layers whose weights may also be laid out in panels, each named as its
# field in ``struct block`` (``<name>_panel``).
PANELLED_LAYERS = {"attn": "attn.c_attn", "fc_in": "mlp.fc_in", "fc_out": "mlp.fc_out"}
# The outputs of a panel (``PANEL`` in the C library).
PANEL = 16
# The blocks of terms at which sgemm may restart its chains of fused
# multiply-adds, tried in turn at load: OpenBLAS's differs from machine to
# machine (0.3.21: 320 on an AMD EPYC Zen 4, 448 on an Intel Xeon).
CHAIN_LENGTHS = range(16, 1025, 16)


class Kernels:
    """The library's row functions (``native``: the built module, with its
    ``ffi`` and ``lib``; every entry of ``lib`` is an attribute), bound to
    the BLAS library at ``blas`` (the one MLX calls)."""

    def __init__(self, native, blas: str):
        self.ffi, self.lib = native.ffi, native.lib
        sgemm = ctypes.cast(ctypes.CDLL(blas).cblas_sgemm, ctypes.c_void_p).value
        self.lib.use_blas(self.ffi.cast("void *", sgemm))
        if sgemm not in _CHAIN_LENGTH_FOUND:
            _CHAIN_LENGTH_FOUND[sgemm] = _chain_length(self)
        self.chain_length = _CHAIN_LENGTH_FOUND[sgemm]
        if self.chain_length is not None:  # without one, no chained order is trusted
            self.lib.use_chain_length(self.chain_length)

    def __getattr__(self, name: str):
        return getattr(self.lib, name)

    def at(self, array: np.ndarray | None):
        """A C pointer to ``array``'s data (``None``: NULL); the caller keeps
        the array alive while C reads it."""
        if array is None:
            return self.ffi.NULL
        return self.ffi.cast("void *", array.ctypes.data)

    def struct(self, name: str, fields: dict):
        """A new ``struct name`` with ``fields`` (arrays become pointers to
        their data; the caller keeps them alive as long as the struct)."""
        values = {
            field: self.at(value) if isinstance(value, np.ndarray) else value
            for field, value in fields.items()
        }
        return self.ffi.new(f"struct {name} *", values)

    def products(self, x: np.ndarray, weight: np.ndarray, own: bool = False) -> np.ndarray:
        """``x @ weight.T`` for rows ``x`` (``[rows, ins]``): each row's
        numbers MLX's for that row alone, or the library's own product."""
        return self.through(self.own_product if own else self.lone_product, x, weight)

    def through(self, product, x: np.ndarray, weight: np.ndarray, bias=None) -> np.ndarray:
        """``x @ weight.T (+ bias)`` by one of the library's products."""
        outs, ins = weight.shape
        x = np.ascontiguousarray(x, dtype=np.float32)
        out = np.empty((len(x), outs), dtype=np.float32)
        at = self.at
        product(at(x), len(x), at(weight), at(bias), at(out), outs, ins)
        return out

    def columns(self, columns: np.ndarray, weight: np.ndarray) -> np.ndarray:
        """``columns.T @ weight.T`` for ``columns`` (``[ins, rows]``), one
        sgemm as MLX runs it on a transposed view."""
        outs, ins = weight.shape
        columns = np.ascontiguousarray(columns, dtype=np.float32)
        out = np.empty((columns.shape[1], outs), dtype=np.float32)
        rows = columns.shape[1]
        at = self.at
        self.columns_product(at(columns), rows, at(weight), at(out), outs, ins)
        return out

    def picks(
        self,
        logits: np.ndarray,
        samplers: list[HeadSampler],
        uniforms: list[float],
        seen: list[np.ndarray] | None = None,
        penalties: list[float] | None = None,
    ) -> np.ndarray:
        """A token for each row of ``logits`` (``[rows, vocab]``, changed in
        place), as ``sampling`` picks them (see ``Picks``; ``seen``: each
        row's flags)."""
        vocab = logits.shape[1]
        flags = None if seen is None else [row[None] for row in seen]
        return Picks(self, samplers, vocab, flags, penalties)(logits, uniforms)

    def uniforms(self, keys: np.ndarray, count: int) -> np.ndarray:
        """The uniforms MLX draws from the next ``count`` subkeys of each of
        ``keys`` (MLX keys, ``[sequences, 2]`` uint32, advanced in place) →
        ``[count, sequences]``."""
        out = np.empty((count, len(keys)), dtype=np.float32)
        self.draw_uniforms(self.at(keys), len(keys), count, self.at(out))
        return out

    def draw(self, logits: np.ndarray, sampler: HeadSampler, uniform: float) -> int:
        """``sampling._filtered_draw`` of one row."""
        row = np.ascontiguousarray(logits, dtype=np.float32)[None]
        return int(self.picks(row, [sampler], [uniform])[0])

    def norm(self, x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float):
        out = np.empty_like(x)
        at = self.at
        self.layer_norm(at(x), at(weight), at(bias), eps, at(out), x.size, x.shape[-1])
        return out


def panels(weight: np.ndarray) -> np.ndarray | None:
    """``weight`` (``[outs, ins]``) in panels of ``PANEL`` outputs, each
    term's side by side (``[outs / PANEL, ins, PANEL]``), for
    ``panel_product``; ``None`` where the outputs do not fill whole panels."""
    outs, ins = weight.shape
    if outs % PANEL:
        return None
    return np.ascontiguousarray(
        weight.reshape(outs // PANEL, PANEL, ins).transpose(0, 2, 1)
    )


# struct ranked: a float and a long, aligned as C lays them out
RANKED = np.dtype([("value", np.float32), ("index", np.int64)], align=True)


class Picks:
    """The picks of rows of logits (a request each), a head at a time, as
    ``sampling`` picks them: after the repetition penalty over the tokens
    the row's request has seen, greedy (temperature 0) or ``_filtered_draw``
    with the row's uniform; MLX's draw where a tie at the top-k boundary
    leaves the kept tokens to MLX's partition. The rows' samplers,
    penalties and flags (each row's ``[heads, vocab]``; none: no penalty)
    are laid out once for every head."""

    def __init__(
        self,
        kernels: Kernels,
        samplers: list[HeadSampler],
        vocab: int,
        seen: list[np.ndarray] | None = None,
        penalties: list[float] | None = None,
    ):
        rows = len(samplers)
        self._kernels, self._samplers, self._vocab = kernels, samplers, vocab
        top_ks = [sampler.top_k if 0 < sampler.top_k < vocab else 0 for sampler in samplers]
        self._work_row = 2 * vocab + max(top_ks) + 1
        self._work = np.empty(rows * self._work_row, dtype=np.float32)
        self._ranks = np.empty(rows * vocab, dtype=RANKED)
        flags = seen or [np.zeros((1, vocab), dtype=np.bool_)] * rows
        self._seen = np.array([row.ctypes.data for row in flags], dtype=np.uintp)
        self._head_strides = np.array([row.strides[0] for row in flags], dtype=np.uintp)
        self._flags = flags  # kept while C reads them
        self._penalties = np.array(penalties or [1.0] * rows, dtype=np.float32)
        self._temperatures = np.array([s.temperature for s in samplers], dtype=np.float32)
        self._thresholds = np.array([1 - s.top_p for s in samplers], dtype=np.float32)
        self._top_ks = np.array(top_ks, dtype=np.int64)
        self._top_ps = np.array([0 < s.top_p < 1 for s in samplers], dtype=np.int32)

    def __call__(
        self, logits: np.ndarray, uniforms: list[float], head: int = 0
    ) -> np.ndarray:
        """A token for each row of ``logits`` (``[rows, vocab]``, changed in
        place), with the rows' flags of ``head``."""
        rows, vocab = logits.shape
        if vocab != self._vocab:
            raise ValueError(f"logits of {vocab} tokens, picks laid out for {self._vocab}")
        seen = self._seen + self._head_strides * np.uintp(head)
        drawn = np.array(uniforms, dtype=np.float32)
        codes = np.empty(rows, dtype=np.int64)
        at = self._kernels.at
        self._kernels.pick_rows(
            at(logits),
            rows,
            vocab,
            at(seen),
            at(self._penalties),
            at(self._temperatures),
            at(self._top_ks),
            at(self._top_ps),
            at(self._thresholds),
            at(drawn),
            at(self._work),
            self._work_row,
            at(self._ranks),
            at(codes),
        )
        for row in np.flatnonzero(codes < 0):
            draw = _filtered_draw(
                mx.array(logits[row][None]),
                mx.array([[uniforms[row]]]),
                self._samplers[row],
            )
            codes[row] = draw.item()
        return codes


# Per BLAS (its sgemm's address), the block of terms found for it.
_CHAIN_LENGTH_FOUND: dict[int, int | None] = {}


def _chain_length(kernels: Kernels) -> int | None:
    """The block of ``CHAIN_LENGTHS`` at which the chained product gives
    sgemm's numbers for eight rows of 3072 terms (where each block's length
    shows: the first is the block itself), or ``None``; the load checks
    below then decide, shape by shape, where the chained orders stand in."""
    x, w, _ = _operands(np.random.default_rng(4), 8, 64, 3072)
    theirs = kernels.through(kernels.sgemm_product, x, w)
    for length in CHAIN_LENGTHS:
        kernels.use_chain_length(length)
        if np.array_equal(kernels.through(kernels.chained_product, x, w), theirs):
            return length
    return None


def host_view(array: mx.array) -> np.ndarray:
    """A float32 host view of an MLX array's memory (kept valid by the array,
    which the model holds)."""
    mx.eval(array)
    return np.asarray(array)


def _operands(generator: np.random.Generator, rows: int, outs: int, ins: int):
    """Random float32 rows ``[rows, ins]``, weight ``[outs, ins]`` and bias
    for a product's check."""
    x = generator.standard_normal((rows, ins), dtype=np.float32)
    w = generator.standard_normal((outs, ins), dtype=np.float32)
    return x, w, generator.standard_normal(outs, dtype=np.float32)


# Row counts the chained product is checked at: each to 16 (every remainder
# of the library's groups of eight and of OpenBLAS's tiles), then a spread
# to the library's bound, 64 rows.
_CHAIN_CHECKED_ROWS = (*range(1, 17), 17, 23, 32, 38, 45, 64)


def trust_chained_shapes(kernels: Kernels, shapes, generator: np.random.Generator) -> None:
    """Lets the library chain the products of each of ``shapes`` whose
    chained numbers are sgemm's here, with a bias and without, at the row
    counts it is checked at (``_CHAIN_CHECKED_ROWS``) that it would chain."""
    for outs, ins in sorted(shapes):
        counts = [
            rows for rows in _CHAIN_CHECKED_ROWS if kernels.chained_applies(rows, outs, ins)
        ]
        x, w, bias = _operands(generator, max(counts, default=0), outs, ins)
        if all(
            np.array_equal(
                kernels.through(kernels.chained_product, x[:rows], w, added),
                kernels.through(kernels.sgemm_product, x[:rows], w, added),
            )
            for rows in counts
            for added in (bias, None)
        ):
            kernels.trust_chained(outs, ins)


# Prompts' row counts, stacked in one product: every count to 16 (OpenBLAS's
# kernels change at 16 rows), within the chained bound and past it.
_STACKED_COUNTS = (
    tuple(range(2, 17)),
    (17, 23),
    (38, 30),
    (5, 64, 9),
    (100, 30),
    (45, 70),
)


def stacking_holds(kernels: Kernels, shapes, generator: np.random.Generator) -> bool:
    """Whether ``rows_product`` gives the rows of several prompts, stacked,
    each the numbers of its own prompt's product, for each of ``shapes``
    (outs, ins) with a bias: so prompts may share their products. A prompt
    that OpenBLAS's small-matrix kernel would take alone never shares."""
    for outs, ins in sorted(shapes):
        for stack in _STACKED_COUNTS:
            counts = [
                count for count in stack if not kernels.small_kernel_takes(count, outs, ins)
            ]
            if len(counts) < 2:
                continue
            x, w, bias = _operands(generator, sum(counts), outs, ins)
            stacked = kernels.through(kernels.rows_product, x, w, bias)
            ends = np.cumsum(counts)
            for start, end in zip(ends - counts, ends, strict=True):
                alone = kernels.through(kernels.rows_product, x[start:end], w, bias)
                if not np.array_equal(stacked[start:end], alone):
                    return False
    return True


def trust_lone_shapes(kernels: Kernels, shapes, generator: np.random.Generator) -> bool:
    """Lets the frame step's products of each of ``shapes`` (outs, ins) take
    the library's lone order where it gives sgemm's numbers for a row alone
    here (ten rows together, each against sgemm of that row, with a bias
    and without) → whether it does for every shape."""
    everywhere = True
    for outs, ins in sorted(shapes):
        x, w, bias = _operands(generator, 10, outs, ins)
        same = all(
            np.array_equal(
                kernels.through(kernels.lone_order_product, x, w, added)[row],
                kernels.through(kernels.sgemm_product, x[row : row + 1], w, added)[0],
            )
            for added in (bias, None)
            for row in range(len(x))
        )
        trusted = same and bool(kernels.trust_lone(outs, ins))  # not once the table is full
        everywhere = everywhere and trusted
    return everywhere


def own_product_sound(kernels: Kernels, generator: np.random.Generator) -> bool:
    """The library's own product against float64 sums (within float32's
    rounding), for products split between two threads and not, and each row
    the same alone as beside others."""
    for outs, ins in ((37, 100), (300, 768)):
        x = generator.standard_normal((5, ins)).astype(np.float32)
        w = generator.standard_normal((outs, ins)).astype(np.float32)
        ours = kernels.products(x, w, own=True)
        exact = x.astype(np.float64) @ w.astype(np.float64).T
        bound = 1e-5 * (np.abs(x).astype(np.float64) @ np.abs(w).astype(np.float64).T)
        if not np.all(np.abs(ours - exact) <= bound):
            return False
        for row in range(len(x)):
            if not np.array_equal(
                kernels.products(x[row : row + 1], w, own=True)[0], ours[row]
            ):
                return False
    return True
