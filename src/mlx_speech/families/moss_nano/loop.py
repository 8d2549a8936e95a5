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
from mlx_audio.tts.models.moss_tts_nano.gpt2 import _causal_additive_mask

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

    def finish_frame(self, model: Model, frame: mx.array, slot: mx.array) -> None:
        self.frame = frame
        self.frames_done += 1
        self.history.add(frame)
        self.inputs = embed_rows(model, mx.concatenate([slot, frame])[None, None, :])


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
    codes = []
    for channel, embedding in enumerate(model.audio_embeddings):
        local = model.local_transformer(
            inputs_embeds=previous[:, None, :], cache=local_cache
        )
        logits = local[:, -1, :] @ embedding.weight.T
        code = _sample_codes(jobs, going, channel, logits)
        codes.append(code)
        previous = embedding(code)
    frames = mx.stack(codes, axis=1)  # [jobs, n_vq]
    for index, job in enumerate(jobs):
        if going[index]:
            job.finish_frame(model, frames[index], slot)


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
    """mlx-audio's GPT-2 forward for one new row per job, each at its own position."""
    x = rows
    if transformer.wpe is not None:
        positions = mx.array([[cache[0].offset] for cache in caches])
        x = x + transformer.wpe(positions)
    for layer, block in enumerate(transformer.h):
        attention = block.attn
        qkv = attention.c_attn(block.ln_1(x))
        mixed = mx.concatenate(
            [
                _attend(attention, qkv[index : index + 1], cache[layer])
                for index, cache in enumerate(caches)
            ]
        )
        x = x + attention.c_proj(mixed)
        x = x + block.mlp(block.ln_2(x))
    return transformer.ln_f(x)[:, -1, :]


def _attend(attention, qkv: mx.array, cache: BlockKVCache) -> mx.array:
    """One job's attention over its own history, as mlx-audio computes it."""
    heads, dim = attention.num_heads, attention.head_dim
    queries, keys, values = (
        part.reshape(1, 1, heads, dim) for part in mx.split(qkv, 3, axis=-1)
    )
    if attention.rotary_emb is not None:
        queries = attention.rotary_emb(queries, offset=cache.offset)
        keys = attention.rotary_emb(keys, offset=cache.offset)
    keys, values = cache.update_and_fetch(
        keys.transpose(0, 2, 1, 3), values.transpose(0, 2, 1, 3)
    )
    mask = _causal_additive_mask(1, keys.shape[2], qkv.dtype)
    output = mx.fast.scaled_dot_product_attention(
        queries.transpose(0, 2, 1, 3), keys, values, scale=attention.scale, mask=mask
    )
    return output.transpose(0, 2, 1, 3).reshape(1, 1, heads * dim)


def _going_on(model: Model, jobs: list[FrameJob], local_hidden: mx.array) -> list[bool]:
    """Each job's text-head choice; the frame's one host sync."""
    config = model.config
    candidates = mx.array(
        [config.audio_assistant_slot_token_id, config.audio_end_token_id], dtype=mx.int32
    )
    logits = local_hidden @ model.transformer.wte.weight[candidates].T
    choices = [
        job.sampling.text(logits[index : index + 1], job.keys)
        for index, job in enumerate(jobs)
    ]
    return [int(choice) == 0 for choice in mx.concatenate(choices).tolist()]


def _sample_codes(
    jobs: list[FrameJob], going: list[bool], channel: int, logits: mx.array
) -> mx.array:
    """One code per job for this codebook; stopped jobs get a placeholder 0."""
    codes = []
    for index, job in enumerate(jobs):
        if not going[index]:
            codes.append(mx.zeros((1,), dtype=mx.int32))
            continue
        row = logits[index : index + 1]
        seen = job.history.seen[channel, : row.shape[-1]]
        row = penalize_repeats(row, seen, job.sampling.repetition_penalty)
        codes.append(job.sampling.audio(row, job.keys))
    return mx.concatenate(codes)


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
