"""A lone request's matrix products through OpenBLAS's matrix-vector routine.

MLX's CPU backend computes every matrix product with ``cblas_sgemm``. For a
single row, OpenBLAS's sgemm first copies the whole weight matrix into its
work buffer, so the weights cross memory about twice; ``cblas_sgemv`` reads
them once, in about half the time. A lone request's frame step at Nano's full
size reads about 870 MB of weights, so this is most of its time.

The price, and why it is a mode: sgemv adds up each row in another order, so
its numbers differ from mlx-audio's in the last bits (the codes almost never:
``bench/check_fast_products.py`` counts how often), and each product waits for
its input, outside MLX's graph. Requests stepped together keep MLX's products
(sgemm no longer copies the weights for nothing once there are several rows).

Used on Linux's CPU backend when OpenBLAS is loaded, unless
``MLX_SPEECH_EXACT=1`` asks for the reference mode: every product through MLX,
as mlx-audio computes it.
"""

from __future__ import annotations

import ctypes
import sys

import mlx.core as mx
import numpy as np

from ...blas import loaded_openblas
from .codec_math import exact_asked

_ROW_MAJOR, _NO_TRANSPOSE = 101, 111


class RowProducts:
    """``x @ weight.T`` (plus ``bias``) for one row, through ``cblas_sgemv``."""

    def __init__(self, library: str):
        self._gemv = ctypes.CDLL(library).cblas_sgemv
        self._gemv.restype = None
        self._gemv.argtypes = [
            *[ctypes.c_int] * 4,
            ctypes.c_float,
            ctypes.c_void_p,
            ctypes.c_int,
            ctypes.c_void_p,
            ctypes.c_int,
            ctypes.c_float,
            ctypes.c_void_p,
            ctypes.c_int,
        ]
        # Host views of the weights, made once (with the array they view, which
        # keeps them valid); this object lives as long as its model.
        self._views: dict[int, tuple[mx.array, np.ndarray]] = {}

    def __call__(self, x: mx.array, weight: mx.array, bias: mx.array | None = None):
        """``x``: ``[..., width]`` holding one row; float32 throughout."""
        mx.eval(x)
        row = np.ascontiguousarray(np.asarray(x).reshape(-1))
        matrix = self._view(weight)
        outputs, width = matrix.shape
        if bias is None:
            out, keep = np.empty(outputs, dtype=np.float32), 0.0
        else:
            out, keep = self._view(bias).copy(), 1.0
        self._gemv(
            _ROW_MAJOR,
            _NO_TRANSPOSE,
            outputs,
            width,
            1.0,
            matrix.ctypes.data,
            width,
            row.ctypes.data,
            1,
            keep,
            out.ctypes.data,
            1,
        )
        return mx.array(out).reshape(*x.shape[:-1], outputs)

    def _view(self, array: mx.array) -> np.ndarray:
        entry = self._views.get(id(array))
        if entry is None:
            mx.eval(array)
            entry = self._views[id(array)] = (array, np.ascontiguousarray(array))
        return entry[1]


def row_products(model) -> RowProducts | None:
    """The fast single-row products for ``model``, or ``None`` where they do
    not apply (another platform or device, float weights other than float32,
    no OpenBLAS loaded, or the reference mode asked for)."""
    if exact_asked():
        return None
    if sys.platform != "linux" or mx.default_device() != mx.cpu:
        return None
    if model.transformer.h[0].attn.c_attn.weight.dtype != mx.float32:
        return None
    library = loaded_openblas()
    return None if library is None else RowProducts(library)
