"""The host engine's parts, made as its ``HostEngine`` makes them."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from mlx_speech.host_engine.blas import mlx_blas
from mlx_speech.host_engine.codec_decoder import HostDecoder, host_decoder
from mlx_speech.host_engine.frame_step import HostStep
from mlx_speech.host_engine.library import exact_activations
from mlx_speech.host_engine.step_checks import host_step


def host_step_for(model) -> HostStep | None:
    return host_step(model, exact_activations(), mlx_blas())


def host_decoder_for(codec, n_vq: int, fast: bool) -> HostDecoder | None:
    return host_decoder(codec, n_vq, fast, exact_activations(), mlx_blas())


needs_host_library = pytest.mark.skipif(
    not sys.platform.startswith("linux")
    or importlib.util.find_spec("mlx_speech.host_engine._nano_kernels") is None,
    reason="the host engine's C library is built at install on Linux, with a C compiler",
)
