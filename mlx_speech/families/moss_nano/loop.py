"""The Nano autoregressive loop: one codec frame per step, for one request or
for several at once.

Per frame: a global transformer step over each request's newest row, a local
step whose text head chooses between "another audio frame" and "audio ends"
(the stop decision), then one local step per codebook. The frame is built as
one graph and queued whole before the host reads the stop decision (the one
host sync per frame), so the device computes the codes while the host reads
it and then builds the next frame. Requests stepped together share every
weight-bound matrix product (their rows are stacked); attention runs per
request over its own KV cache, so each request's numbers are the ones it
would get alone. A frame is delivered only after the model chose to
continue, so no audio of a frame whose text token was audio-end ever reaches
the decoder.
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
    """The whole frame as one graph, queued at once; then the stop choices,
    read while the codes are still being computed (the frame's one host
    sync). A job that stops drops its codes (its codebooks' keys are spent,
    as on the host engine, but it is done)."""
    hidden = _global_hidden(model, jobs, ops)
    local = LocalPass(model.local_transformer, positions=model.config.n_vq + 1)
    choices = _text_head_choices(model, jobs, local(hidden))
    frames, next_inputs = _codes(model, jobs, local)
    mx.async_eval(choices, frames, next_inputs)
    going = [choice == 0 for choice in choices.tolist()]
    for index, job in enumerate(jobs):
        job.frame = None
        job.stopped = not going[index]
        if going[index]:
            job.finish_frame(frames[index], next_inputs[index : index + 1])


def _codes(
    model: Model, jobs: list[FrameJob], local: LocalPass
) -> tuple[mx.array, mx.array]:
    """Each job's codes of the frame, ``[jobs, n_vq]``, one local step per
    codebook, and its next input row: the slot's embedding plus each code's,
    summed in ``embed_rows``' order from the embeddings the local steps take,
    so none is looked up twice."""
    slot = model.transformer.wte.weight[model.config.audio_assistant_slot_token_id]
    previous = mx.broadcast_to(slot, (len(jobs), slot.shape[-1]))
    summands = [previous]
    seen = mx.stack([job.history.seen for job in jobs])  # [jobs, n_vq, vocab]
    samplers = [job.sampling.audio for job in jobs]
    penalties = [job.sampling.repetition_penalty for job in jobs]
    # every codebook's draw of each sampling job, taken at once
    sampled, uniforms = next_draws(
        samplers, [job.keys for job in jobs], len(model.audio_embeddings)
    )
    codes = []
    for channel, embedding in enumerate(model.audio_embeddings):
        logits = linear(local(previous), embedding.weight)
        logits = penalize_repeats(logits, seen[:, channel, : logits.shape[-1]], penalties)
        channel_uniforms = None if uniforms is None else uniforms[channel]
        code = pick_rows(logits, samplers, channel_uniforms, sampled)
        codes.append(code)
        previous = embedding(code)
        summands.append(previous)
    frame = mx.stack(codes, axis=1).astype(mx.int32)
    return frame, _sum_in_order(summands)[:, None, :]


@mx.compile
def _sum_in_order(arrays: list[mx.array]) -> mx.array:
    """``arrays[0] + arrays[1] + …``, left to right, as one fused pass."""
    total = arrays[0]
    for array in arrays[1:]:
        total = total + array
    return total


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


def _text_head_choices(
    model: Model, jobs: list[FrameJob], local_hidden: mx.array
) -> mx.array:
    """Each job's text-head choice, lazy: 0 for another frame, 1 for the end."""
    config = model.config
    candidates = mx.array(
        [config.audio_assistant_slot_token_id, config.audio_end_token_id], dtype=mx.int32
    )
    logits = local_hidden @ model.transformer.wte.weight[candidates].T
    return sample_rows(logits, [(job.sampling.text, job.keys) for job in jobs])


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
