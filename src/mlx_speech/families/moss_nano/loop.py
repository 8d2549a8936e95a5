"""The Nano autoregressive loop: one codec frame per step.

Per frame: a global transformer step over the newest row, a local step whose
text head chooses between "another audio frame" and "audio ends" (the stop
decision, the one host sync per frame), then one local step per codebook.
Both transformers keep KV caches in preallocated blocks; the local one is
reused from frame to frame.
A frame is yielded only after the model chose to continue, so no audio of a
frame whose text token was audio-end ever reaches the decoder.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import mlx.core as mx
from mlx_audio.tts.models.moss_tts_nano import Model

from .kv_cache import BlockKVCache, block_caches
from .sampling import HeadSampler, KeySequence, RepetitionHistory, penalize_repeats


@dataclass(frozen=True)
class FrameSampling:
    text: HeadSampler
    audio: HeadSampler
    repetition_penalty: float
    max_frames: int


def embed_rows(model: Model, rows: mx.array) -> mx.array:
    """Rows of [text id, code_1 .. code_n] (pad where absent) → summed embeddings."""
    pad = model.config.audio_pad_token_id
    embeds = model.transformer.wte(rows[..., 0])
    for channel, embedding in enumerate(model.audio_embeddings):
        codes = rows[..., channel + 1]
        present = codes != pad
        embeds = embeds + embedding(mx.where(present, codes, 0)) * present[..., None]
    return embeds


def frames(
    model: Model,
    prompt: mx.array,
    sampling: FrameSampling,
    keys: KeySequence,
    cache: list[BlockKVCache] | None = None,
) -> Iterator[mx.array]:
    """Yield one frame of codes, shape ``[n_vq]``, per step until the model stops.

    ``cache`` may already hold the start of the prompt; ``prompt`` is the rest.
    """
    config = model.config
    slot = mx.array([config.audio_assistant_slot_token_id], dtype=mx.int32)
    candidates = mx.array(
        [config.audio_assistant_slot_token_id, config.audio_end_token_id],
        dtype=mx.int32,
    )
    candidate_weights = model.transformer.wte.weight[candidates]
    if cache is None:
        cache = block_caches(len(model.transformer.h))
    local_cache = block_caches(len(model.local_transformer.h), block=config.n_vq + 1)
    history = RepetitionHistory(config.audio_codebook_sizes)
    inputs = embed_rows(model, prompt)

    for _ in range(sampling.max_frames):
        hidden = model.transformer(inputs_embeds=inputs, cache=cache)[:, -1, :]
        for layer in local_cache:
            layer.reset()
        local = model.local_transformer(inputs_embeds=hidden[:, None, :], cache=local_cache)
        choice = sampling.text(local[:, -1, :] @ candidate_weights.T, keys)
        if int(choice.item()) != 0:
            return

        previous = model.transformer.wte(slot)
        codes = []
        for channel, embedding in enumerate(model.audio_embeddings):
            local = model.local_transformer(
                inputs_embeds=previous[:, None, :], cache=local_cache
            )
            local_hidden = local[:, -1, :]
            logits = local_hidden @ embedding.weight.T
            seen = history.seen[channel, : logits.shape[-1]]
            logits = penalize_repeats(logits, seen, sampling.repetition_penalty)
            code = sampling.audio(logits, keys)
            codes.append(code)
            previous = embedding(code)

        frame = mx.concatenate(codes)
        history.add(frame)
        yield frame
        row = mx.concatenate([slot, frame])[None, None, :]
        inputs = embed_rows(model, row)
