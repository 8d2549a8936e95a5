"""Model families: each folder holds one family's loop and its service.

A service is what the engine and the transports use; they know nothing else
about a family. ``registry.FAMILIES`` maps a checkpoint's ``model_type`` to the
family's loader, which runs on the MLX worker and returns a service.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..audio.samples import Audio
from ..engine.batching import Pending
from ..errors import ModelLoadError
from .fields import SpeechInput

QUANTIZE_BITS = (8, 4)


@dataclass(frozen=True)
class LoadOptions:
    """What a model is loaded for. ``max_batch``: requests the worker steps
    together (a family that batches prepares those shapes while loading).
    ``quantize``: bits of the transformer weights (one of ``QUANTIZE_BITS``),
    or ``None`` for the checkpoint's own. ``accelerator``: a backend beside
    MLX for the family to plug in where it applies (MOSS-TTS-Nano's
    ``accelerator.Accelerator``), or ``None``: MLX alone."""

    max_batch: int = 1
    quantize: int | None = None
    accelerator: Any = None

    def refuse_quantize(self, family: str) -> None:
        """For a family whose weights are only served as the checkpoint has them."""
        if self.quantize is not None:
            raise ModelLoadError(
                f"quantize is supported for MOSS-TTS-Nano checkpoints only; "
                f"this one is {family}"
            )


DEFAULT_LOAD = LoadOptions()


class SpeechService:
    """What every family provides; subclasses fill in the rest."""

    name: str  # the family, e.g. "moss_tts_nano"
    sample_rate: int  # of the audio it yields
    channels: int = 1  # the model's own; a request may ask for them or for mono
    voices: tuple[str, ...] = ()  # preset voice names
    voice_hint: str  # what to pass instead of an unknown voice name
    backend = "mlx"  # what runs its model: "mlx", or an accelerator's name
    # "incremental": chunks come as frames are generated; "buffered": the audio
    # comes when the whole utterance is generated.
    streaming = "incremental"

    def prepare(self, asked: SpeechInput) -> Any:
        """Caller's thread, no MLX: validate the family's fields
        (``InvalidRequest`` naming the field), apply defaults, fix the seed.
        Returns the request ``synthesize`` takes; its ``ignored`` names the
        fields that were accepted but have no effect in this family."""
        raise NotImplementedError

    def check(self, asked: SpeechInput) -> tuple[str, ...]:
        """``prepare``'s checks of everything but the text (``asked.text`` is
        None), with nothing read or spoken: the fields the model ignores."""
        raise NotImplementedError

    def synthesize(self, request: Any) -> Iterator[Audio | Pending | None]:
        """Worker thread: one step per frame, yielding a chunk, ``None``, or
        ``Pending(batch, chunk)`` after submitting the frame to a step shared
        with the model's other requests (``chunk`` may be a ``DeferredOutput``
        that a shared decode fills); the engine stops calling it when the
        request is cancelled. It may return whether it ran to its frame budget
        without the model stopping (``ChunkStream.result``: a book retakes
        such a take); MOSS-TTS-Nano's does."""
        raise NotImplementedError

    def reusable_voice(self, voice: Any) -> Any:
        """``voice`` (as ``voices.resolve_voice`` gives it) in a form this
        family's ``prepare`` takes again cheaply, for many requests in one
        voice (a text stream's segments): a clip decoded and resampled once,
        as ``(samples, rate)``; any other voice as it is. Validates it."""
        return voice

    def stats(self) -> dict[str, int]:
        """Counters for /metrics."""
        return {}


__all__ = ["SpeechInput", "SpeechService"]
