"""Text normalization: what the model is given instead of what was written.

Two passes, as MOSS-TTS-Nano's own frontend does: the robustness pass
(``robust``, every language) and the semantic pass (``grammars``: English and
Chinese through the WeTextProcessing grammars), the language taken from the
request or, with ``auto``, from the script. Runs on the caller's thread.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from ...families.languages import iso_code
from .grammars import LANGUAGES, Grammars, read_until_past
from .robust import clean_text
from .scripts import script_language

__all__ = ["TextNormalizer", "clean_text", "script_language"]

# Latin and CJK beside each other, marks and brackets: every pattern's path
_WARM_TEXT = "Hello 你好 [link](https://example.com) -- ok... 今天 3 天！！"


class TextNormalizer:
    def __init__(self) -> None:
        self._grammars = Grammars()
        self._lock = threading.Lock()
        self._texts = 0
        self._seconds = 0.0

    def preload(self) -> threading.Thread:
        """Start loading the grammars on a thread of their own, returned,
        which also compiles the robustness pass's patterns (Python compiles
        a pattern at its first use: 10 ms of a first request's time)."""
        thread = threading.Thread(target=self._warm, name="mlx-speech-text", daemon=True)
        thread.start()
        return thread

    def _warm(self) -> None:
        clean_text(_WARM_TEXT)
        self._grammars.load()

    def language(self, text: str, language: Any = None) -> str | None:
        """The language the semantic pass reads ``text`` in, ``None`` for
        none: the request's (names or codes), or by script for ``auto``."""
        code = iso_code(language)
        if code is None or code == "auto":
            code = script_language(text)
        return code if code in LANGUAGES else None

    def normalize(self, text: str, language: Any = None, most: int | None = None) -> str:
        """``text`` as the model will be given it. A text that would come
        out blank is given as written. With ``most``, reading stops once
        the result passes that many characters: a text past a limit is
        refused without reading all of it."""
        started = time.perf_counter()
        cleaned = clean_text(text)
        read_in = self.language(cleaned, language)
        if read_in is not None:
            lines = read_until_past(
                cleaned.split("\n"),
                lambda line, left: self._grammars.read(line, read_in, left),
                most,
                separator=1,
            )
            cleaned = clean_text("\n".join(lines))
        with self._lock:
            self._texts += 1
            self._seconds += time.perf_counter() - started
        return cleaned if cleaned.strip() else text

    def stats(self) -> dict[str, float]:
        with self._lock:
            return {
                "text_normalizations": self._texts,
                "text_normalization_seconds": round(self._seconds, 6),
                "text_normalization_fallbacks": self._grammars.fallbacks,
            }
