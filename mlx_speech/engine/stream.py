"""``ChunkStream``: the consumer's end of one job."""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from .job import END, Failure, Job


class JobRunner(Protocol):
    """What a stream needs of the engine (``worker.Engine`` is one)."""

    def expect(self) -> Callable[[], None]:
        """Announce a job about to be submitted; → call once it was, or will not be."""

    def submit(self, job: Job) -> None:
        """Queue the job on the worker."""

    def notify(self) -> None:
        """A queue slot was freed or the job cancelled: re-check the jobs."""


class ChunkStream:
    """Iterate to receive a job's chunks as they are produced.

    The job starts on the first read (lazy start). Errors raised on the
    worker are re-raised here. ``cancel()``, leaving the iteration early via
    ``close()``, or dropping the last reference stops the job at the next
    frame boundary.
    """

    def __init__(self, engine: JobRunner, start: Callable[[], Iterator[Any]]):
        self._engine = engine
        self._job = Job(start)
        self._arrived = engine.expect()
        self.ignored: tuple[str, ...] = ()  # request fields the model did not use
        self._started = False
        self._ended = False

    def __iter__(self) -> ChunkStream:
        return self

    def __next__(self) -> Any:
        return self.get()

    def get(self, timeout: float | None = None) -> Any:
        """The next chunk; ``TimeoutError`` if none comes within ``timeout``.

        A timeout loses nothing: the chunk stays queued for the next call.
        """
        if self._ended:
            raise StopIteration
        if not self._started:
            self._started = True
            self._engine.submit(self._job)
            self._arrived()
        try:
            item = self._job.output.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no audio within {timeout} s") from None
        self._engine.notify()
        if item is END:
            self._ended = True
            raise StopIteration
        if isinstance(item, Failure):
            self._ended = True
            raise item.error
        return item

    @property
    def result(self) -> Any:
        """What the job's generator returned, once this stream has ended
        (a family's ``synthesize``: whether it ran to its frame budget)."""
        return self._job.result

    def cancel(self) -> None:
        """Stop the job at its next frame boundary; further reads end, and a
        read blocked in another thread returns."""
        self._ended = True
        self._arrived()
        if self._started and not self._job.finished:
            self._job.cancel()
            try:
                self._job.output.put_nowait(END)
            except queue.Full:
                pass  # a blocked reader is about to receive that item instead
            self._engine.notify()

    close = cancel

    def __del__(self) -> None:
        self.cancel()
