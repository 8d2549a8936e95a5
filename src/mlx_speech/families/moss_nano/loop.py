"""The Nano autoregressive loop: one codec frame per step, for one request or
for several at once.

Per frame: a global transformer step over each request's newest row, a local
step whose text head chooses between "another audio frame" and "audio ends"
(the stop decision, the one host sync per frame), then one local step per
codebook. Requests stepped together share every weight-bound matrix product
(their rows are stacked); attention runs per request over its own KV cache, so
each request's numbers are the ones it would get alone. A frame is delivered
only after the model chose to continue, so no audio of a frame whose text
token was audio-end ever reaches the decoder.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import mlx.core as mx
from mlx_audio.tts.models.moss_tts_nano import Model
from mlx_audio.tts.models.moss_tts_nano.gpt2 import _causal_additive_mask, rotate_half

from .kv_cache import BlockKVCache, block_caches
from .sampling import (
    HeadSampler,
    KeySequence,
    RepetitionHistory,
    penalize_repeats,
    sample_rows,
)


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


class FrameJob:
    """One request between frames: its caches, history, keys and next input.

    ``cache`` may already hold the start of the prompt; ``prompt`` is the rest.
    After each step, ``frame`` holds the new codes ``[n_vq]``, or ``stopped``
    is set; ``done`` once it stopped or used its frame budget.
    """

    def __init__(
        self,
        model: Model,
        prompt: mx.array,
        sampling: FrameSampling,
        keys: KeySequence,
        cache: list[BlockKVCache] | None = None,
    ):
        self.sampling = sampling
        self.keys = keys
        self.cache = cache if cache is not None else block_caches(len(model.transformer.h))
        self.history = RepetitionHistory(model.config.audio_codebook_sizes)
        self.inputs = embed_rows(model, prompt)  # [1, rows, width]
        self.frames_done = 0
        self.frame: mx.array | None = None
        self.stopped = False
        self.failure: BaseException | None = None  # set when its batch failed

    @property
    def done(self) -> bool:
        return self.stopped or self.frames_done >= self.sampling.max_frames

    def finish_frame(self, frame: mx.array, next_input: mx.array) -> None:
        self.frame = frame
        self.frames_done += 1
        self.history.add(frame)
        self.inputs = next_input


def step(model: Model, jobs: list[FrameJob]) -> None:
    """One frame for each job (none of them done)."""
    config = model.config
    slot = mx.array([config.audio_assistant_slot_token_id], dtype=mx.int32)
    hidden = _global_hidden(model, jobs)
    local_cache = block_caches(len(model.local_transformer.h), block=config.n_vq + 1)
    local = model.local_transformer(inputs_embeds=hidden[:, None, :], cache=local_cache)
    going = _going_on(model, jobs, local[:, -1, :])
    for index, job in enumerate(jobs):
        job.frame = None
        job.stopped = not going[index]
    if not any(going):
        return
    previous = mx.broadcast_to(model.transformer.wte(slot), (len(jobs), hidden.shape[-1]))
    seen = mx.stack([job.history.seen for job in jobs])  # [jobs, n_vq, vocab]
    codes = []
    for channel, embedding in enumerate(model.audio_embeddings):
        local = model.local_transformer(
            inputs_embeds=previous[:, None, :], cache=local_cache
        )
        logits = local[:, -1, :] @ embedding.weight.T
        code = _sample_codes(jobs, going, seen[:, channel], logits)
        codes.append(code)
        previous = embedding(code)
    frames = mx.stack(codes, axis=1)  # [jobs, n_vq]
    slots = mx.broadcast_to(slot[None, :], (len(jobs), 1))
    next_inputs = embed_rows(model, mx.concatenate([slots, frames], axis=1)[:, None, :])
    for index, job in enumerate(jobs):
        if going[index]:
            job.finish_frame(frames[index], next_inputs[index : index + 1])


def _global_hidden(model: Model, jobs: list[FrameJob]) -> mx.array:
    """The global transformer's last hidden state per job, ``[jobs, width]``.

    A job with several rows (its prompt) runs on its own; single rows run
    together.
    """
    transformer = model.transformer
    hidden: dict[int, mx.array] = {}
    single = []
    for index, job in enumerate(jobs):
        if job.inputs.shape[1] == 1:
            single.append(index)
        else:
            hidden[index] = transformer(inputs_embeds=job.inputs, cache=job.cache)[0, -1]
    if single:
        rows = mx.concatenate([jobs[i].inputs for i in single])  # [n, 1, width]
        caches = [jobs[i].cache for i in single]
        stepped = _decode_rows(transformer, rows, caches)
        for position, index in enumerate(single):
            hidden[index] = stepped[position]
    return mx.stack([hidden[index] for index in range(len(jobs))])


def _decode_rows(transformer, rows: mx.array, caches: list[list[BlockKVCache]]) -> mx.array:
    """mlx-audio's GPT-2 forward for one new row per job, each at its own position.

    Everything but attention runs on the stacked rows; each job attends over
    its own cache. Every operation is row by row, so each job's numbers are
    the ones mlx-audio computes for it alone.
    """
    jobs = rows.shape[0]
    offsets = [cache[0].offset for cache in caches]
    x = rows
    if transformer.wpe is not None:
        x = x + transformer.wpe(mx.array(offsets)[:, None])
    first = transformer.h[0].attn
    heads, dim = first.num_heads, first.head_dim
    rotary = first.rotary_emb
    rotation = None if rotary is None else _rotation(rotary, offsets)
    masks = [_causal_additive_mask(1, offset + 1, x.dtype) for offset in offsets]
    for layer, block in enumerate(transformer.h):
        attention = block.attn
        qkv = attention.c_attn(block.ln_1(x))
        queries, keys, values = (
            part.reshape(jobs, 1, heads, dim) for part in mx.split(qkv, 3, axis=-1)
        )
        if rotation is not None:
            queries, keys = _rotate(queries, rotation), _rotate(keys, rotation)
        queries, keys, values = (t.transpose(0, 2, 1, 3) for t in (queries, keys, values))
        mixed = []
        for index, cache in enumerate(caches):
            row = slice(index, index + 1)
            history_keys, history_values = cache[layer].update_and_fetch(
                keys[row], values[row]
            )
            mixed.append(
                mx.fast.scaled_dot_product_attention(
                    queries[row],
                    history_keys,
                    history_values,
                    scale=attention.scale,
                    mask=masks[index],
                )
            )
        mixed = mx.concatenate(mixed).transpose(0, 2, 1, 3).reshape(jobs, 1, heads * dim)
        x = x + attention.c_proj(mixed)
        x = x + block.mlp(block.ln_2(x))
    return transformer.ln_f(x)[:, -1, :]


def _rotation(rotary, offsets: list[int]) -> tuple[mx.array, mx.array]:
    """Each job's RoPE cos and sin at its position, as mlx-audio computes them,
    shaped ``[jobs, 1, 1, head_dim]``; the same for every layer."""
    positions = mx.array(offsets, dtype=mx.float32)
    inverse = 1.0 / (
        rotary.base ** (mx.arange(0, rotary.dim, 2, dtype=mx.float32) / rotary.dim)
    )
    angles = positions[:, None] * inverse[None, :]
    cos = mx.repeat(mx.cos(angles), 2, axis=-1)[:, None, None, :]
    sin = mx.repeat(mx.sin(angles), 2, axis=-1)[:, None, None, :]
    return cos, sin


def _rotate(x: mx.array, rotation: tuple[mx.array, mx.array]) -> mx.array:
    cos, sin = rotation
    return (x * cos) + (rotate_half(x) * sin)


def _going_on(model: Model, jobs: list[FrameJob], local_hidden: mx.array) -> list[bool]:
    """Each job's text-head choice; the frame's one host sync."""
    config = model.config
    candidates = mx.array(
        [config.audio_assistant_slot_token_id, config.audio_end_token_id], dtype=mx.int32
    )
    logits = local_hidden @ model.transformer.wte.weight[candidates].T
    choices = sample_rows(logits, [(job.sampling.text, job.keys) for job in jobs])
    return [choice == 0 for choice in choices.tolist()]


def _sample_codes(
    jobs: list[FrameJob], going: list[bool], seen: mx.array, logits: mx.array
) -> mx.array:
    """One code per job for one codebook; stopped jobs get a placeholder 0.
    ``seen``: each job's history of this codebook, ``[jobs, vocab]``."""
    logits = penalize_repeats(
        logits,
        seen[:, : logits.shape[-1]],
        [job.sampling.repetition_penalty for job in jobs],
    )
    draws = [
        (job.sampling.audio, job.keys) if going[index] else None
        for index, job in enumerate(jobs)
    ]
    return sample_rows(logits, draws)


def frames(
    model: Model,
    prompt: mx.array,
    sampling: FrameSampling,
    keys: KeySequence,
    cache: list[BlockKVCache] | None = None,
) -> Iterator[mx.array]:
    """One request alone: yield one frame of codes, ``[n_vq]``, per step until
    the model stops."""
    job = FrameJob(model, prompt, sampling, keys, cache)
    while not job.done:
        step(model, [job])
        if job.stopped:
            return
        yield job.frame
