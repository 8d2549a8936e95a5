"""``Audio``: what the Python API returns."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile

from .pcm import to_pcm16

# suffix → (libsndfile format, subtype, takes PCM16 input)
_CONTAINERS = {
    "wav": ("WAV", "PCM_16", True),
    "flac": ("FLAC", "PCM_16", True),
    "ogg": ("OGG", "VORBIS", False),
    "opus": ("OGG", "OPUS", False),
    "mp3": ("MP3", "MPEG_LAYER_III", False),
}


def output_format(path: str | Path, format: str | None = None) -> str:
    """The container ``Audio.write`` will use: ``format``, else the suffix."""
    path = Path(path)
    kind = (format or path.suffix.lstrip(".")).lower()
    if kind != "pcm" and kind not in _CONTAINERS:
        supported = ", ".join(["pcm", *_CONTAINERS])
        raise ValueError(
            f"cannot write {path.name!r}: unknown audio format {kind!r}; "
            f"use one of {supported}"
        )
    return kind


@dataclass(frozen=True)
class Audio:
    """Mono float32 samples at ``sample_rate``."""

    samples: np.ndarray
    sample_rate: int

    @property
    def duration(self) -> float:
        return len(self.samples) / self.sample_rate

    def write(self, path: str | Path, format: str | None = None) -> Path:
        """Write the audio; the container comes from ``format`` or the suffix.

        ``.pcm`` writes headerless 16-bit little-endian PCM.
        """
        path = Path(path)
        kind = output_format(path, format)
        if kind == "pcm":
            path.write_bytes(to_pcm16(self.samples).tobytes())
            return path
        container, subtype, takes_pcm16 = _CONTAINERS[kind]
        data = to_pcm16(self.samples) if takes_pcm16 else self.samples
        soundfile.write(
            str(path), data, self.sample_rate, format=container, subtype=subtype
        )
        return path
