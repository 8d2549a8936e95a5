"""The Qwen3-TTS frame loop, one frame per step, on mlx-audio's talker.

Each frame: the talker picks codebook 0 (codec special ids suppressed, a
repetition penalty over recent picks), the code predictor fills the other
groups one by one, and the next input is this frame's codec embedding plus the
next text embedding (padding once the text is used up). The one host sync per
frame is the EOS check. Sampling goes through mlx-audio's own sampler, so draws
come from MLX's global key: run it under ``GlobalRandomKey.installed()``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import mlx.core as mx


@dataclass(frozen=True)
class Sampling:
    temperature: float
    top_k: int
    top_p: float
    repetition_penalty: float
    max_frames: int


@dataclass(frozen=True)
class Prompt:
    """What mlx-audio's prompt builders return: the prefill rows, the text
    rows still to feed one per frame, and the text padding row."""

    embeds: mx.array
    trailing_text: mx.array
    text_pad: mx.array


def frames(model, prompt: Prompt, sampling: Sampling) -> Iterator[mx.array]:
    """Yields each frame's codes ``[1, groups]`` until EOS or the frame budget."""
    config = model.config.talker_config
    eos = config.codec_eos_token_id
    suppressed = [i for i in range(config.vocab_size - 1024, config.vocab_size) if i != eos]
    cache = model.talker.make_cache()
    history: list[int] = []
    embeds = prompt.embeds
    for step in range(sampling.max_frames):
        logits, hidden = model.talker(embeds, cache=cache)
        first = model._sample_token(
            logits,
            temperature=sampling.temperature,
            top_k=sampling.top_k,
            top_p=sampling.top_p,
            repetition_penalty=sampling.repetition_penalty,
            generated_tokens=history or None,
            suppress_tokens=suppressed,
        )
        is_eos = first[0, 0] == eos
        codes = _other_groups(model, hidden[:, -1:, :], first, sampling)
        embeds = _text_row(prompt, step) + _codec_row(model, codes)
        mx.eval(embeds, is_eos)
        if is_eos.item():
            return
        history.append(int(first[0, 0]))
        yield mx.concatenate(codes, axis=1)


def _other_groups(model, hidden: mx.array, first: mx.array, sampling: Sampling):
    """Codebooks 1.. from the code predictor, each conditioned on the previous."""
    predictor = model.talker.code_predictor
    cache = predictor.make_cache()
    codes = [first]
    first_row = model.talker.get_input_embeddings()(first)
    step_input = mx.concatenate([hidden, first_row], axis=1)
    for group in range(model.config.talker_config.num_code_groups - 1):
        if group > 0:
            step_input = predictor.codec_embedding[group - 1](codes[-1])
        logits, cache, _ = predictor(step_input, cache=cache, generation_step=group)
        codes.append(
            model._sample_token(
                logits,
                temperature=sampling.temperature,
                top_k=sampling.top_k,
                top_p=sampling.top_p,
            )
        )
    return codes


def _codec_row(model, codes: list[mx.array]) -> mx.array:
    row = model.talker.get_input_embeddings()(codes[0])
    for group, code in enumerate(codes[1:]):
        row = row + model.talker.code_predictor.codec_embedding[group](code)
    return row


def _text_row(prompt: Prompt, step: int) -> mx.array:
    if step < prompt.trailing_text.shape[1]:
        return prompt.trailing_text[:, step : step + 1, :]
    return prompt.text_pad
