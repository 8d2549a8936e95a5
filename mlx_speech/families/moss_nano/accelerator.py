"""What a backend beside MLX may take over of Nano's work, and MLX's own
versions of each part.

The family computes everything through MLX: that is what a Mac runs, and
the reference every platform can run. An accelerator (such as
``mlx_speech.host_engine`` on Linux) is handed to ``service.load`` and plugs
in where it applies; the family never imports one. It offers three parts,
each ``None`` where it does not apply to the model or machine:

- a ``FrameStep``, which steps ``FrameJob``s in place of ``loop.MlxFrameStep``;
- a ``CodecDecoder``, which decodes in place of ``codec.MlxDecoder``;
- ``ArrayOps``: functions on MLX arrays (float32 only) that give MLX's
  numbers faster, used inside the MLX path (a prompt's GELU and masked
  attention; the codec's GELU and attention).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import mlx.core as mx

ArrayFunction = Callable[[mx.array], mx.array]
# (queries, keys, values, *, scale, mask): mx.fast.scaled_dot_product_attention's numbers
AttentionFunction = Callable[..., mx.array]


@dataclass(frozen=True)
class ArrayOps:
    """Faster functions with MLX's numbers, for float32 arrays; ``None``:
    MLX's own. ``gelu_tanh``: GPT-2's ``gelu_new``; ``gelu_erf``: the exact
    GELU; ``attention``: scaled dot-product attention with an additive mask."""

    gelu_tanh: ArrayFunction | None = None
    gelu_erf: ArrayFunction | None = None
    attention: AttentionFunction | None = None

    def takes(self, name: str, x: mx.array) -> ArrayFunction | AttentionFunction | None:
        """The function ``name`` for ``x``, or ``None`` where MLX's runs."""
        function = getattr(self, name)
        return function if function is not None and x.dtype == mx.float32 else None


MLX_OPS = ArrayOps()


class FrameStep(Protocol):
    def step(self, jobs: list) -> None:
        """One frame for each ``FrameJob`` (none of them done): sets each
        job's ``frame`` through ``FrameJob.record_frame``, or ``stopped``."""


class CodecDecoder(Protocol):
    def state(self, channels: int = 1):
        """A new request's place in the decoder (``channels``: of the audio
        handed out; 1 is a downmix)."""

    def decode_together(self, work: list) -> list:
        """``[(state, frames)]`` → each request's audio, evaluated,
        ``[samples, codec channels]``. (A decoder that queues work on a
        device may also offer ``queue_together``: the same audio, queued
        and not waited for, as ``codec.MlxDecoder`` does.)"""


class Accelerator(Protocol):
    name: str  # the backend's name, as ``MLX_SPEECH_BACKEND`` spells it

    def frame_step(self, model) -> FrameStep | None: ...

    def codec_decoder(self, codec, n_vq: int, fast: bool) -> CodecDecoder | None: ...

    def array_ops(self) -> ArrayOps: ...
