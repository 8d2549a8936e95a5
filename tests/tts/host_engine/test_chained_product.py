"""The library's chained product: sgemm's numbers (OpenBLAS's, as MLX calls
it) with each weight read once, and the lone order: each row's numbers as
sgemm computes them for that row alone; each used only for the shapes a
load check trusts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mlx_speech.host_engine.blas import OPENBLAS_LIBRARIES
from tests.tts.support.host_engine import needs_host_library

pytestmark = needs_host_library

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

# The OpenBLAS kernels the library's orders were found for: its AVX-512 ones
# (an AMD EPYC Zen 4 and an Intel Xeon both run them); other kernels add up
# otherwise, and there the load checks keep every product to sgemm.
_SKYLAKE_CORES = ("SkylakeX", "Cooperlake", "SapphireRapids")

_SETUP = f"""
import ctypes, numpy as np
from mlx_speech.host_engine.blas import mlx_blas
from mlx_speech.host_engine.library import exact_activations
from mlx_speech.host_engine.kernels import (
    Kernels, trust_chained_shapes, trust_lone_shapes
)
blas = ctypes.CDLL(mlx_blas())
assert "openblas" in mlx_blas(), mlx_blas()
blas.openblas_get_corename.restype = ctypes.c_char_p
kernels = Kernels(exact_activations().native, mlx_blas())
generator = np.random.default_rng(3)
shapes = {_SHAPES!r}
trusted, lone = [], []
kernels.trust_chained = lambda outs, ins: trusted.append((outs, ins)) or 1
kernels.trust_lone = lambda outs, ins: lone.append((outs, ins)) or 1

# each shape at 1 to 16, 25, 38 and 64 rows, with a bias and without:
# (shape, rows, weight, x, bias or None, sgemm's numbers)
def products():
    for outs, ins in shapes:
        w = generator.standard_normal((outs, ins), dtype=np.float32)
        bias = generator.standard_normal(outs, dtype=np.float32)
        for rows in (*range(1, 17), 25, 38, 64):
            x = generator.standard_normal((rows, ins), dtype=np.float32)
            for added in (bias, None):
                theirs = kernels.through(kernels.sgemm_product, x, w, added)
                yield (outs, ins), rows, w, x, added, theirs
"""

_CORE = _SETUP + "print(blas.openblas_get_corename().decode())"

_AGAINST_OPENBLAS = (
    _SETUP
    + """
# the block of terms found for this machine's sgemm; one 16 terms longer
# does not give its numbers
found = kernels.chain_length
assert found is not None
x = generator.standard_normal((8, 3072), dtype=np.float32)
w = generator.standard_normal((64, 3072), dtype=np.float32)
kernels.use_chain_length(found + 16)
assert not np.array_equal(
    kernels.through(kernels.chained_product, x, w),
    kernels.through(kernels.sgemm_product, x, w),
)
kernels.use_chain_length(found)
chained = 0
for shape, rows, w, x, added, theirs in products():
    if kernels.chained_applies(rows, *shape):
        chained += 1
        ours = kernels.through(kernels.chained_product, x, w, added)
        assert np.array_equal(ours, theirs), (shape, rows, added is None)
trust_chained_shapes(kernels, set(shapes), generator)
assert trust_lone_shapes(kernels, set(shapes), generator)
assert sorted(trusted) == sorted(shapes), trusted
assert kernels.chained_applies(64, 2304, 768) and not kernels.chained_applies(65, 2304, 768)
assert sorted(lone) == sorted(shapes), lone
print(chained)
"""
)

_CHECKS_SOUND = (
    _SETUP
    + """
# what the load checks trust gives sgemm's numbers at every row count the
# products are used for, here whatever kernels OpenBLAS runs
trust_chained_shapes(kernels, set(shapes), generator)
trust_lone_shapes(kernels, set(shapes), generator)
for shape, rows, w, x, added, theirs in products():
    if shape in trusted and kernels.chained_applies(rows, *shape):
        ours = kernels.through(kernels.chained_product, x, w, added)
        assert np.array_equal(ours, theirs), (shape, rows, added is None)
    if shape in lone:
        ours = kernels.through(kernels.lone_order_product, x, w, added)
        for row in range(rows):
            alone = kernels.through(kernels.sgemm_product, x[row : row + 1], w, added)
            assert np.array_equal(ours[row], alone[0]), (shape, rows, row)

