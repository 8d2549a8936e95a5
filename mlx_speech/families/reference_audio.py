"""Reference clips for voice cloning: decoded, resampled and checked by the caller."""

from __future__ import annotations

import io
import os
import threading
from typing import Any, BinaryIO

import numpy as np
import soundfile
from mlx_audio.utils import resample_audio

from ..errors import InvalidRequest, shown
from ..regular_files import NotRegularFile, open_regular
from ..voices.clip_rules import (
    MAX_CLIP_SECONDS,
    MIN_CLIP_SECONDS,
    check_clip_header,
    decoding_failure,
)
from ..voices.store import SavedVoice

HEADER_SLACK = 1.0  # seconds; the exact length is checked once decoded
_BLOCK_FRAMES = 65536  # read at a time, so a many-channel clip is mixed as it is read
# Clips decoded at once, process-wide. Decoding is CPU work, so more at once
# gains no speed, and each may hold hundreds of megabytes while it is
# resampled; the others wait their turn.
DECODES_AT_ONCE = max(2, os.cpu_count() or 2)
_decoding = threading.BoundedSemaphore(DECODES_AT_ONCE)


def _read_file(source: Any, described: str, channels: int) -> tuple[np.ndarray, int]:
    """A clip in a file or in bytes, refused by its header before it is
    decoded, with ``channels`` kept or mixed to mono (``_mixed``) block by
    block."""
    try:
        with soundfile.SoundFile(source) as clip:
            seconds = clip.frames / clip.samplerate if clip.samplerate else 0.0
            # Whole codec frames at the codec's rate are counted after decoding.
            check_clip_header(
                seconds, clip.channels, clip.samplerate, "voice", slack=HEADER_SLACK
            )
            frames = int((MAX_CLIP_SECONDS + HEADER_SLACK) * clip.samplerate)
            blocks = clip.blocks(
                _BLOCK_FRAMES, frames=frames, dtype="float32", always_2d=True
            )
            mixed = [_mixed(block, channels) for block in blocks]
            width = 1 if clip.channels not in (1, channels) else clip.channels
            empty = np.zeros((0, width), np.float32)
            return (np.concatenate(mixed) if mixed else empty), clip.samplerate
    except (soundfile.LibsndfileError, RuntimeError, TypeError, OSError) as error:
        raise InvalidRequest(
            "voice", f"{described} could not be decoded: {decoding_failure(error)}"
        ) from None


def _mixed(data: np.ndarray, channels: int) -> np.ndarray:
    """``data`` with a model of ``channels`` channels in mind: mono and
    ``channels`` are kept, any other count is mixed to mono."""
    if data.shape[1] in (1, channels):
        return data
    return data.mean(axis=1, keepdims=True, dtype=np.float32)


def _regular_file(path: str, described: str) -> BinaryIO:
    try:
        return open_regular(path)
    except NotRegularFile:
        raise InvalidRequest("voice", f"{described} is not a regular file") from None
    except OSError as error:
        raise InvalidRequest(
            "voice", f"{described} cannot be read: {error.strerror}"
        ) from None


def _decode(source: Any, channels: int) -> tuple[np.ndarray, int]:
    """A saved voice, path, bytes or (samples, sample_rate) → ([samples,
    channels] float32, rate), mixed as ``_mixed`` says."""
    if isinstance(source, SavedVoice):
        return _read_file(
            str(source.clip),
            f"the saved voice {source.name!r} (deleted meanwhile?)",
            channels,
        )
    if isinstance(source, (bytes, bytearray, memoryview)):
        return _read_file(io.BytesIO(source), "reference audio bytes", channels)
    if isinstance(source, (str, os.PathLike)):
        described = f"reference audio {shown(str(source))}"
        with _regular_file(str(source), described) as handle:
            return _read_file(handle, described, channels)
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
        return _mixed(data, channels), int(rate)
    raise InvalidRequest(
        "voice",
        "a reference voice must be a path to an audio file, audio file bytes, "
        f"or (samples, sample_rate); got {type(source).__name__}",
    )


def load_reference(
    source: Any, *, sample_rate: int, channels: int, samples_per_frame: int
) -> np.ndarray:
    """A clip to clone (as ``voices.resolve_voice`` gives it: a saved voice,
    path, bytes or samples) ready for the codec: ``[samples, channels]``
    float32 at ``sample_rate``.

    Its length, counted in whole codec frames, must be 0.5–30 s. At most
    ``DECODES_AT_ONCE`` clips are decoded at once.
    """
    with _decoding:
        data, rate = _decode(source, channels)
        if not np.isfinite(data).all():
            raise InvalidRequest(
                "voice", "reference audio contains NaN or infinite samples"
            )
        if rate != sample_rate:
            data = np.asarray(
                resample_audio(data, rate, sample_rate, axis=0), dtype=np.float32
            )
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


def is_clip(voice: Any) -> bool:
    """Whether a resolved voice is a clip to decode: a path, bytes or samples
    (not a default, preset name or saved voice)."""
    return isinstance(voice, (bytes, bytearray, memoryview, os.PathLike, tuple))


def load_mono_reference(voice: Any, *, sample_rate: int, samples_per_frame: int):
    """The clip of ``voice`` as mono samples at ``sample_rate``."""
    samples = load_reference(
        voice,
        sample_rate=sample_rate,
        channels=1,
        samples_per_frame=samples_per_frame,
    )
    return samples[:, 0]
