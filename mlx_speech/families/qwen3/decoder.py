"""One request's stream through mlx-audio's Qwen3-TTS speech-tokenizer decoder.

The decoder keeps its streaming state (conv buffers, overlap-add tails, the
transformer's KV cache) on its modules. Requests take turns on the worker, so
each request holds its own copy and installs it around its decode step.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np

STATE_ATTRIBUTES = ("_buffer", "_overflow", "_transformer_cache")


class RequestDecoder:
    def __init__(self, decoder):
        self._decoder = decoder
        decoder.reset_streaming_state()
        # named_modules() includes the decoder module itself (mlx-audio hands
        # out a compiled wrapper, on which attributes can be read but not set).
        modules = {id(module): module for _, module in decoder.named_modules()}
        self._slots = [
            (module, name)
            for module in modules.values()
            for name in STATE_ATTRIBUTES
            if hasattr(module, name)
        ]
        self._state = [None] * len(self._slots)  # a fresh stream

    def warm(self, codes: mx.array) -> None:
        """Feeds context frames (e.g. a cloned voice's reference) and drops their audio."""
        self._step(codes)

    def decode(self, codes: mx.array) -> np.ndarray:
        """``codes`` [1, groups, frames] → float32 mono samples."""
        wav = self._step(codes)
        return np.array(wav[0, 0], dtype=np.float32)

    def _step(self, codes: mx.array) -> mx.array:
        for (module, name), value in zip(self._slots, self._state, strict=True):
            setattr(module, name, value)
        try:
            wav = self._decoder.streaming_step(codes)
            mx.eval(wav)
            return wav
        finally:
            self._state = [getattr(module, name) for module, name in self._slots]
            self._decoder.reset_streaming_state()
