"""The MOSS-TTS-Nano family: request validation and defaults (caller's thread)
and synthesis (worker thread)."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Generator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten
from mlx_audio.codec import MossAudioTokenizer
from mlx_audio.tts.models.moss_tts_nano import Model
from mlx_audio.tts.models.moss_tts_nano.text import (
    build_user_prompt_after_reference,
    build_user_prompt_prefix,
    encode_text,
    lightweight_normalize_text,
    split_text_into_best_sentences,
)
from mlx_audio.tts.utils import load_model

from ...audio.samples import Audio
from ...engine.batching import Pending
from ...errors import ModelLoadError
from ...voices.store import SavedVoice
from .. import DEFAULT_LOAD, LoadOptions, SpeechInput, SpeechService
from ..fields import check_channels
from ..languages import check_language
from ..options import SamplingOptions, parse_sampling
from ..reference_audio import is_clip, load_reference
from ..reference_cache import ByteBoundedLRU, content_key
from .accelerator import MLX_OPS, Accelerator, ArrayOps, CodecDecoder, FrameStep
from .batch import CodecBatch, FrameBatch
from .chunk_release import ChunkRelease
from .codec import MlxDecoder, encode, samples_per_frame
from .codec_math import codec_math, fast_by_default
from .forward import forward_rows
from .kv_cache import BlockKVCache, block_caches, restore, snapshot, snapshot_bytes
from .loop import FrameJob, FrameSampling, MlxFrameStep, embed_rows, warm_up
from .quantize import quantize_transformers
from .sampling import GREEDY_HEAD, HeadSampler, KeySequence

FAMILY = "moss_tts_nano"
log = logging.getLogger("mlx_speech.engine")

# mlx-audio 0.6.2's defaults for this family.
DEFAULTS = SamplingOptions(
    temperature=0.8, top_p=0.95, top_k=25, repetition_penalty=1.2, max_new_tokens=375
)
TEXT_HEAD = HeadSampler(temperature=1.0, top_k=50, top_p=1.0)
MAX_TEXT_TOKENS_PER_SEGMENT = 75
MAX_FRAMES_PER_SEGMENT = 4096
CONTINUATION_PREFIX = "continuation"  # prefix-cache key of the no-reference prompt


@dataclass(frozen=True)
class Reference:
    """A clip to clone: its codes when already known, else the audio to encode."""

    samples: np.ndarray | None  # [samples, channels] at the codec rate
    codes: np.ndarray | None  # [frames, n_vq]
    key: str | None = None
    saved: SavedVoice | None = None


@dataclass(frozen=True)
class MossNanoRequest:
    segments: list[str]
    reference: Reference | None
    sampling: FrameSampling
    seed: int
    ignored: tuple[str, ...] = ()  # fields accepted but unused
    channels: int = 1  # 1: downmixed; the codec's count: as decoded


class MossNanoService(SpeechService):
    name = FAMILY
    voice_hint = (
        "not a saved voice, and MOSS-TTS-Nano has no presets; use 'default', a "
        "saved voice name or a reference clip"
    )

    def __init__(
        self,
        model: Model,
        codec: MossAudioTokenizer,
        codec_id: str,
        parts: NanoParts,
    ):
        self._model = model
        self._codec = codec
        self._ops = parts.ops
        self._batch = FrameBatch(parts.stepper)
        self._decodes = CodecBatch(
            parts.decoder, model.config.n_vq, int(codec.sample_rate), frames=self._batch
        )
        self.backend = parts.backend
        self._codec_id = codec_id
        self._references = ByteBoundedLRU()  # clip key → codes
        self._prefixes = ByteBoundedLRU()  # codes key → KV state of the prompt prefix
        user_prefix = build_user_prompt_prefix(model.tokenizer, model.config)
        after_reference = build_user_prompt_after_reference(model.tokenizer)
        # Cloning, the prompt is the template, audio start, the reference's
        # rows, audio end and the template's part after the reference, then
        # the text: all but the text is the same for every request in a voice.
        self._rows_before_reference = len(user_prefix) + 1
        self._rows_after_reference = 1 + len(after_reference)
        # Without a reference the prompt starts with the template's
        # "reference: None" part, the same for every request.
        self._continuation_prefix_rows = (
            len(user_prefix)
            + len(encode_text(model.tokenizer, "None"))
            + len(after_reference)
        )
        self._encodes = 0
        self._saved_voice_hits = 0
        self._code_writer = ThreadPoolExecutor(1, thread_name_prefix="mlx-speech-codes")
        self.sample_rate = int(codec.sample_rate)
        self.channels = int(codec.channels)
        self.samples_per_frame = samples_per_frame(codec)

    def warm_up_decodes(self, requests: int) -> None:
        self._decodes.warm_up(requests)

    def warm_up_prompt_prefix(self) -> None:
        """Computes the KV state every prompt without a reference starts
        from, so the first such request does not."""
        self._prefilled(self._prompt("Hello.", None), None, None)

    def stats(self) -> dict[str, int]:
        return {
            "reference_cache_hits": self._references.hits,
            "reference_cache_misses": self._references.misses,
            "prompt_prefix_cache_hits": self._prefixes.hits,
            "reference_encodes": self._encodes,
            "saved_voice_code_hits": self._saved_voice_hits,
        }

    # Caller's thread: nothing here touches MLX.
    def reusable_voice(self, voice: Any) -> Any:
        if not is_clip(voice):
            return voice  # a saved voice keeps its stored codes
        return (self._clip(voice), self.sample_rate)

    def prepare(self, asked: SpeechInput) -> MossNanoRequest:
        """Cloning uses the audio alone: ``ref_text`` is not needed. OpenAI
        clients send ``instructions`` (for gpt-4o-mini-tts); the model has no
        input for them, so they are ignored, and the request says so."""
        segments = split_text_into_best_sentences(
            self._model.tokenizer,
            lightweight_normalize_text(asked.text),
            max_tokens=MAX_TEXT_TOKENS_PER_SEGMENT,
        )
        return self._request(asked, segments)

    def check(self, asked: SpeechInput) -> tuple[str, ...]:
        return self._request(asked, segments=[]).ignored

    def _request(self, asked: SpeechInput, segments: list[str]) -> MossNanoRequest:
        check_language(asked.language, None, "MOSS-TTS-Nano")
        channels = check_channels(asked.channels, self.channels, "MOSS-TTS-Nano")
        options = parse_sampling(asked.sampling, DEFAULTS, MAX_FRAMES_PER_SEGMENT)
        return MossNanoRequest(
            segments=segments,
            reference=self._reference(asked.voice),
            sampling=_frame_sampling(options),
            seed=options.seed,
            ignored=("instructions",) if asked.instructions is not None else (),
            channels=channels,
        )

    def _reference(self, voice: Any) -> Reference | None:
        """The clip to clone, with its codes when a saved voice stored them or
        the cache holds them."""
        if voice is None:
            return None
        saved = voice if isinstance(voice, SavedVoice) else None
        if saved is not None:
            stored = saved.load_codes(self._codec_id)
            if stored is not None:
                self._saved_voice_hits += 1
                return Reference(samples=None, codes=stored, saved=saved)
        samples = self._clip(voice)
        key = content_key(samples)
        codes = self._references.get(key)
        if saved is not None and codes is not None:
            self._store_codes(saved, codes)
        return Reference(samples, codes, key, saved)

    # Worker thread.
    def synthesize(
        self, request: MossNanoRequest
    ) -> Generator[Audio | Pending | None, None, bool]:
        """One frame per step, stepped together with the model's other
        requests; each chunk is decoded together with theirs and goes out
        while the next frame is computed. Returns whether a segment ran to
        its frame budget without the model stopping."""
        keys = KeySequence(request.seed)
        reference_codes, prefix_key = None, None
        if request.reference is not None:
            codes = self._reference_codes(request.reference)
            reference_codes, prefix_key = mx.array(codes), content_key(codes)
        decoder = self._decodes.state(request.channels)
        chunks = ChunkRelease(self._decodes, decoder)
        ran_out = False  # a segment used its frame budget without stopping
        for segment in request.segments:
            cache, rows = self._prefilled(
                self._prompt(segment, reference_codes), reference_codes, prefix_key
            )
            job = FrameJob(self._model, rows, request.sampling, keys, cache)
            while not job.done:
                self._batch.submit(job)
                yield Pending(self._batch, chunks.due())
                if job.failure is not None:
                    raise job.failure
                if job.stopped:
                    break
                chunks.add(job.frame)
            ran_out = ran_out or not job.stopped
        for chunk in chunks.rest():
            yield Pending(self._decodes, chunk)
        return ran_out

    def _clip(self, voice: Any) -> np.ndarray:
        return load_reference(
            voice,
            sample_rate=self.sample_rate,
            channels=self._codec.channels,
            samples_per_frame=self.samples_per_frame,
        )

    def _reference_codes(self, reference: Reference) -> np.ndarray:
        if reference.codes is not None:
            return reference.codes
        exact = codec_math(self._ops, fast=False)
        codes = encode(self._codec, reference.samples, self._model.config.n_vq, exact)
        self._encodes += 1
        self._references.put(reference.key, codes, codes.nbytes)
        if reference.saved is not None:
            self._store_codes(reference.saved, codes)
        return codes

    def _store_codes(self, voice: SavedVoice, codes: np.ndarray) -> None:
        """Written (and fsynced) on the writer thread: neither the MLX worker
        nor a caller waits for the disk."""
        self._code_writer.submit(voice.save_codes, self._codec_id, codes)

    def _prompt(self, segment: str, reference_codes: mx.array | None) -> mx.array:
        input_ids, _ = self._model.build_inference_input_ids(
            text=segment,
            tokenizer=self._model.tokenizer,
            mode="continuation" if reference_codes is None else "voice_clone",
            prompt_audio_codes=reference_codes,
        )
        return input_ids

    def _prefilled(
        self, prompt: mx.array, reference_codes: mx.array | None, key: str | None
    ) -> tuple[list[BlockKVCache], mx.array]:
        """A cache holding the prompt's shared prefix, and the rows still to prefill.

        Up to the text, a prompt is the same for every request with the same
        voice (the template, around the reference rows when cloning); its KV
        state is computed once.
        """
        if reference_codes is None:
            split, key = self._continuation_prefix_rows, CONTINUATION_PREFIX
        else:
            split = (
                self._rows_before_reference
                + reference_codes.shape[0]
                + self._rows_after_reference
            )
        taken = self._prefixes.get(key)
        if taken is None:
            # One forward over the whole prefix: at full size, starting it
            # from cached first rows would round some products differently.
            cache = block_caches(len(self._model.transformer.h))
            forward_rows(
                self._model.transformer,
                [embed_rows(self._model, prompt[:, :split])],
                [cache],
                self._ops,
            )
            taken = snapshot(cache)
            self._prefixes.put(key, taken, snapshot_bytes(taken))
        return restore(taken), prompt[:, split:]


def _frame_sampling(options: SamplingOptions) -> FrameSampling:
    greedy = options.temperature == 0
    return FrameSampling(
        text=GREEDY_HEAD if greedy else TEXT_HEAD,
        audio=HeadSampler(options.temperature, options.top_k, options.top_p),
        repetition_penalty=options.repetition_penalty,
        max_frames=options.max_new_tokens,
    )


@dataclass(frozen=True)
class NanoParts:
    """What runs a loaded model's frames and decoding: MLX's parts, or an
    accelerator's where it offers them. ``backend``: the accelerator's name
    if any of its parts runs, else "mlx"."""

    stepper: FrameStep
    decoder: CodecDecoder
    ops: ArrayOps
    backend: str


def nano_parts(
    model: Model, codec: MossAudioTokenizer, accelerator: Accelerator | None
) -> NanoParts:
    """Worker thread: each part from ``accelerator`` where it applies (its
    load checks run here), else MLX's; the log says which."""
    n_vq, fast = model.config.n_vq, fast_by_default()
    ops = accelerator.array_ops() if accelerator is not None else MLX_OPS
    stepper = accelerator.frame_step(model) if accelerator is not None else None
    decoder = accelerator.codec_decoder(codec, n_vq, fast) if accelerator else None
    taken = [
        name
        for name, part in (("frame step", stepper), ("codec decoder", decoder))
        if part is not None
    ] + (["activations"] if ops != MLX_OPS else [])
    backend = accelerator.name if accelerator is not None and taken else "mlx"
    if accelerator is not None and taken:
        log.info(
            "MOSS-TTS-Nano on the %s backend: %s from it, the rest through MLX",
            backend,
            ", ".join(taken),
        )
    elif accelerator is not None:
        log.info("no part of the %s engine gives MLX's numbers here", accelerator.name)
    return NanoParts(
        stepper=stepper or MlxFrameStep(model, ops),
        decoder=decoder or MlxDecoder(codec, n_vq, codec_math(ops, fast)),
        ops=ops,
        backend=backend,
    )


