"""The Nano work of one model that its requests share each round.

``FrameBatch``: each request submits its ``FrameJob`` and yields
``Pending(batch)``; the worker steps the jobs together in groups of at most
``max_batch``. ``CodecBatch``: a request hands over the frames of its next
chunk and gets a ``DeferredOutput`` that the flush fills with the chunk's
audio; the frames of all requests due for audio are decoded in one pass.

Concurrent requests that started together reach their chunk ends in the same
rounds, and decoding all their chunks in one round stalls every stream at
once. So a round takes on about ``FRAMES_PER_ROUND`` frames of decoding (all
of eight requests' largest chunks: with the host decoder, 0.3 s of decoding
for 2 s of audio already sent to each listener); a request whose
complete chunk does not fit keeps generating and hands it over in a later
round (``has_room``), never later than its next chunk's end. First chunks
never wait. Which frames make a chunk is unchanged: only when it is decoded.
"""

from __future__ import annotations

from collections.abc import Callable

import mlx.core as mx

from ...engine.batching import DeferredOutput
from ..chunks import finite_audio
from .accelerator import CodecDecoder, FrameStep
from .codec import with_channels
from .loop import FrameJob

# Measured on the full-size codec's host decoder (OpenBLAS, 2 cores), 8 requests
# apart → together: 1 frame each 58 → 20 ms, 4 each 106 → 64, 12 each 282 → 236.
# Served, 8 at a time, 16 and 16 frames: 7.97-8.02 audio-s/s; 64 and 128: 8.29-8.79.
FRAMES_PER_DECODE = 64
FRAMES_PER_ROUND = 2 * FRAMES_PER_DECODE


class FrameBatch:
    def __init__(self, stepper: FrameStep):
        self._stepper = stepper
        self._waiting: list[FrameJob] = []
        self._after_steps: list[Callable[[], None]] = []

    @property
    def has_waiting(self) -> bool:
        return bool(self._waiting)

    def after_steps(self, call: Callable[[], None]) -> None:
        """Have ``call`` run after each flush's steps, failed or not."""
        self._after_steps.append(call)

    def submit(self, job: FrameJob) -> None:
        self._waiting.append(job)

    def flush(self, max_batch: int) -> list[int]:
        waiting, self._waiting = self._waiting, []
        sizes = []
        try:
            for group in _groups(waiting, max_batch):
                try:
                    self._stepper.step(group)
                except Exception as error:  # noqa: BLE001 - each job's reader gets it
                    for job in group:
                        job.failure = error
                sizes.append(len(group))
        finally:
            for call in self._after_steps:
                call()
        return sizes


class CodecBatch:
    """Decodes through ``decoder``: MLX's (``codec.MlxDecoder``) or an
    accelerator's.

    With ``frames``, the frame batch the worker flushes after this one in a
    round, a decoder that can queue its work (``queue_together``) decodes
    the chunks after a request's first without a wait of their own: they
    are queued before the frame step, whose wait for its stop choices
    covers them, and handed out right after it. A first chunk is waited for
    and handed out at once, so first audio never waits for a step."""

    def __init__(
        self,
        decoder: CodecDecoder,
        n_vq: int,
        sample_rate: int,
        frames: FrameBatch | None = None,
    ):
        self._decoder = decoder
        self._n_vq = n_vq
        self._sample_rate = sample_rate
        self._waiting: list[tuple[object, list[mx.array], DeferredOutput, bool]] = []
        self._queued: list[tuple[list, list]] = []  # (group, its audio: queued, unread)
        queues = frames is not None and hasattr(decoder, "queue_together")
        self._frames = frames if queues else None
        if queues:
            frames.after_steps(self._hand_out_queued)

    def state(self, channels: int = 1):
        """A new request's place in the decoder."""
        return self._decoder.state(channels)

    def warm_up(self, requests: int) -> None:
        """Decodes a first frame alone and ``requests`` of them together (as
        a burst's first chunks are), so no request waits for MLX to build
        the decoder's kernels."""
        frame = mx.zeros((self._n_vq,), dtype=mx.int32)
        for count in sorted({1, requests}):
            self._decoder.decode_together([(self.state(), [frame]) for _ in range(count)])

    def has_room(self, frames: int) -> bool:
        """Whether a chunk of ``frames`` fits this round's decoding."""
        waiting = sum(len(item[1]) for item in self._waiting)
        return waiting + frames <= FRAMES_PER_ROUND

    def decode(self, state, frames: list[mx.array], first: bool = True) -> DeferredOutput:
        """The ``Audio`` of ``frames`` (``first``: a request's first chunk),
        once flushed."""
        chunk = DeferredOutput(self)
        self._waiting.append((state, frames, chunk, first))
        return chunk

    def flush(self, max_batch: int) -> list[int]:
        """Decodes, smallest chunks first (a request's first chunk is one
        frame, so new listeners hear audio soonest); returns no sizes (the
        batch metrics count frame steps)."""
        waiting = sorted(self._waiting, key=lambda item: len(item[1]))
        self._waiting = []
        step_follows = self._frames is not None and self._frames.has_waiting
        for group in _decode_groups(waiting, max_batch):
            work = [(state, frames) for state, frames, *_ in group]
            queue = step_follows and not any(first for *_, first in group)
            try:
                if queue:
                    self._queued.append((group, self._decoder.queue_together(work)))
                    continue
                audio = self._decoder.decode_together(work)
            except Exception as error:  # noqa: BLE001 - each request's reader gets it
                _fail(group, error)
                continue
            self._hand_out(group, audio)
        return []

    def _hand_out_queued(self) -> None:
        queued, self._queued = self._queued, []
        for group, audio in queued:
            self._hand_out(group, audio)

    def _hand_out(self, group: list, audio: list) -> None:
        for (state, _, chunk, _), samples in zip(group, audio, strict=True):
            try:
                audio_out = with_channels(samples, state.channels)
                chunk.resolve(finite_audio(audio_out, self._sample_rate))
            except Exception as error:  # noqa: BLE001 - only that request fails
                chunk.fail(error)


def _fail(group: list, error: BaseException) -> None:
    for _, _, chunk, _ in group:
        chunk.fail(error)


def _decode_groups(waiting: list, max_batch: int) -> list[list]:
    """Passes of at most ``max_batch`` requests and, past one request, about
    ``FRAMES_PER_DECODE`` frames: decoding many small chunks together saves
    per-operation overhead, while passes over many frames gain nothing and
    outgrow the CPU caches."""
    groups: list[list] = []
    frames = 0
    for item in waiting:
        count = len(item[1])
        if groups and len(groups[-1]) < max_batch and frames + count <= FRAMES_PER_DECODE:
            groups[-1].append(item)
            frames += count
        else:
            groups.append([item])
            frames = count
    return groups


def _groups(items: list, size: int) -> list[list]:
    return [items[start : start + size] for start in range(0, len(items), size)]
