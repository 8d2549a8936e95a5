"""Streaming decode of VoxCPM2's audio VAE, with the same samples as one whole decode.

The VAE decoder is built from causal convolutions, so an output sample depends
only on latent frames up to its own and no further back than the decoder's
reach. Decoding each chunk together with ``reach`` frames of left context
therefore reproduces the whole-utterance decode; the reach is measured once per
model by perturbing the first frame of a probe and seeing how far it echoes.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np

MARGIN_FRAMES = 2
LONGEST_PROBE = 8192


def decoder_reach(vae, samples_per_frame: int) -> int:
    """Latent frames of left context an output sample can depend on."""
    length = 64
    while length <= LONGEST_PROBE:
        base = mx.random.normal((1, length, vae.latent_dim), key=mx.random.key(0))
        first = mx.zeros((1, length, 1)).at[:, 0, :].add(1.0)
        changed = np.flatnonzero(
            np.asarray(mx.abs(vae.decode(base + 3.0 * first) - vae.decode(base))) > 0
        )
        if changed.size == 0:
            return MARGIN_FRAMES
        reach = int(changed[-1]) // samples_per_frame + 1
        if reach < length - 1:
            return reach + MARGIN_FRAMES
        length *= 2
    raise RuntimeError(f"the VAE decoder reaches past {LONGEST_PROBE} latent frames")


class WindowedDecoder:
    """One request's latent patches, decoded a chunk at a time."""

    def __init__(self, vae, reach: int, samples_per_frame: int):
        self._vae = vae
        self._reach = reach
        self._samples_per_frame = samples_per_frame
        self._patches: list[mx.array] = []  # each [1, patch, dim]
        self._first_patch = 0  # index in the utterance of self._patches[0]
        self._decoded = 0  # latent frames whose audio was delivered

    def add(self, patch: mx.array) -> None:
        self._patches.append(patch)

    def decode(self, final: bool = False) -> np.ndarray:
        """Audio of the frames added since the last call; ``final`` adds the tail
        the decoder's last upsampling produces past the last frame."""
        patch_frames = self._patches[0].shape[1]
        total = (self._first_patch + len(self._patches)) * patch_frames
        start = max(0, self._decoded - self._reach)
        drop = start // patch_frames - self._first_patch
        self._patches = self._patches[drop:]
        self._first_patch += drop
        window_start = self._first_patch * patch_frames
        audio = self._vae.decode(mx.concatenate(self._patches, axis=1)).flatten()
        begin = (self._decoded - window_start) * self._samples_per_frame
        end = audio.shape[0] if final else (total - window_start) * self._samples_per_frame
        self._decoded = total
        return np.array(audio[begin:end], dtype=np.float32)
