"""Which BLAS MLX's CPU backend runs on, and bringing Linux's OpenBLAS under it.

The ``mlx-cpu`` wheel bundles the reference BLAS, whose matrix products are
about 20x slower than OpenBLAS. When the system has OpenBLAS
(``apt-get install libopenblas0-pthread``), ``bring_openblas()`` loads it
into the process with its symbols global before MLX's first import, as
``import mlx_speech`` does: MLX's library, loaded after, then takes its
products from OpenBLAS, as it would with OpenBLAS in ``LD_PRELOAD``. Once
MLX is imported, it is too late, and the load's warning says what to do.

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
or AVX-512, it is asked for the newest kernels that CPU runs
(``OPENBLAS_CORETYPE``, unless set already) as it loads. Asking OpenBLAS
which kernels it picks loads it, so a child process asks. Every product in
the process uses them, mlx-audio's included, so ours and theirs stay equal.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

OPENBLAS_LIBRARIES = (
    "/usr/lib/x86_64-linux-gnu/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/libopenblas.so.0",
    "/usr/lib64/libopenblas.so.0",
)
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


# Why OpenBLAS is not under MLX, where ``bring_openblas`` could not put it.
_MISSING, _TOO_LATE, _FAILED = "missing", "too late", "failed"
_not_brought: str | None = None


def bring_openblas() -> None:
    """Load the system OpenBLAS with global symbols, its threads' spin
    bounded (``THREAD_TIMEOUT``) and its kernels chosen (``CORE_TYPE``),
    unless the user set them, so that MLX runs its products on it (Linux).
    Nothing where it is loaded already (``LD_PRELOAD``); where it is missing
    or MLX was imported first, the reason is kept for the warning."""
    global _not_brought
    if sys.platform != "linux" or loaded_openblas() is not None:
        return
    library = system_openblas()
    if library is None or "mlx.core" in sys.modules:
        _not_brought = _MISSING if library is None else _TOO_LATE
        return
    os.environ.setdefault(THREAD_TIMEOUT, SPIN_CYCLES_LOG2)
    if CORE_TYPE not in os.environ:
        kernels = better_kernels(kernels_in_a_child(library), _cpu_flags())
        if kernels is not None:
            os.environ[CORE_TYPE] = kernels
    try:
        ctypes.CDLL(library, mode=ctypes.RTLD_GLOBAL)
    except OSError:  # not a library this process can load: say so at load
        _not_brought = _FAILED


def system_openblas() -> str | None:
    return next((path for path in OPENBLAS_LIBRARIES if os.path.exists(path)), None)


_ASK_CORENAME = (
    "import ctypes, sys; blas = ctypes.CDLL(sys.argv[1]); "
    "blas.openblas_get_corename.restype = ctypes.c_char_p; "
    "print(blas.openblas_get_corename().decode())"
)


def kernels_in_a_child(library: str) -> str | None:
    """The kernels OpenBLAS picks here, asked in a child process (asking
    loads it, and this process must load it only once, configured)."""
    if not sys.executable:
        return None
    try:
        asked = subprocess.run(
            [sys.executable, "-I", "-S", "-c", _ASK_CORENAME, library],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return asked.stdout.strip() or None if asked.returncode == 0 else None


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
    ask only where it is loaded already (``kernels_in_a_child`` elsewhere)."""
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
    """A sentence for a process on Linux whose MLX runs on the mlx-cpu
    wheel's reference BLAS (about 20x slower), saying what to do; else None."""
    if sys.platform != "linux" or loaded_openblas():
        return None
    library = system_openblas()
    if _not_brought == _TOO_LATE:
        fix = (
            "import mlx_speech before mlx (and mlx_lm), or start Python with "
            f"LD_PRELOAD={library}"
        )
    elif library is not None:
        fix = f"start Python with LD_PRELOAD={library}"
    else:
        fix = "install libopenblas0-pthread (Debian, Ubuntu) or your system's OpenBLAS"
    return (
        "MLX runs on the reference BLAS of the mlx-cpu wheel here, about 20x slower "
        f"on the CPU: {fix}"
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
    return "reference BLAS (the mlx-cpu wheel's, about 20x slower than OpenBLAS)"


def loaded_openblas() -> str | None:
    """The path of the OpenBLAS library this process has loaded, if any
    (Linux); not numpy's own, whose 64-bit-index symbols MLX does not call
    (``libopenblas64_p`` in numpy 1, ``libscipy_openblas64_`` in 2)."""
    return _loaded_library("/libopenblas", unless="64_")


def mlx_blas() -> str | None:
    """The path of the BLAS MLX's products run on in this process (Linux): the
    preloaded OpenBLAS, else the mlx-cpu wheel's own."""
    return loaded_openblas() or _loaded_library("/libblas")


def _loaded_library(name: str, unless: str | None = None) -> str | None:
    for line in _maps().splitlines():
        path = line.split(maxsplit=5)[-1]
        if name in path and (unless is None or unless not in Path(path).name):
            return path
    return None


def _maps() -> str:
    """The files this process has mapped, one a line (Linux's /proc)."""
    try:
        return Path("/proc/self/maps").read_text()
    except OSError:
        return ""
