"""The one float → PCM16 conversion used by every surface."""

import numpy as np

PCM16_SCALE = 32767.0


def to_pcm16(samples: np.ndarray) -> np.ndarray:
    """Float audio in [-1, 1] → little-endian int16.

    Values are clipped to [-1, 1], scaled by 32767 and rounded to nearest with
    ties to even (``np.rint``): 0.5 LSB → 0, 1.5 LSB → 2, which keeps rounding
    unbiased. The caller's array is not modified; one scratch buffer is used.
    """
    scratch = np.clip(np.asarray(samples, dtype=np.float32), -1.0, 1.0)
    scratch *= PCM16_SCALE
    np.rint(scratch, out=scratch)
    return scratch.astype("<i2")
