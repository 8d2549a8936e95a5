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

from .accelerator import MLX_OPS, ArrayOps, FrameStep
from .blocks import linear
from .forward import LocalPass, forward_rows
from .kv_cache import BlockKVCache, block_caches
from .sampling import (
    HeadSampler,
    KeySequence,
    RepetitionHistory,
    next_draws,
    penalize_repeats,
    pick_rows,
    sample_rows,
)


@dataclass(frozen=True)
class FrameSampling:
    text: HeadSampler
    audio: HeadSampler
    repetition_penalty: float
    max_frames: int

    @property
    def greedy(self) -> bool:
        return self.text.temperature == 0 and self.audio.temperature == 0


def embed_rows(model: Model, rows: mx.array) -> mx.array:
    """Rows of [text id, code_1 .. code_n] (pad where absent) → summed
    embeddings. A frame's rows (one per job) run compiled; prompts of any
    length uncompiled."""
    summed = _summed_embeddings_compiled if rows.shape[-2] == 1 else _summed_embeddings
    return summed(
        model.transformer.wte.weight,
        [embedding.weight for embedding in model.audio_embeddings],
        rows,
        model.config.audio_pad_token_id,
    )


def _summed_embeddings(
    text_table: mx.array, audio_tables: list[mx.array], rows: mx.array, pad: int
) -> mx.array:
    embeds = text_table[rows[..., 0]]
    for channel, table in enumerate(audio_tables):
        codes = rows[..., channel + 1]
        present = codes != pad
        embeds = embeds + table[mx.where(present, codes, 0)] * present[..., None]
    return embeds


_summed_embeddings_compiled = mx.compile(_summed_embeddings)


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

    def record_frame(self, frame: mx.array) -> None:
        """The frame's codes (``[n_vq]``): where every frame step counts them."""
        self.frame = frame
        self.frames_done += 1

    def finish_frame(self, frame: mx.array, next_input: mx.array) -> None:
        self.record_frame(frame)
        self.history.add(frame)
        self.inputs = next_input

    def hand_over(self) -> tuple[mx.array, list[BlockKVCache], mx.array]:
        """For a frame step that keeps a job's state its own way: its next
        input rows, caches and seen codes; it drops the rows and caches."""
        taken = (self.inputs, self.cache, self.history.seen)
        self.inputs = self.cache = None
        return taken


class MlxFrameStep:
    """The frame step through MLX, prompts included (what every platform
    runs; an accelerator's ``FrameStep`` stands in for it where it applies);
    a prompt's GELU and attention from ``ops`` where they apply."""

    def __init__(self, model: Model, ops: ArrayOps = MLX_OPS):
        self._model = model
        self._ops = ops

    def step(self, jobs: list[FrameJob]) -> None:
        _mlx_step(self._model, jobs, self._ops)


def _mlx_step(model: Model, jobs: list[FrameJob], ops: ArrayOps) -> None:
    config = model.config
    slot = mx.array([config.audio_assistant_slot_token_id], dtype=mx.int32)
    hidden = _global_hidden(model, jobs, ops)
    local = LocalPass(model.local_transformer, positions=config.n_vq + 1)
    going = _text_head_continues(model, jobs, local(hidden))
    for index, job in enumerate(jobs):
        job.frame = None
        job.stopped = not going[index]
    if not any(going):
        return
    previous = mx.broadcast_to(model.transformer.wte(slot), (len(jobs), hidden.shape[-1]))
    seen = mx.stack([job.history.seen for job in jobs])  # [jobs, n_vq, vocab]
    samplers = [job.sampling.audio if going[i] else None for i, job in enumerate(jobs)]
    # every codebook's draw of each sampling job, taken at once
    sequences = [job.keys for job in jobs]
    sampled, uniforms = next_draws(samplers, sequences, len(model.audio_embeddings))
    codes = []
    for channel, embedding in enumerate(model.audio_embeddings):
        logits = linear(local(previous), embedding.weight)
        logits = penalize_repeats(
            logits,
            seen[:, channel, : logits.shape[-1]],
            [job.sampling.repetition_penalty for job in jobs],
        )
        channel_uniforms = None if uniforms is None else uniforms[channel]
        code = pick_rows(logits, samplers, channel_uniforms, sampled)
        codes.append(code)
        previous = embedding(code)
    frames = mx.stack(codes, axis=1)  # [jobs, n_vq]
    slots = mx.broadcast_to(slot[None, :], (len(jobs), 1))
    next_inputs = embed_rows(model, mx.concatenate([slots, frames], axis=1)[:, None, :])
    for index, job in enumerate(jobs):
        if going[index]:
            job.finish_frame(frames[index], next_inputs[index : index + 1])


def _global_hidden(model: Model, jobs: list[FrameJob], ops: ArrayOps) -> mx.array:
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
        last = forward_rows(model.transformer, inputs, caches, ops)
        for position, index in enumerate(group):
            hidden[index] = last[position]
    return mx.stack(hidden)


def _text_head_continues(
    model: Model, jobs: list[FrameJob], local_hidden: mx.array
) -> list[bool]:
    """Each job's text-head choice; the frame's one host sync."""
    config = model.config
    candidates = mx.array(
        [config.audio_assistant_slot_token_id, config.audio_end_token_id], dtype=mx.int32
    )
    logits = local_hidden @ model.transformer.wte.weight[candidates].T
    choices = sample_rows(logits, [(job.sampling.text, job.keys) for job in jobs])
    return [choice == 0 for choice in choices.tolist()]


def frames(
    model: Model,
    prompt: mx.array,
    sampling: FrameSampling,
    keys: KeySequence,
    cache: list[BlockKVCache] | None = None,
    stepper: FrameStep | None = None,
) -> Iterator[mx.array]:
    """One request alone: yield one frame of codes, ``[n_vq]``, per step until
    the model stops (through ``stepper``, by default MLX's)."""
    stepper = stepper or MlxFrameStep(model)
    job = FrameJob(model, prompt, sampling, keys, cache)
    while not job.done:
        stepper.step([job])
        if job.stopped:
            return
        yield job.frame


def warm_up(
    model: Model,
    sampling: FrameSampling,
    stepper: FrameStep,
    max_batch: int = 2,
) -> None:
    """Steps a short prompt alone, then ``max_batch`` prompts together and
    every group size up to ``max_batch``, with ``sampling`` (the requests'
    default) through ``stepper`` (as the requests will be). Through MLX, its
    compiled parts are traced again for every new shape, and the first use
    of one on a machine builds its kernels (seconds, once; MLX keeps them on
    disk); one job alone and several together use different ones. Done at
    load, so the first burst of requests runs as fast as later ones."""
    prompt, _ = model.build_inference_input_ids(
        text="Hello.", tokenizer=model.tokenizer, mode="continuation"
    )
    together = max(max_batch, 2)
    jobs = [FrameJob(model, prompt, sampling, KeySequence(0)) for _ in range(together)]
    groups = [jobs[:1], jobs[:1], jobs, *(jobs[:size] for size in range(together, 1, -1))]
    for group in groups:
        live = [job for job in group if not job.done]
        if live:
            stepper.step(live)
    mx.eval([job.frame for job in jobs if job.frame is not None])
