"""The Qwen3-TTS family: validation by checkpoint kind (caller's thread) and
synthesis (worker thread).

A checkpoint is one of three kinds (``tts_model_type``): CustomVoice speaks
preset speakers, with ``instructions`` as a style prompt; VoiceDesign speaks
the voice ``instructions`` describe; Base clones a reference clip, which needs
its transcript (``ref_text``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

from ...audio.samples import Audio
from ...errors import InvalidRequest, ModelLoadError, shown
from ...voices.store import SavedVoice
from .. import DEFAULT_LOAD, LoadOptions, SpeechInput, SpeechService
from ..chunk_schedule import ChunkSchedule
from ..chunks import chunks_of, finite_audio
from ..fields import check_channels
from ..global_random import GlobalRandomKey
from ..languages import check_language
from ..options import SamplingOptions, parse_sampling
from ..quiet_loading import last_warning, load_quietly
from ..reference_audio import is_clip, load_mono_reference
from .decoder import RequestDecoder
from .loop import Prompt, Sampling, frames

FAMILY = "qwen3_tts"
MAX_FRAMES = 4096
ICL_MIN_REPETITION_PENALTY = 1.5  # mlx-audio's floor for cloning


@dataclass(frozen=True)
class Qwen3Request:
    segments: list[str]
    speaker: str | None
    instructions: str | None
    language: str
    reference: np.ndarray | None  # mono samples at the model rate
    ref_text: str | None
    sampling: Sampling
    seed: int
    ignored: tuple[str, ...] = ()  # fields accepted but unused


class Qwen3Service(SpeechService):
    name = FAMILY

    def __init__(self, model):
        self._model = model
        self.kind = model.config.tts_model_type
        self.voices = tuple(model.get_supported_speakers() or ())
        self.languages = tuple(model.get_supported_languages())
        self.sample_rate = int(model.sample_rate)
        codec = model.speech_tokenizer
        self._reference_hop = int(codec.encode_downsample_rate)
        self._can_clone = bool(codec.has_encoder)
        self._takes_style = model.config.tts_model_size != "0b6"
        options = model._resolve_generation_options(None, None, None, None, None)
        self._defaults = SamplingOptions(
            temperature=options["temperature"],
            top_p=options["top_p"],
            top_k=options["top_k"],
            repetition_penalty=options["repetition_penalty"],
            max_new_tokens=min(options["max_tokens"], MAX_FRAMES),
        )

    # Caller's thread: nothing here touches MLX.
    def check(self, asked: SpeechInput) -> tuple[str, ...]:
        return self.prepare(asked).ignored

    def prepare(self, asked: SpeechInput) -> Qwen3Request:
        """With no text (``check``), a request of no segments."""
        text, instructions = asked.text, asked.instructions
        check_channels(asked.channels, 1, "Qwen3-TTS")
        options = parse_sampling(asked.sampling, self._defaults, MAX_FRAMES)
        speaker, reference, ref_text = self._voice(asked.voice, asked.ref_text)
        self._check_instructions(instructions)
        if reference is not None:
            penalty = max(options.repetition_penalty, ICL_MIN_REPETITION_PENALTY)
        else:
            penalty = options.repetition_penalty
        plain_base = self.kind == "base" and reference is None
        return Qwen3Request(
            segments=_segments(text, plain_base),
            speaker=speaker,
            instructions=instructions,
            language=check_language(asked.language, self.languages, "Qwen3-TTS"),
            reference=reference,
            ref_text=ref_text,
            sampling=Sampling(
                temperature=options.temperature,
                top_k=options.top_k,
                top_p=options.top_p,
                repetition_penalty=penalty,
                max_frames=options.max_new_tokens,
            ),
            seed=options.seed,
        )

    def reusable_voice(self, voice: Any) -> Any:
        if is_clip(voice) and self.kind == "base" and self._can_clone:
            return (self._clip(voice), self.sample_rate)
        return voice  # a preset, a saved voice (its transcript), or refused by prepare

    def _voice(self, voice: Any, ref_text: str | None):
        """(preset speaker, reference samples, ref_text) for this kind."""
        if voice is None:
            if self.kind == "custom_voice":
                return self.voices[0], None, ref_text
            return None, None, ref_text
        if isinstance(voice, str):
            if voice not in self.voices:
                message = f"unknown voice {shown(voice)}: {self.voice_hint}"
                raise InvalidRequest("voice", message)
            return voice, None, ref_text
        if self.kind != "base":
            raise InvalidRequest(
                "voice",
                f"this Qwen3-TTS {self.kind} checkpoint cannot clone a reference clip; "
                + (
                    "pick a preset voice"
                    if self.voices
                    else "describe the voice in instructions"
                ),
            )
        if not self._can_clone:
            raise InvalidRequest(
                "voice",
                "this Qwen3-TTS Base checkpoint has no speech-tokenizer encoder, so it "
                "cannot clone a reference clip",
            )
        if isinstance(voice, SavedVoice) and ref_text is None:
            ref_text = voice.ref_text
        if not ref_text or not ref_text.strip():
            raise InvalidRequest(
                "ref_text",
                "Qwen3-TTS clones from a reference clip and its transcript: pass ref_text "
                "(the words spoken in the clip)",
            )
        return None, self._clip(voice), ref_text

    def _clip(self, voice: Any) -> np.ndarray:
        return load_mono_reference(
            voice, sample_rate=self.sample_rate, samples_per_frame=self._reference_hop
        )

    @property
    def voice_hint(self) -> str:
        if self.voices:
            return (
                "not a saved voice or one of this checkpoint's preset voices, "
                + ", ".join(self.voices)
            )
        if self.kind == "base":
            return (
                "not a saved voice, and Qwen3-TTS Base has no presets; clone a voice "
                "with ref_audio and ref_text"
            )
        return (
            "not a saved voice, and Qwen3-TTS VoiceDesign takes no voice; describe "
            "the voice in instructions"
        )

    def _check_instructions(self, instructions: str | None) -> None:
        if self.kind == "voice_design" and instructions is None:
            raise InvalidRequest(
                "instructions",
                "Qwen3-TTS VoiceDesign needs instructions: a description of the voice "
                "(e.g. 'a calm, low male voice')",
            )
        if instructions is None or self.kind == "voice_design":
            return
        if self.kind == "base":
            raise InvalidRequest(
                "instructions",
                "Qwen3-TTS Base does not take instructions; use a CustomVoice or "
                "VoiceDesign checkpoint",
            )
        if not self._takes_style:
            raise InvalidRequest(
                "instructions",
                "this 0.6B CustomVoice checkpoint does not take instructions",
            )

    # Worker thread.
    def synthesize(self, request: Qwen3Request) -> Iterator[Audio | None]:
        """One step per frame: ``None`` while gathering a chunk, then the chunk."""
        random_key = GlobalRandomKey(request.seed)
        schedule = ChunkSchedule()
        for segment in request.segments:
            # Each segment is decoded on its own, as mlx-audio does.
            decoder = RequestDecoder(self._model.speech_tokenizer.decoder)
            prompt = self._prompt(segment, request, decoder)
            steps = random_key.steps(frames(self._model, prompt, request.sampling))
            yield from chunks_of(steps, schedule, partial(self._chunk, decoder))

    def _prompt(self, text: str, request: Qwen3Request, decoder: RequestDecoder) -> Prompt:
        model = self._model
        if request.reference is None:
            embeds, trailing, pad = model._prepare_generation_inputs(
                text,
                language=request.language,
                speaker=request.speaker,
                instruct=request.instructions,
            )
            return Prompt(embeds, trailing, pad)
        embeds, trailing, pad, reference_codes = model._prepare_icl_generation_inputs(
            text,
            ref_audio=mx.array(request.reference),
            ref_text=request.ref_text,
            language=request.language,
        )
        # mlx-audio keeps every clip's codes forever, keyed by (length, sum); a
        # server must not, and clips with equal length and sum must not collide.
        model._icl_cache.clear()
        # The reference leads the decoded audio, as in mlx-audio's buffered decode.
        decoder.warm(reference_codes)
        return Prompt(embeds, trailing, pad)

    def _chunk(
        self, decoder: RequestDecoder, gathered: list[mx.array], last: bool
    ) -> Audio | None:
        if not gathered:
            return None
        codes = mx.stack(gathered, axis=2)  # [1, groups, frames]
        return finite_audio(decoder.decode(codes), self.sample_rate)


def _segments(text: str | None, plain_base: bool) -> list[str]:
    """Like mlx-audio, plain Base generation speaks each line on its own."""
    if text is None:
        return []
    if plain_base:
        return [line.strip() for line in text.split("\n") if line.strip()]
    return [text]


def load(model_dir: Path, options: LoadOptions = DEFAULT_LOAD) -> Qwen3Service:
    """Worker thread: mlx-audio's loader, which only prints when parts fail.
    (Requests are stepped one at a time: ``max_batch`` asks nothing of it.)"""
    options.refuse_quantize("Qwen3-TTS")
    model, printed = load_quietly(model_dir)
    if model.tokenizer is None:
        raise ModelLoadError(
            f"could not load the text tokenizer of {model_dir} (tokenizer.json / "
            f"tokenizer_config.json){last_warning(printed)}"
        )
    if model.speech_tokenizer is None:
        raise ModelLoadError(
            f"could not load the speech tokenizer from {model_dir / 'speech_tokenizer'}"
            f"{last_warning(printed)}"
        )
    return Qwen3Service(model)
