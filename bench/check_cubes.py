"""Every float32 through the C library's cube and tanh GELU, against MLX's.

    python bench/check_cubes.py [--chunk-bits 24] [--json out.json]

``gelu_new``'s ``x ** 3`` is glibc's ``powf`` in MLX; the library computes it
with a vectorized port of the variant glibc runs on x86-64 CPUs with FMA
(``csrc/activations.c``). At load the port is checked on 2^19 probes; this
checks all 2^32 bit patterns, NaNs included (any NaN matches any NaN): the
library's ``cubes`` against ``mx.power(x, 3)`` and its ``gelu_tanh`` against
mlx-audio's ``gelu_new``. Prints the mismatches of each (0 when they agree
everywhere), the C library version and the time taken.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx_audio.tts.models.moss_tts_nano.gpt2 import gelu_new

from mlx_speech.host_engine.library import Unavailable, exact_activations


def _mismatches(got: np.ndarray, expected: np.ndarray) -> int:
    same = (got.view(np.uint32) == expected.view(np.uint32)) | (
        np.isnan(got) & np.isnan(expected)
    )
    return int(same.size - np.count_nonzero(same))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunk-bits", type=int, default=24)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    try:
        activations = exact_activations()
    except Unavailable as why:
        raise SystemExit(
            f"the C library is unavailable here ({why}): nothing to check"
        ) from None
    if not activations.cubes_ported:
        raise SystemExit("the cube port is not in use on this machine: nothing to check")
    library, ffi = activations.native.lib, activations.native.ffi
    size = 1 << args.chunk_bits
    out = np.empty(size, np.float32)
    cube_mismatches = gelu_mismatches = 0
    started = time.perf_counter()
    for start in range(0, 1 << 32, size):
        patterns = np.arange(start, start + size, dtype=np.uint64).astype(np.uint32)
        x = patterns.view(np.float32)
        values = mx.array(x)
        into = ffi.from_buffer("float[]", x), ffi.from_buffer("float[]", out)
        library.cubes(*into, size)
        cube_mismatches += _mismatches(out, np.asarray(mx.power(values, 3)))
        library.gelu_tanh(*into, size)
        gelu_mismatches += _mismatches(out, np.asarray(gelu_new(values)))
    result = {
        "inputs": 1 << 32,
        "cube_mismatches": cube_mismatches,
        "gelu_tanh_mismatches": gelu_mismatches,
        "c_library": " ".join(platform.libc_ver()),
        "seconds": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
