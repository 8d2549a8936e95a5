"""mlx-speech: local streaming text-to-speech on MLX.

tts = mlx_speech.load()                      # MOSS-TTS-Nano from the hub
tts.speak("Hello there.", voice="me.wav").write("out.wav")
for chunk in tts.stream("Hello again.", voice="me.wav"):
    play(chunk.samples)
"""

from __future__ import annotations

import importlib
from typing import Any

from .backends import bring_fast_blas

bring_fast_blas()  # before MLX's first import, wherever that comes

DEFAULT_MODEL = "mlx-community/MOSS-TTS-Nano-100M"

# Imported at first use, so that the command line's --help and usage errors
# answer without loading MLX and the model code.
_EXPORTS = {
    "TTS": "tts",
    "Audio": "audio.samples",
    "GenerationError": "errors",
    "ModelLoadError": "errors",
    "Lexicon": "text.lexicon",
    "LexiconError": "text.lexicon",
    "VoiceStore": "voices.store",
    "load": "loading",
    "speak_book": "book.speech",
}

__all__ = ["DEFAULT_MODEL", *_EXPORTS]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'mlx_speech' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
