"""The VoxCPM2 family: validation (caller's thread) and synthesis (worker).

``voice="default"`` speaks zero-shot, ``instructions`` describe the voice
(mlx-audio prefixes the text with "(instructions)"), and a reference clip is
cloned (``ref_text`` is accepted and unused, as in mlx-audio). Patches are
generated one per step, so other requests keep running beside a long one, but
the audio VAE decodes chunk by chunk (see ``decoder``) with the same samples as
mlx-audio's one decode at the end.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from ...audio.samples import Audio
from ...errors import InvalidRequest, ModelLoadError
from .. import DEFAULT_LOAD, LoadOptions, SpeechInput, SpeechService
from ..chunk_schedule import ChunkSchedule
from ..chunks import chunks_of, finite_audio
from ..fields import check_channels
from ..global_random import GlobalRandomKey
from ..languages import check_language
from ..options import SamplingOptions, parse_sampling
from ..quiet_loading import load_quietly
from ..reference_audio import is_clip, load_mono_reference
from .decoder import WindowedDecoder, decoder_reach
from .loop import Settings, patches, prompt_rows

FAMILY = "voxcpm2"
MAX_PATCHES = 4096
DEFAULT_PATCHES = 2000  # mlx-audio's max_tokens
# Diffusion decoding has no token distribution to shape.
NOT_APPLICABLE = ("temperature", "top_p", "top_k", "repetition_penalty")


@dataclass(frozen=True)
class VoxCPM2Request:
    text: str
    reference: np.ndarray | None  # mono samples at the output rate
    settings: Settings
    seed: int
    ignored: tuple[str, ...] = ()  # fields accepted but unused


class VoxCPM2Service(SpeechService):
    name = FAMILY
    voice_hint = (
        "not a saved voice, and VoxCPM2 has no presets; pass 'default', a saved "
        "voice name or a reference clip, or describe a voice in instructions"
    )

    def __init__(self, model):
        self._model = model
        self.sample_rate = int(model.sample_rate)
        vae = model.audio_vae
        self._samples_per_frame = vae.decode_chunk_size  # per latent frame
        self._reach = decoder_reach(vae, self._samples_per_frame)
        # One encoder patch, counted at the output rate (references arrive at it).
        self._reference_hop = (
            model.patch_size
            * vae.chunk_size
            * (self.sample_rate // model._encode_sample_rate)
        )

    # Caller's thread: nothing here touches MLX.
    def check(self, asked: SpeechInput) -> tuple[str, ...]:
        return self.prepare(asked).ignored

    def prepare(self, asked: SpeechInput) -> VoxCPM2Request:
        """With no text (``check``), a request of none."""
        text = asked.text or ""
        if asked.instructions is not None:
            text = f"({asked.instructions}){text}"
        check_language(asked.language, None, "VoxCPM2")
        check_channels(asked.channels, 1, "VoxCPM2")
        for name in NOT_APPLICABLE:
            if asked.sampling.get(name) is not None:
                raise InvalidRequest(
                    name,
                    f"VoxCPM2 generates audio by diffusion and has no {name}; "
                    "leave it out (seed and max_new_tokens apply)",
                )
        defaults = SamplingOptions(0.0, 1.0, 0, 1.0, DEFAULT_PATCHES)
        options = parse_sampling(asked.sampling, defaults, MAX_PATCHES)
        return VoxCPM2Request(
            text=text,
            reference=self._reference(asked.voice),
            settings=Settings(max_patches=options.max_new_tokens),
            seed=options.seed,
        )

    def reusable_voice(self, voice: Any) -> Any:
        return (self._reference(voice), self.sample_rate) if is_clip(voice) else voice

    def _reference(self, voice: Any) -> np.ndarray | None:
        if voice is None:
            return None
        return load_mono_reference(
            voice, sample_rate=self.sample_rate, samples_per_frame=self._reference_hop
        )

    # Worker thread.
    def synthesize(self, request: VoxCPM2Request) -> Iterator[Audio | None]:
        """One step per patch: ``None`` while gathering a chunk, then the chunk."""
        random_key = GlobalRandomKey(request.seed)
        model = self._model
        with random_key.installed():
            prompt = prompt_rows(model, request.text, request.reference)
        steps = random_key.steps(patches(model, prompt, request.settings))
        decoder = WindowedDecoder(model.audio_vae, self._reach, self._samples_per_frame)
        schedule = ChunkSchedule()
        yield from chunks_of(steps, schedule, partial(self._chunk, decoder))

    def _chunk(self, decoder: WindowedDecoder, gathered: list, last: bool) -> Audio:
        """The audio of ``gathered``; the last chunk also carries the decoder's tail."""
        for patch in gathered:
            decoder.add(patch)
        return finite_audio(decoder.decode(final=last), self.sample_rate)


def load(model_dir: Path, options: LoadOptions = DEFAULT_LOAD) -> VoxCPM2Service:
    """Worker thread: mlx-audio's loader. (Requests are stepped one at a
    time: ``max_batch`` asks nothing of it.)"""
    options.refuse_quantize("VoxCPM2")
    model, _ = load_quietly(model_dir)
    if model.tokenizer is None:
        raise ModelLoadError(
            f"could not load the text tokenizer of {model_dir} (tokenizer.json / "
            "tokenizer_config.json)"
        )
    return VoxCPM2Service(model)
