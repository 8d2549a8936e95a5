"""Loading a checkpoint into a ``TTS`` (``mlx_speech.load``)."""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path

from . import DEFAULT_MODEL
from .backends import (
    accelerator_for,
    device_name,
    keep_weights_wired,
    requested_backend,
    slow_blas_warning,
)
from .engine import shared_engine
from .errors import ModelLoadError
from .families import QUANTIZE_BITS, LoadOptions, SpeechService
from .registry import FAMILIES, model_family, resolve_model_dir
from .text.lexicon import Lexicon, load_lexicon
from .text.normalization import TextNormalizer
from .tts import TTS
from .voices.store import VoiceStore

log = logging.getLogger("mlx_speech.engine")
QUANTIZED_ON_A_CPU = (
    "quantized weights on a CPU: speech is slower, not faster (MLX's quantized "
    "products there are slower than its float ones), and only memory is saved"
)


def load(
    model: str | Path = DEFAULT_MODEL,
    voices_dir: str | Path | VoiceStore | None = None,
    voice_aliases: dict[str, str] | None = None,
    normalize: bool = True,
    quantize: int | None = None,
    backend: str | None = None,
    lexicon: str | Path | Lexicon | None = None,
) -> TTS:
    """Load a checkpoint (local directory or hub id); its family comes from config.json.

    ``voices_dir`` holds saved voices (default: a per-user data directory), or
    is the ``VoiceStore`` to share with the caller; ``voice="NAME"`` then uses one.
    ``voice_aliases`` maps names clients send (``{"alloy": "grandma"}``) to voices.
    ``normalize`` is the default of each request's text normalization.
    ``quantize`` (8 or 4) quantizes MOSS-TTS-Nano's transformer weights to
    that many bits as they load (the codec stays float).
    ``backend`` is ``"auto"``, ``"mlx"`` or ``"host"`` (default:
    ``MLX_SPEECH_BACKEND``, else ``"auto"``; see ``mlx_speech.backends``);
    ``tts.backend`` says which runs.
    ``lexicon`` (a file, PLS or ``WRITTEN = SAID`` lines, or a ``Lexicon``)
    says words otherwise before normalization (``mlx_speech.text.lexicon``).
    """
    chosen = requested_backend(backend)
    if lexicon is not None and not isinstance(lexicon, Lexicon):
        lexicon = load_lexicon(lexicon)  # a bad file fails before the model loads
    if quantize is not None and (
        quantize not in QUANTIZE_BITS or not isinstance(quantize, int)
    ):
        raise ValueError(f"quantize must be 8, 4 or None (bits), got {quantize!r}")
    model_dir = resolve_model_dir(model)
    family = model_family(model_dir)
    engine = shared_engine()
    store = voices_dir if isinstance(voices_dir, VoiceStore) else VoiceStore(voices_dir)
    aliases = {name.lower(): voice for name, voice in (voice_aliases or {}).items()}
    normalizer = TextNormalizer()
    grammars = normalizer.preload()  # beside the model, not after it
    service, device, why = engine.call(
        partial(_service_on_worker, model_dir, family, chosen, quantize, engine.max_batch)
    )
    if device == "cpu" and (slow := slow_blas_warning()) is not None:
        log.warning(slow)
    grammars.join()  # so the first request does not wait for them
    tts = TTS(service, engine, store, aliases, normalize, normalizer, device)
    tts.lexicon = lexicon
    tts.backend_reason = why
    tts.model = str(model_dir)
    return tts


def _service_on_worker(
    model_dir: Path, family: str, chosen: str, quantize: int | None, max_batch: int
) -> tuple[SpeechService, str, str]:
    """The family's service, loaded on the worker (MLX's streams are its
    thread's), with the device it runs on and why its backend runs."""
    keep_weights_wired()
    accelerator, why = accelerator_for(chosen, family)
    options = LoadOptions(max_batch, quantize, accelerator)
    try:
        service = FAMILIES[family](model_dir, options)
    except ModelLoadError:
        raise
    except Exception as error:
        raise ModelLoadError(f"cannot load {model_dir}: {error}") from error
    if accelerator is not None and service.backend == "mlx":
        if chosen == "host":
            raise ModelLoadError(
                "the host backend cannot run this model here: none of its parts "
                "gives MLX's numbers on this machine (the log says which differ)"
            )
        why = "the host engine's parts differ from MLX's here"
    device = device_name()
    log.info("backend: %s (%s), device: %s", service.backend, why, device)
    if quantize is not None and device == "cpu":
        log.warning(QUANTIZED_ON_A_CPU)
    return service, device, why
