"""Which backend runs a model: MLX, or an accelerator beside it.

``MLX_SPEECH_BACKEND``, ``--backend`` or ``load(backend=)`` names it:

- ``mlx``: MLX alone, on MLX's default device; what a Mac runs, for every
  family.
- ``host``: the host engine (``host_engine``) for MOSS-TTS-Nano on Linux's
  CPU: its frame step, codec decoder and activations where each passes its
  check against MLX's numbers, the rest through MLX.
- ``auto`` (the default): the host engine where it can run, else MLX.

It is the one module that imports the host engine (``host_engine``, Linux's),
and only on Linux, where it is used: a Mac loads nothing of it.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import tempfile
from pathlib import Path

from .errors import ModelLoadError

# MLX and the families are imported where they are used: the command line
# reads BACKENDS to parse its arguments, before anything runs.
log = logging.getLogger("mlx_speech.engine")

BACKEND_VARIABLE = "MLX_SPEECH_BACKEND"
BACKENDS = ("auto", "mlx", "host")


def requested_backend(backend: str | None = None) -> str:
    """``backend``, else ``MLX_SPEECH_BACKEND``, else ``auto``; a
    ``ValueError`` for a name that is none of ``BACKENDS``."""
    named = backend if backend is not None else os.environ.get(BACKEND_VARIABLE) or "auto"
    if named not in BACKENDS:
        source = "backend" if backend is not None else BACKEND_VARIABLE
        raise ValueError(f"{source} must be one of {', '.join(BACKENDS)}; got {named!r}")
    return named


def accelerator_for(backend: str, family: str):
    """MLX's thread (the engine's checks run MLX): the accelerator to hand
    ``family``'s loader (``None``: MLX alone), and why, in a few words.
    ``ModelLoadError`` where the asked backend cannot run here."""
    from .families import moss_nano

    if backend == "mlx":
        return None, "asked for"
    if family != moss_nano.FAMILY:
        if backend == "host":
            raise ModelLoadError(
                f"the host backend runs MOSS-TTS-Nano only, and this checkpoint is "
                f"{family}; use the mlx or auto backend"
            )
        return None, "the host engine runs MOSS-TTS-Nano only"
    if sys.platform != "linux":  # checked here, so a Mac imports none of it
        if backend == "host":
            raise ModelLoadError("the host backend cannot run here: it runs on Linux only")
        return None, "the host engine cannot run here: it runs on Linux only"
    from .host_engine.engine import Unavailable, open_host_engine

    try:
        return open_host_engine(), "asked for" if backend == "host" else "it runs here"
    except Unavailable as why:
        if backend == "host":
            raise ModelLoadError(f"the host backend cannot run here: {why}") from None
        return None, f"the host engine cannot run here: {why}"


def device_name() -> str:
    """The device MLX computes on: ``cpu`` or ``gpu``."""
    import mlx.core as mx

    return "gpu" if mx.default_device().type == mx.gpu else "cpu"


@functools.cache
def keep_weights_wired() -> int | None:
    """Where the device recommends a working set (Metal's), let MLX keep that
    much memory wired, as mlx-lm does while it generates, so a model's
    weights are not paged out between requests. Once, on the worker, as the
    first model loads: MLX's wired limit must not change while work is
    queued. Returns the limit set, or None where the device names none."""
    import mlx.core as mx

    size = mx.device_info().get("max_recommended_working_set_size")
    if size is None:
        return None
    mx.set_wired_limit(size)
    return size


FIRST_COMPILE_NOTICE = (
    "first use of MLX on this machine: it compiles its CPU kernels with the C++ "
    "compiler while the model loads, so this load takes longer (once)"
)


def mlx_compiled_here_before() -> bool:
    """Whether MLX has compiled CPU kernels on this machine before: it keeps
    them under the temporary directory, and the first load that has none to
    find (seconds to tens of seconds) is several times slower. True where
    MLX does not compile for the CPU this way (macOS)."""
    if sys.platform != "linux":
        return True
    import mlx.core as mx

    kept = Path(tempfile.gettempdir()) / "mlx" / mx.__version__ / "cpu"
    return kept.is_dir() and any(kept.iterdir())


def bring_fast_blas() -> None:
    """On Linux, load the system OpenBLAS under MLX, which must not have been
    imported yet (``host_engine.blas``); elsewhere nothing."""
    if sys.platform == "linux":
        from .host_engine.blas import bring_openblas

        bring_openblas()


def blas_name() -> str:
    """The BLAS that MLX's CPU work runs on, in a few words."""
    if sys.platform != "linux":
        return "Accelerate" if sys.platform == "darwin" else "unknown"
    from .host_engine.blas import active_blas

    return active_blas()


def slow_blas_warning() -> str | None:
    """A sentence where MLX's CPU work runs on the mlx-cpu wheel's
    reference BLAS (Linux), else None."""
    if sys.platform != "linux":
        return None
    from .host_engine.blas import reference_blas_warning

    return reference_blas_warning()
