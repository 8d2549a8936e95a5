"""The model slot: the model, loaded in the background (on a thread of its
own; MLX work itself runs on the engine's worker) so that every listener
can answer meanwhile."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ..errors import ModelLoadError, ModelNotFetched
from ..text.lexicon import Lexicon
from ..tts import TTS
from ..voices.store import VoiceStore
from .refusal import Refusal

log = logging.getLogger("mlx_speech.server")

NOT_READY_RETRY_SECONDS = 5

# ``load(model, voices_dir=the server's store, voice_aliases=…, quantize=…, backend=…)``
# → the model;
# ``mlx_speech.load`` is one.
Loader = Callable[..., TTS]


def model_id(model: str) -> str:
    """The model's name for clients: a hub id as given, a local checkpoint's
    directory name (never the server's path)."""
    path = Path(model).expanduser()
    return path.resolve().name if path.is_dir() else model


class ModelSlot:
    """The model, loaded in the background so /health can answer meanwhile."""

    def __init__(
        self,
        model: str,
        load: Loader,
        store: VoiceStore,
        aliases: dict[str, str],
        normalize: bool = True,
        quantize: int | None = None,
        backend: str | None = None,
        max_text_chars: int | None = None,
        lexicon: Lexicon | None = None,
    ):
        self.name = model  # as given: a hub id or the server's path (for the log)
        self.id = model_id(model)  # what clients see
        self._normalize = normalize
        self._max_text_chars = max_text_chars
        self._quantize = quantize
        self._backend = backend
        self._lexicon = lexicon
        self.tts: TTS | None = None
        self.error: Exception | None = None
        # Called (on the loading thread) when loading failed: a server with no
        # model has nothing to serve, so ``mlx-speech serve`` stops.
        self.on_failure: Callable[[Exception], None] | None = None
        # Called (on the loading thread) once the model is loaded.
        self.on_loaded: Callable[[], None] | None = None
        self._thread = threading.Thread(
            target=self._load, args=(load, store, aliases), daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def _load(self, load: Loader, store: VoiceStore, aliases: dict[str, str]) -> None:
        log.debug("loading %s", self.name)  # serve said so as it started
        started = time.perf_counter()
        try:
            tts = load(
                self.name,
                voices_dir=store,
                voice_aliases=aliases,
                quantize=self._quantize,
                backend=self._backend,
            )
            tts.normalize = self._normalize
            tts.max_text_chars = self._max_text_chars
            tts.lexicon = self._lexicon
            self.tts = tts
        except Exception as error:  # noqa: BLE001 - reported by /health and requests
            if isinstance(error, ModelNotFetched):  # in the server's words
                error = ModelLoadError(error.saying("serve --model DIR, a directory"))
            self.error = error
            log.error("cannot load %s: %s", self.name, error)
            if self.on_failure is not None:
                self.on_failure(error)
            return
        log.info(
            "loaded %s (%s, %d Hz) in %.1f s",
            self.name,
            self.tts.family,
            self.tts.sample_rate,
            time.perf_counter() - started,
        )
        if self.on_loaded is not None:
            self.on_loaded()

    def ready(self) -> TTS:
        """The model; ``Refusal`` (``not-ready``) while it loads or if it failed to."""
        if self.tts is None:
            detail = f"failed to load: {self.error}" if self.error else "still loading"
            raise Refusal("not-ready", f"the model is {detail}", NOT_READY_RETRY_SECONDS)
        return self.tts
