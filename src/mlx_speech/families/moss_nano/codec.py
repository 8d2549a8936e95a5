"""Codec side of the Nano family: frames of codes → mono float PCM, streamed."""

from __future__ import annotations

import math

import mlx.core as mx
import numpy as np
from mlx_audio.codec import MossAudioTokenizer

from ...errors import GenerationError


def samples_per_frame(codec: MossAudioTokenizer) -> int:
    """Output samples per channel for one frame, from the decoder's stages."""
    upsampling = math.prod(stage.downsample_ratio for stage in codec.decoder)
    interleaved = codec.channels if codec.enable_channel_interleave else 1
    return upsampling // interleaved


class StreamingAudioDecoder:
    """One request's codec state across all its segments."""

    def __init__(self, codec: MossAudioTokenizer, n_vq: int):
        self._decoder = codec.make_streaming_decoder(num_quantizers=n_vq)

    def decode(self, frames: list[mx.array]) -> np.ndarray:
        """Decode frames that follow the previous call's → mono float32 samples."""
        audio = self._decoder.decode_frames(mx.stack(frames))
        samples = np.asarray(audio, dtype=np.float32).mean(axis=1, dtype=np.float32)
        if not np.isfinite(samples).all():
            raise GenerationError(
                "the codec produced non-finite audio; the checkpoint may be corrupt"
            )
        return samples
