"""The library's chained product: sgemm's numbers (OpenBLAS's, as MLX calls
it) with each weight read once, and the lone order: each row's numbers as
sgemm computes them for that row alone; each used only for the shapes a
load check trusts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mlx_speech.blas import OPENBLAS_LIBRARIES

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or not (os.environ.get("CC") or shutil.which("cc")),
    reason="the chained product needs the C library (Linux, a C compiler)",
)

OPENBLAS = next((path for path in OPENBLAS_LIBRARIES if Path(path).exists()), None)

# Nano's full-size products (a block's four, the audio heads), and two whose
# blocks of terms (an even and an odd last two) and outputs do not divide evenly
_SHAPES = [
    (2304, 768),
    (768, 768),
    (3072, 768),
    (768, 3072),
    (1024, 768),
    (1500, 700),
    (1500, 703),
]

_AGAINST_OPENBLAS = f"""
import ctypes, numpy as np
from mlx_speech.blas import mlx_blas
from mlx_speech.families.moss_nano.exact_activations import exact_activations
from mlx_speech.families.moss_nano.host_kernels import (
    Kernels, trust_chained_shapes, trust_lone_shapes
)
kernels = Kernels(exact_activations().library, ctypes.CDLL(mlx_blas()))
assert "openblas" in mlx_blas(), mlx_blas()
generator = np.random.default_rng(3)
shapes = {_SHAPES!r}
chained = 0
for outs, ins in shapes:
    w = generator.standard_normal((outs, ins), dtype=np.float32)
    bias = generator.standard_normal(outs, dtype=np.float32)
    for rows in (*range(1, 17), 38, 64):
        x = generator.standard_normal((rows, ins), dtype=np.float32)
        for added in (bias, None):
            theirs = kernels.through(kernels.sgemm_product, x, w, added)
            if kernels.chained_applies(rows, outs, ins):
                chained += 1
                ours = kernels.through(kernels.chained_product, x, w, added)
                assert np.array_equal(ours, theirs), (outs, ins, rows, added is None)
trusted, lone = [], []
kernels.trust_chained = lambda outs, ins: trusted.append((outs, ins)) or 1
kernels.trust_lone = lambda outs, ins: lone.append((outs, ins)) or 1
trust_chained_shapes(kernels, set(shapes), generator)
assert trust_lone_shapes(kernels, set(shapes), generator)
assert sorted(trusted) == sorted(shapes), trusted
assert kernels.chained_applies(64, 2304, 768) and not kernels.chained_applies(65, 2304, 768)
assert sorted(lone) == sorted(shapes), lone

# a BLAS that rounds one output otherwise: its shapes are not trusted
honest = kernels.sgemm_product
def nudged(x, rows, w, bias, out, outs, ins):
    honest(x, rows, w, bias, out, outs, ins)
    first = ctypes.cast(out, ctypes.POINTER(ctypes.c_float))
    first[0] = np.nextafter(np.float32(first[0]), np.float32(np.inf))
kernels.sgemm_product, trusted, lone = nudged, [], []
trust_chained_shapes(kernels, set(shapes), generator)
assert not trust_lone_shapes(kernels, set(shapes), generator)
assert trusted == lone == [], (trusted, lone)
print(chained)
"""


@pytest.mark.skipif(OPENBLAS is None, reason="OpenBLAS is not installed")
def test_chained_numbers_are_openblas_sgemms_bit_for_bit():
    """Every Nano product shape, 1 to 16, 38 and 64 rows (a prompt's), with a
    bias and without (the row counts OpenBLAS takes its small-matrix kernel
    for are left to it). The load checks trust them all, chained as sgemm and
    in the lone order (each of ten rows together as sgemm computes it alone,
    the small-matrix kernel's order included), and none against a BLAS that
    rounds one output otherwise."""
    environment = {**os.environ, "LD_PRELOAD": OPENBLAS, "OPENBLAS_THREAD_TIMEOUT": "20"}
    result = subprocess.run(
        [sys.executable, "-c", _AGAINST_OPENBLAS],
        capture_output=True,
        text=True,
        timeout=300,
        env=environment,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert int(result.stdout) > 200  # most of the 7 * 18 * 2 products
