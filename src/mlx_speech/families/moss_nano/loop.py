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

import itertools
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

    Jobs on their next frame (one row each) run in one forward; jobs still on
    their prompt (several rows) in another, so a prompt never changes the
    size of the matrix products the single rows go through.
    """
    hidden: list[mx.array | None] = [None] * len(jobs)
    prompts = [index for index, job in enumerate(jobs) if job.inputs.shape[1] > 1]
    single_rows = [index for index, job in enumerate(jobs) if job.inputs.shape[1] == 1]
    for group in (prompts, single_rows):
        if not group:
            continue
        inputs = [jobs[index].inputs for index in group]
        caches = [jobs[index].cache for index in group]
        last = _forward_rows(model.transformer, inputs, caches)
        for position, index in enumerate(group):
            hidden[index] = last[position]
    return mx.stack(hidden)


def _forward_rows(
    transformer, inputs: list[mx.array], caches: list[list[BlockKVCache]]
) -> mx.array:
    """mlx-audio's GPT-2 forward for several jobs' new rows (``[1, rows,
    width]`` each), laid end to end → each job's last hidden state.

    Everything but attention runs on all rows at once and works row by row;
    each job attends over its own cache from its own position, as mlx-audio
    computes it for that job alone.
    """
    lengths = [rows.shape[1] for rows in inputs]
    offsets = [cache[0].offset for cache in caches]
    spans = list(itertools.pairwise(itertools.accumulate(lengths, initial=0)))
    x = mx.concatenate(inputs, axis=1)
    if transformer.wpe is not None:
        positions = [mx.arange(o, o + n) for o, n in zip(offsets, lengths, strict=True)]
        x = x + transformer.wpe(mx.concatenate(positions))
    first = transformer.h[0].attn
    heads, dim = first.num_heads, first.head_dim
    rotation = None
    if first.rotary_emb is not None:
        rotation = _rotation(first.rotary_emb, offsets, lengths)
    masks = [
        _causal_additive_mask(n, o + n, x.dtype)
        for o, n in zip(offsets, lengths, strict=True)
    ]
    for layer, block in enumerate(transformer.h):
        attention = block.attn
        qkv = attention.c_attn(block.ln_1(x))
        queries, keys, values = (
            part.reshape(1, -1, heads, dim) for part in mx.split(qkv, 3, axis=-1)
        )
        if rotation is not None:
            queries, keys = _rotate(queries, rotation), _rotate(keys, rotation)
        mixed = []
        for (start, end), cache, mask in zip(spans, caches, masks, strict=True):
            history_keys, history_values = cache[layer].update_and_fetch(
                keys[:, start:end].transpose(0, 2, 1, 3),
                values[:, start:end].transpose(0, 2, 1, 3),
            )
            attended = mx.fast.scaled_dot_product_attention(
                queries[:, start:end].transpose(0, 2, 1, 3),
                history_keys,
                history_values,
                scale=attention.scale,
                mask=mask,
            )
            mixed.append(attended.transpose(0, 2, 1, 3).reshape(1, end - start, -1))
        x = x + attention.c_proj(mx.concatenate(mixed, axis=1))
        x = x + block.mlp(block.ln_2(x))
    return transformer.ln_f(x[0, mx.array([end - 1 for _, end in spans])])


def _rotation(rotary, offsets: list[int], lengths: list[int]) -> tuple[mx.array, mx.array]:
    """RoPE cos and sin at every row's position (each job counting from its
    own offset), as mlx-audio computes them, shaped ``[1, rows, 1, head_dim]``;
    the same for every layer."""
    positions = mx.concatenate(
        [
            mx.arange(o, o + n, dtype=mx.float32)
            for o, n in zip(offsets, lengths, strict=True)
        ]
    )
    inverse = 1.0 / (
        rotary.base ** (mx.arange(0, rotary.dim, 2, dtype=mx.float32) / rotary.dim)
    )
    angles = positions[:, None] * inverse[None, :]
    cos = mx.repeat(mx.cos(angles), 2, axis=-1)[None, :, None, :]
    sin = mx.repeat(mx.sin(angles), 2, axis=-1)[None, :, None, :]
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
