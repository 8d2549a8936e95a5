"""Reference clips for voice cloning: decoded, resampled and checked by the caller."""

from __future__ import annotations

import io
import os
from typing import Any

import numpy as np
import soundfile
from mlx_audio.utils import resample_audio

from ..errors import InvalidRequest
from ..voice_store import MAX_CLIP_SECONDS, MIN_CLIP_SECONDS, SavedVoice


def _decode(source: Any) -> tuple[np.ndarray, int]:
    """Path, bytes or (samples, sample_rate) → ([samples, channels] float32, rate)."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        try:
            data, rate = soundfile.read(io.BytesIO(source), dtype="float32", always_2d=True)
        except (soundfile.LibsndfileError, RuntimeError, TypeError) as error:
            raise InvalidRequest(
                "voice", f"reference audio bytes could not be decoded: {error}"
            ) from None
        return data, rate
    if isinstance(source, (str, os.PathLike)):
        try:
            data, rate = soundfile.read(str(source), dtype="float32", always_2d=True)
        except (soundfile.LibsndfileError, RuntimeError) as error:
            raise InvalidRequest(
                "voice", f"reference audio {str(source)!r} could not be decoded: {error}"
            ) from None
        return data, rate
    if isinstance(source, tuple) and len(source) == 2:
        samples, rate = source
        if isinstance(rate, bool) or not isinstance(rate, (int, np.integer)) or rate <= 0:
            raise InvalidRequest(
                "voice", f"reference sample rate must be a positive integer, got {rate!r}"
            )
        data = np.asarray(samples, dtype=np.float32)
        if data.ndim == 1:
            data = data[:, None]
        elif data.ndim == 2 and data.shape[0] <= 8 and data.shape[0] < data.shape[1]:
            data = data.T  # channels-first
        elif data.ndim != 2:
            raise InvalidRequest(
                "voice", f"reference samples must be 1-D or 2-D, got shape {data.shape}"
            )
        return data, int(rate)
    raise InvalidRequest(
        "voice",
        "a reference voice must be a path to an audio file, audio file bytes, "
        f"or (samples, sample_rate); got {type(source).__name__}",
    )


def load_reference(
    source: Any, *, sample_rate: int, channels: int, samples_per_frame: int
) -> np.ndarray:
    """A clip ready for the codec: ``[samples, channels]`` float32 at ``sample_rate``.

    Its length, counted in whole codec frames, must be 0.5–30 s.
    """
    data, rate = _decode(source)
    if not np.isfinite(data).all():
        raise InvalidRequest("voice", "reference audio contains NaN or infinite samples")
    if data.shape[1] not in (1, channels):
        data = data.mean(axis=1, keepdims=True, dtype=np.float32)
    if rate != sample_rate:
        data = np.asarray(resample_audio(data, rate, sample_rate, axis=0), dtype=np.float32)
    frames = data.shape[0] // samples_per_frame
    seconds = frames * samples_per_frame / sample_rate
    if not MIN_CLIP_SECONDS <= seconds <= MAX_CLIP_SECONDS:
        raise InvalidRequest(
            "voice",
            f"reference audio must be {MIN_CLIP_SECONDS}-{MAX_CLIP_SECONDS:g} s long; "
            "this clip "
            f"gives {seconds:.2f} s ({frames} codec frames of "
            f"{1000 * samples_per_frame / sample_rate:g} ms)",
        )
    return np.ascontiguousarray(data)


def clip_of(voice: Any) -> Any:
    """A clip to clone (as ``voices.resolve_voice`` gives it) as ``load_reference``
    takes it: a saved voice by its stored clip."""
    return voice.clip if isinstance(voice, SavedVoice) else voice


def load_mono_reference(voice: Any, *, sample_rate: int, samples_per_frame: int):
    """The clip of ``voice`` as mono samples at ``sample_rate``."""
    samples = load_reference(
        clip_of(voice),
        sample_rate=sample_rate,
        channels=1,
        samples_per_frame=samples_per_frame,
    )
    return samples[:, 0]
