"""``Audio``: what the Python API returns."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .formats import encode_whole, format_for_path


@dataclass(frozen=True)
class Audio:
    """Float32 samples at ``sample_rate``: ``[samples]`` (mono, the default)
    or ``[samples, channels]``; a text stream's chunks say which ``segment``
    (its index) they belong to."""

    samples: np.ndarray
    sample_rate: int
    segment: int | None = None

    @property
    def channels(self) -> int:
        return 1 if self.samples.ndim == 1 else self.samples.shape[1]

    @property
    def duration(self) -> float:
        return len(self.samples) / self.sample_rate

    def write(self, path: str | Path, format: str | None = None) -> Path:
        """Write the audio; the container comes from ``format`` or the suffix
        (wav, flac, mp3, opus, ogg, aac; ``pcm`` is headerless 16-bit little-endian)."""
        path = Path(path)
        audio_format = format_for_path(path, format)
        path.write_bytes(encode_whole(self.samples, self.sample_rate, audio_format.name))
        return path