# a BLAS that rounds one output otherwise: its shapes are not trusted
honest = kernels.sgemm_product
def nudged(x, rows, w, bias, out, outs, ins):
    honest(x, rows, w, bias, out, outs, ins)
    first = kernels.ffi.cast("float *", out)
    first[0] = np.nextafter(np.float32(first[0]), np.float32(np.inf))
kernels.sgemm_product, trusted[:], lone[:] = nudged, [], []
trust_chained_shapes(kernels, set(shapes), generator)
assert not trust_lone_shapes(kernels, set(shapes), generator)
assert trusted == lone == [], (trusted, lone)
print(len(shapes))
"""
)


def _with_openblas(script: str) -> str:
    """``script``'s output in a fresh Python, where importing mlx_speech puts
    OpenBLAS under MLX as it does for users (its kernels chosen; this
    process's MLX stays on the reference BLAS); fails the test if it fails."""
    environment = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    return _run_with(environment, script)


def _run_with(environment: dict, script: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        env=environment,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


@pytest.mark.skipif(OPENBLAS is None, reason="OpenBLAS is not installed")
def test_chained_numbers_are_openblas_sgemms_bit_for_bit():
    """Where OpenBLAS runs its AVX-512 kernels: the block of terms at which
    this machine's sgemm restarts its chains is found at load. Then every
    Nano product shape, 1 to 16, 25, 38 and 64 rows (a prompt's; wide groups
    of 16 rows and narrow ones of 8 after them), with a bias and without
    (the row counts OpenBLAS takes its small-matrix kernel for are left to
    it), chained, gives sgemm's numbers, and the load checks trust them all,
    chained as sgemm and in the lone order (each of ten rows together as
    sgemm computes it alone, the small-matrix kernel's order included)."""
    core = _with_openblas(_CORE).strip()
    if core not in _SKYLAKE_CORES:
        pytest.skip(f"OpenBLAS runs its {core} kernels here, not those the orders follow")
    assert int(_with_openblas(_AGAINST_OPENBLAS)) > 200  # most of the 7 * 19 * 2


@pytest.mark.skipif(OPENBLAS is None, reason="OpenBLAS is not installed")
def test_the_load_checks_trust_only_sgemms_numbers():
    """Whatever kernels OpenBLAS runs, a shape the load checks trust gives
    sgemm's numbers chained (at each row count to 16, and 25, 38 and 64)
    and in the lone order (each row as sgemm computes it alone), and
    against a BLAS that rounds one output otherwise no shape is trusted."""
    assert int(_with_openblas(_CHECKS_SOUND)) == len(_SHAPES)


def _kernels():
    from mlx_speech.host_engine.blas import mlx_blas
    from mlx_speech.host_engine.kernels import Kernels
    from mlx_speech.host_engine.library import exact_activations

    return Kernels(exact_activations().native, mlx_blas())


def _from_panels(kernels, x, panel, bias, outs: int, ins: int):
    out = np.empty((len(x), outs), dtype=np.float32)
    at = kernels.at
    kernels.panel_product(at(x), len(x), at(panel), at(bias), at(out), outs, ins)
    return out


# Nano's panelled shapes, and outputs that leave a lone row 1, 2 or 3 tiles
# after its groups of four, with terms in uneven blocks
@pytest.mark.parametrize(
    "outs, ins", [(2304, 768), (3072, 768), (768, 3072), (16, 40), (96, 703), (1968, 701)]
)
def test_panels_give_the_chained_numbers(outs, ins):
    """A weight read from its panels gives the chained product's numbers bit
    for bit, for a lone row and for stacked rows in one or more groups."""
    from mlx_speech.host_engine.kernels import panels

    kernels, generator = _kernels(), np.random.default_rng(7)
    w = generator.standard_normal((outs, ins), dtype=np.float32)
    bias = generator.standard_normal(outs, dtype=np.float32)
    panel = panels(w)
    for rows in (1, 2, 7, 8, 9, 17, 38):
        x = generator.standard_normal((rows, ins), dtype=np.float32)
        for added in (bias, None):
            chained = kernels.through(kernels.chained_product, x, w, added)
            ours = _from_panels(kernels, x, panel, added, outs, ins)
            assert np.array_equal(ours.view(np.uint32), chained.view(np.uint32)), (
                rows,
                added is None,
            )


def test_only_whole_panels_are_made():
    from mlx_speech.host_engine.kernels import PANEL, panels

    weight = np.arange(2 * PANEL * 3, dtype=np.float32).reshape(2 * PANEL, 3)
    panel = panels(weight)
    assert panel.shape == (2, 3, PANEL)
    assert panel[1, 2, 5] == weight[PANEL + 5, 2]
    assert panels(weight[:-1]) is None


_PANELS_IN_A_FRAME_STEP = """
import numpy as np, mlx.core as mx
from mlx_audio.tts.models.moss_tts_nano.gpt2 import GPT2Config, GPT2Model
from mlx_speech.host_engine.blas import mlx_blas
from mlx_speech.host_engine.library import exact_activations
from mlx_speech.host_engine.kernels import BLOCK_LAYERS, Kernels
from mlx_speech.host_engine.frame_step import HostStep, _Transformer

kernels = Kernels(exact_activations().native, mlx_blas())
# a block whose MLP products chain (too large for OpenBLAS's small kernel),
# trusted here whatever this BLAS is: both sides then run the chained order
config = GPT2Config(n_embd=256, n_layer=1, n_head=4, n_inner=4096)
model = GPT2Model(config, use_token_embedding=False)
mx.eval(model.parameters())
for outs, ins in ((4096, 256), (256, 4096)):
    assert kernels.trust_lone(outs, ins) and not kernels.small_kernel_takes(1, outs, ins)
host = HostStep.__new__(HostStep)
host._kernels, host._work = kernels, np.empty(0, dtype=np.float32)
plain, panelled = _Transformer(model, kernels), _Transformer(model, kernels, panelled=True)
assert not plain.blocks[0][0].fc_in_panel and panelled.blocks[0][0].fc_in_panel
assert plain.panel_bytes == 0
assert panelled.panel_bytes == 4 * (768 * 256 + 4096 * 256 + 256 * 4096)

generator = np.random.default_rng(11)
def step(transformer, count):
    shape = (transformer.heads, 16, transformer.dim)
    caches = [
        [tuple(generator.standard_normal(shape, dtype=np.float32) for _ in range(2))]
        for _ in range(count)
    ]
    rows = generator.standard_normal((count, config.n_embd), dtype=np.float32)
    positions = np.arange(count) + 3
    return host._through(transformer, rows, caches, positions, False)

for count in (1, 8):
    state = generator.bit_generator.state
    theirs = step(plain, count)
    generator.bit_generator.state = state
    ours = step(panelled, count)
    assert np.array_equal(ours.view(np.uint32), theirs.view(np.uint32)), count
    for panel in panelled.blocks[0][1][2 * len(BLOCK_LAYERS) :]:  # after the views
        panel[...] = 0  # the step reads the panels: now it differs
    generator.bit_generator.state = state
    assert not np.array_equal(step(panelled, count), theirs), count
    panelled = _Transformer(model, kernels, panelled=True)
print("ok")
"""


def test_a_frame_step_reads_its_panels_and_keeps_its_numbers():
    """A block whose weights have panels steps one row and eight to the same
    numbers as without them, and reads them (zeroed panels change it)."""
    result = subprocess.run(
        [sys.executable, "-c", _PANELS_IN_A_FRAME_STEP],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "ok"
