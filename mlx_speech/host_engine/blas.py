"""Which BLAS MLX's CPU backend runs on, and switching Linux to OpenBLAS.

The ``mlx-cpu`` wheel bundles the reference BLAS, whose matrix products are
about 20x slower than OpenBLAS. When the system has OpenBLAS
(``apt-get install libopenblas0-pthread``), ``use_fast_blas()`` re-runs the
process once with it preloaded; an environment variable guards against loops.

It also sets how long OpenBLAS's threads wait for their next product by
spinning before they sleep. OpenBLAS reads this once, as it loads, and its
default is 2^28 cycles (about 0.1 s): after every prompt or codec decode its
thread went on spinning through the next frame step, whose products are the
C library's own and run on the same two cores. 2^20 cycles (under a
millisecond) spans the gaps between one step's products, and no more.

And it picks OpenBLAS's kernels where OpenBLAS cannot: a release does not
know the CPUs made after it, and on them falls back to its SSE3 kernels
("Prescott"). Debian 12's 0.3.21 does so on an Intel Xeon of family 6 model
207, where its AVX-512 kernels take half the time for a prompt's products.
So where OpenBLAS would run kernels older than AVX2 on a CPU that has AVX2
or AVX-512, the re-run asks for the newest kernels that CPU runs
(``OPENBLAS_CORETYPE``, unless set already). Every product in the process
uses them, mlx-audio's included, so ours and theirs stay equal.
"""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

OPENBLAS_LIBRARIES = (
    "/usr/lib/x86_64-linux-gnu/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/libopenblas.so.0",
    "/usr/lib64/libopenblas.so.0",
)
_GUARD = "MLX_SPEECH_BLAS_CHECKED"
THREAD_TIMEOUT = "OPENBLAS_THREAD_TIMEOUT"
SPIN_CYCLES_LOG2 = "20"
CORE_TYPE = "OPENBLAS_CORETYPE"
# OpenBLAS's x86 kernels older than AVX2, by the names it gives them
_OLD_KERNELS = frozenset(
    {"Katmai", "Coppermine", "Northwood", "Prescott", "Banias", "Atom", "Core2"}
    | {"Penryn", "Dunnington", "Nehalem", "Sandybridge", "Opteron", "Barcelona"}
)
# the kernels to ask for instead, newest first, with the CPU flags they need
_NEWER_KERNELS = (
    ("SkylakeX", frozenset({"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"})),
    ("Haswell", frozenset({"avx2", "fma"})),
)


def use_fast_blas() -> None:
    """Re-execute with the system OpenBLAS preloaded and its threads' spin
    bounded (``THREAD_TIMEOUT``, unless set already), at most once per
    process tree."""
    if sys.platform != "linux" or os.environ.get(_GUARD):
        return
    os.environ[_GUARD] = "1"
    preloaded = os.environ.get("LD_PRELOAD", "")
    library = next((path for path in OPENBLAS_LIBRARIES if os.path.exists(path)), None)
    if "openblas" in preloaded:
        if THREAD_TIMEOUT in os.environ:
            return
    elif library is None:
        return
    else:
        os.environ["LD_PRELOAD"] = f"{library} {preloaded}".strip()
    os.environ.setdefault(THREAD_TIMEOUT, SPIN_CYCLES_LOG2)
    if library is not None and CORE_TYPE not in os.environ:
        kernels = kernels_to_ask_for(library)
        if kernels is not None:
            os.environ[CORE_TYPE] = kernels
    os.execv(sys.executable, sys.orig_argv)


def kernels_to_ask_for(library: str) -> str | None:
    """``OPENBLAS_CORETYPE`` for the OpenBLAS at ``library`` on this CPU:
    None where its own choice stands."""
    return better_kernels(openblas_kernels(library), _cpu_flags())


def better_kernels(chosen: str | None, cpu_flags: frozenset[str]) -> str | None:
    """The OpenBLAS kernels to ask for where OpenBLAS chose kernels older
    than AVX2 (``chosen``) on a CPU whose ``cpu_flags`` run newer ones, else
    None."""
    if chosen not in _OLD_KERNELS:
        return None
    return next((name for name, needs in _NEWER_KERNELS if needs <= cpu_flags), None)


def openblas_kernels(library: str) -> str | None:
    """The kernels the OpenBLAS at ``library`` picks for this CPU (``None``
    where it cannot be asked). It loads the library into this process, so
    ask where it is loaded already, or in a process about to re-execute: in
    any other, the host engine's checks would then take its products for
    MLX's."""
    try:
        openblas = ctypes.CDLL(library)
        openblas.openblas_get_corename.restype = ctypes.c_char_p
        return openblas.openblas_get_corename().decode()
    except (OSError, AttributeError):
        return None


def _cpu_flags() -> frozenset[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    line = next((line for line in text.splitlines() if line.startswith("flags")), "")
    return frozenset(line.partition(":")[2].split())


def reference_blas_warning() -> str | None:
    """A sentence for a Python process on Linux whose MLX runs on the mlx-cpu
    wheel's reference BLAS (about 20x slower), else None. The command line
    has already re-executed itself with OpenBLAS where it could."""
    if sys.platform != "linux" or os.environ.get(_GUARD) or loaded_openblas():
        return None
    library = next((path for path in OPENBLAS_LIBRARIES if os.path.exists(path)), None)
    fix = (
        f"start Python with LD_PRELOAD={library}"
        if library
        else "install libopenblas0-pthread (Debian, Ubuntu) and preload it"
    )
    return (
        "MLX runs on the reference BLAS of the mlx-cpu wheel here, about 20x slower "
        f"on the CPU: {fix} (the mlx-speech command does this itself)"
    )


def active_blas() -> str:
    if sys.platform == "darwin":
        return "Accelerate"
    if not Path("/proc/self/maps").exists():
        return "unknown"
    library = loaded_openblas()
    if library is not None:
        kernels = openblas_kernels(library)
        return "OpenBLAS" if kernels is None else f"OpenBLAS ({kernels} kernels)"
    return "reference BLAS (mlx-cpu wheel; install libopenblas0-pthread for ~20x faster)"


def loaded_openblas() -> str | None:
    """The path of the OpenBLAS library this process has loaded, if any (Linux)."""
    return _loaded_library("/libopenblas")


def mlx_blas() -> str | None:
    """The path of the BLAS MLX's products run on in this process (Linux): the
    preloaded OpenBLAS, else the mlx-cpu wheel's own."""
    return loaded_openblas() or _loaded_library("/libblas")


def _loaded_library(name: str) -> str | None:
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    for line in maps.splitlines():
        path = line.split(maxsplit=5)[-1]
        if name in path:
            return path
    return None
