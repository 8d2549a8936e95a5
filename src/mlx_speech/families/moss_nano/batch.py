"""The Nano requests of one model waiting for their next frame.

Each request submits its ``FrameJob`` and yields ``Pending(batch)``; the worker
flushes the batch once per round, stepping the jobs together in groups of at
most ``max_batch``.
"""

from __future__ import annotations

from mlx_audio.tts.models.moss_tts_nano import Model

from .loop import FrameJob, step


class FrameBatch:
    def __init__(self, model: Model):
        self._model = model
        self._waiting: list[FrameJob] = []

    def submit(self, job: FrameJob) -> None:
        self._waiting.append(job)

    def flush(self, max_batch: int) -> list[int]:
        waiting, self._waiting = self._waiting, []
        sizes = []
        for start in range(0, len(waiting), max_batch):
            group = waiting[start : start + max_batch]
            try:
                step(self._model, group)
            except Exception as error:  # noqa: BLE001 - each job's reader gets it
                for job in group:
                    job.failure = error
            sizes.append(len(group))
        return sizes
