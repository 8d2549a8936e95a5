"""The host engine as the accelerator MOSS-TTS-Nano plugs in."""

from __future__ import annotations

from ..families.moss_nano.accelerator import ArrayOps
from .blas import mlx_blas
from .codec_decoder import HostDecoder, host_decoder
from .frame_step import HostStep
from .library import ExactActivations, Unavailable, attention_with, exact_activations
from .step_checks import host_step

NAME = "host"  # as MLX_SPEECH_BACKEND spells it


class HostEngine:
    """The ``Accelerator`` the family plugs in (see its module)."""

    name = NAME

    def __init__(self, activations: ExactActivations, blas: str):
        self._activations = activations
        self._blas = blas

    def frame_step(self, model) -> HostStep | None:
        return host_step(model, self._activations, self._blas)

    def codec_decoder(self, codec, n_vq: int, fast: bool) -> HostDecoder | None:
        return host_decoder(codec, n_vq, fast, self._activations, self._blas)

    def array_ops(self) -> ArrayOps:
        found = self._activations
        softmax = found.softmax
        return ArrayOps(
            gelu_tanh=found.gelu_tanh,
            gelu_erf=found.gelu_erf,
            attention=None if softmax is None else attention_with(softmax),
        )


def open_host_engine() -> HostEngine:
    """MLX's thread (the library's checks run MLX): the engine, or
    ``Unavailable`` saying why it cannot run here."""
    activations = exact_activations()
    blas = mlx_blas()
    if blas is None:
        raise Unavailable("the BLAS library MLX runs on was not found")
    return HostEngine(activations, blas)