def load(model_dir: Path, options: LoadOptions = DEFAULT_LOAD) -> MossNanoService:
    """Worker thread: the model with mlx-audio's loader (its blocks quantized
    when ``options.quantize`` asks), then its codec; then its parts
    (``nano_parts``: ``options.accelerator``'s where they apply) and a
    warm-up of the shapes ``options.max_batch`` requests will use."""
    model = load_model(model_dir)
    if model.tokenizer is None:
        raise ModelLoadError(f"{model_dir} has no tokenizer.model")
    if options.quantize is not None:
        quantize_transformers(model, options.quantize)
    fallback = model.config.audio_tokenizer_pretrained_name_or_path
    try:
        codec = MossAudioTokenizer.from_model_dir(model_dir, fallback_source=fallback)
    except Exception as error:
        raise ModelLoadError(
            f"could not load the audio codec: no audio_tokenizer/ in {model_dir} and "
            f"fetching {fallback or 'the default codec'} failed ({error})"
        ) from error
    model.audio_tokenizer = codec
    parts = nano_parts(model, codec, options.accelerator)
    service = MossNanoService(model, codec, _codec_id(codec), parts)
    warm_up(model, _frame_sampling(DEFAULTS), parts.stepper, options.max_batch)
    service.warm_up_decodes(options.max_batch)
    service.warm_up_prompt_prefix()
    return service


def _codec_id(codec: MossAudioTokenizer) -> str:
    """Names the codec's weights, so stored codes are reused only with the same codec."""
    digest = hashlib.sha256()
    for name, value in sorted(tree_flatten(codec.parameters())):
        digest.update(name.encode())
        digest.update(np.asarray(value).tobytes())
    return digest.hexdigest()[:16]
