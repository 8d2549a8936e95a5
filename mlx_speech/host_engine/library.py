"""The host engine's C library (``nano_kernels.c``): built, loaded, and its
activations checked against MLX's.

MLX's CPU backend on Linux computes ``tanh`` and ``pow`` one element at a time
through the C library, and ``erf`` and ``exp`` from its own formulas through
scalar ``fma`` calls. The transformer's ``gelu_new`` (tanh, pow) is a fifth of
a prompt's forward; the codec's exact GELU (erf) and its attention's softmax
(exp) most of encoding a reference clip and of decoding. The library
computes them number for number as MLX does, vectorized: measured here on
8 × 3072 values, the GELU with erf takes 33 µs instead of 980, the one with
tanh 125 instead of 655 (its cubes from a port of the ``powf`` glibc runs on
x86-64 with FMA, checked on all 2^32 inputs by ``bench/check_cubes.py``;
elsewhere ``powf`` itself); attention over 4 heads × 1216 × 1216 scores,
composed with this softmax, 58 ms instead of 131. The rest of the library
(products, blocks, draws, the codec layer) is bound in ``kernels``.

The library is compiled with the system's C compiler (``$CC``, else ``cc``)
the first time it is needed on a machine and kept in the user's cache
directory. Before a function is used, its results on probes (every magnitude,
both signs, zeros, infinities; rows of scores, partly masked; attention
composed with it against MLX's) are compared bit for bit with MLX's; a
function that differs anywhere (another C library, another MLX) is not used.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx_audio.codec.models.moss_audio_tokenizer.moss_audio_tokenizer import _exact_gelu
from mlx_audio.tts.models.moss_tts_nano.gpt2 import gelu_new

log = logging.getLogger("mlx_speech.engine")

SOURCE = Path(__file__).with_name("nano_kernels.c")
FLAGS = (
    "-O3",
    "-march=native",
    "-ffp-contract=off",  # fuse no multiply-add that MLX does not fuse
    "-fno-trapping-math",
    "-fPIC",
    "-shared",
)
_PROBE_SIZE = 1 << 18

HostFunction = Callable[[mx.array], mx.array]


class ExactActivations:
    """The library's functions that passed the check, each ``None`` if not:
    ``gelu_tanh`` (GPT-2's ``gelu_new``), ``gelu_erf`` (the exact GELU) and
    ``softmax`` (over the last axis, as ``mx.softmax(..., precise=True)``,
    also checked inside ``scaled_dot_product_attention``)."""

    def __init__(self, library: ctypes.CDLL):
        self.library = library  # its other entries are checked where they are used
        probes = [_probe()]
        self.cubes_ported = _port_cubes(library, [*probes, _wide_probe()])
        self.gelu_tanh = _checked(
            _host_function(library.gelu_tanh), gelu_new, "gelu_tanh", probes
        )
        self.gelu_erf = _checked(
            _host_function(library.gelu_erf), _exact_gelu, "gelu_erf", probes
        )
        self.softmax = _checked(
            _host_function(library.softmax, per_row=True),
            _mlx_softmax,
            "softmax",
            _softmax_probe(),
        )
        if self.softmax is not None and not _attention_matches(self.softmax):
            log.info("attention with the C softmax differs from MLX's; not used")
            self.softmax = None


class Unavailable(Exception):
    """Why the host engine cannot run here, in a few words."""


def attention_with(softmax: HostFunction):
    """``mx.fast.scaled_dot_product_attention`` with an additive mask, number
    for number, with the library's ``softmax``. On the CPU, MLX composes it
    from the scaled queries, their product with the keys, the mask, a softmax
    and the product with the values; so does this (on 4 heads × 1216 × 1216
    scores: 58 ms instead of 131). Shapes it does not compose (grouped
    heads, boolean masks) take MLX's own."""

    def attention(queries, keys, values, *, scale: float, mask=None) -> mx.array:
        if keys.shape[1] != queries.shape[1] or (
            mask is not None and mask.dtype == mx.bool_
        ):
            return mx.fast.scaled_dot_product_attention(
                queries, keys, values, scale=scale, mask=mask
            )
        return _composed_attention(softmax, queries, keys, values, scale, mask)

    return attention


def _composed_attention(softmax, queries, keys, values, scale, mask) -> mx.array:
    scores = (mx.array(scale, dtype=queries.dtype) * queries) @ keys.swapaxes(-1, -2)
    if mask is not None:
        scores = scores + mask
    return softmax(scores) @ values


_lock = threading.Lock()
_loaded: list[ExactActivations | Unavailable] = []


def exact_activations() -> ExactActivations:
    """The checked library, built and loaded on first use (MLX's thread: the
    check runs MLX); raises ``Unavailable`` where it cannot be."""
    with _lock:
        if not _loaded:
            try:
                _loaded.append(_load())
            except Unavailable as reason:
                _loaded.append(reason)
        if isinstance(_loaded[0], Unavailable):
            raise _loaded[0]
        return _loaded[0]


def _load() -> ExactActivations:
    if sys.platform != "linux":
        raise Unavailable("it runs on Linux only")
    if mx.default_device() != mx.cpu:
        raise Unavailable("MLX runs on the GPU here")
    try:
        library = ctypes.CDLL(str(_built()))
    except (OSError, subprocess.SubprocessError) as error:
        raise Unavailable(f"its C library is unavailable: {error}") from error
    return ExactActivations(library)


def _built() -> Path:
    """The compiled library for this source, compiler flags and CPU (the
    flags target the CPU it is built on), compiling it if needed."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise OSError("no C compiler found")
    identity = hashlib.sha256(SOURCE.read_bytes())
    identity.update(" ".join((compiler, *FLAGS, platform.machine(), _cpu_flags())).encode())
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mlx-speech"
    target = cache / f"nano_kernels-{identity.hexdigest()[:16]}.so"
    if target.exists():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as work:
        built = Path(work) / target.name
        command = [compiler, *FLAGS, str(SOURCE), "-o", str(built), "-lm", "-lpthread"]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise OSError(f"{compiler} failed: {result.stderr.strip()[-500:]}")
        os.replace(built, target)  # atomic: another process may build it too
    return target


def _cpu_flags() -> str:
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""
    return next(
        (line for line in info.splitlines() if line.startswith(("flags", "Features"))), ""
    )


def _host_function(entry, per_row: bool = False) -> HostFunction:
    """``entry(x, out, size)`` as a function of an MLX array; with
    ``per_row`` it also takes the length of the last axis (the softmax's)."""
    entry.argtypes = [ctypes.c_void_p, ctypes.c_void_p, *[ctypes.c_long] * (1 + per_row)]
    entry.restype = None

    def run(x: mx.array) -> mx.array:
        mx.eval(x)
        values = np.ascontiguousarray(x, dtype=np.float32)
        out = np.empty_like(values)
        sizes = (values.size, values.shape[-1]) if per_row else (values.size,)
        entry(values.ctypes.data, out.ctypes.data, *sizes)
        return mx.array(out)

    return run


def _mlx_softmax(x: mx.array) -> mx.array:
    return mx.softmax(x, axis=-1, precise=True)


def _checked(
    function: HostFunction,
    reference: HostFunction,
    name: str,
    probes: list[mx.array] | None = None,
) -> HostFunction | None:
    for probe in probes or [_probe()]:
        got, expected = np.asarray(function(probe)), np.asarray(reference(probe))
        both_nan = np.isnan(got) & np.isnan(expected)
        same = (got.view(np.int32) == expected.view(np.int32)) | both_nan
        if not same.all():
            log.info("%s differs from MLX's on this machine; MLX's is used", name)
            return None
    return function


def _port_cubes(library: ctypes.CDLL, probes: list[mx.array]) -> bool:
    """Has the library take ``gelu_new``'s cubes from its vectorized port of
    glibc's ``powf`` where that is the variant it reproduces and gives MLX's
    ``x ** 3`` on ``probes``; else from ``powf`` itself."""
    library.port_cubes.argtypes = [ctypes.c_int]
    library.port_cubes.restype = ctypes.c_int
    if not library.port_cubes(1):
        return False
    cubes = _host_function(library.cubes)
    if _checked(cubes, lambda x: mx.power(x, 3), "the ported cube", probes) is None:
        library.port_cubes(0)
        return False
    return True


def _attention_matches(softmax: HostFunction) -> bool:
    """The composition against MLX's own attention: one query row and many,
    no mask, masks of float32's lowest value and of minus infinity."""
    generator = np.random.default_rng(3)
    for heads, rows, length, size in ((2, 1, 40, 64), (2, 16, 300, 48), (3, 37, 37, 64)):
        queries, keys, values = (
            mx.array(generator.standard_normal((1, heads, count, size)).astype(np.float32))
            for count in (rows, length, length)
        )
        allowed = generator.random((1, 1, rows, length)) < 0.7
        allowed[..., 0] = True
        masks = [None] + [
            mx.array(np.where(allowed, 0.0, low).astype(np.float32))
            for low in (np.finfo(np.float32).min, -np.inf)
        ]
        for mask in masks:
            theirs = mx.fast.scaled_dot_product_attention(
                queries, keys, values, scale=size**-0.5, mask=mask
            )
            ours = _composed_attention(softmax, queries, keys, values, size**-0.5, mask)
            if not np.array_equal(np.asarray(ours), np.asarray(theirs)):
                return False
    return True


def _softmax_probe() -> list[mx.array]:
    """Rows of attention scores: widths 1 to 127 and 1000, values from tiny to
    large, some masked with float32's lowest value as the codec's masks do."""
    generator = np.random.default_rng(2)
    rows = []
    for width in [*range(1, 128), 1000]:
        scale = 2.0 ** generator.uniform(-20, 7)
        row = generator.standard_normal((4, width)) * scale
        row[generator.random((4, width)) < 0.2] += np.finfo(np.float32).min
        rows.append(row.astype(np.float32))
    return [mx.array(row) for row in rows]


def _wide_probe() -> mx.array:
    """Float32 values from 2^-48 to 2^48, both signs: across both ends of the
    cube port's range."""
    generator = np.random.default_rng(1)
    magnitudes = 2.0 ** generator.uniform(-48, 48, _PROBE_SIZE)
    signs = np.where(generator.random(_PROBE_SIZE) < 0.5, -1.0, 1.0)
    return mx.array((signs * magnitudes).astype(np.float32))


def _probe() -> mx.array:
    """Float32 values of every magnitude from 2^-40 to 2^8, both signs, and
    zeros, a denormal, infinities and large values."""
    generator = np.random.default_rng(0)
    magnitudes = 2.0 ** generator.uniform(-40, 8, _PROBE_SIZE)
    signs = np.where(generator.random(_PROBE_SIZE) < 0.5, -1.0, 1.0)
    special = [0.0, -0.0, 1e-40, -1e-40, np.inf, -np.inf, 30.0, -30.0, 1e30, -1e30]
    return mx.array(np.concatenate([special, signs * magnitudes]).astype(np.float32))
