"""A job: one request's work on the worker, stepped one frame at a time."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

from .batching import DeferredOutput, Pending

log = logging.getLogger("mlx_speech.engine")

# Items a job's output queue carries besides its chunks.
END = object()


class Failure:
    """An exception raised on the worker, carried to the consumer."""

    def __init__(self, error: BaseException):
        self.error = error


_NOTHING = object()


class Job:
    """The worker-side state of one request.

    ``start`` runs on the worker thread when the job is admitted and returns a
    generator; each ``next()`` does one frame of work and yields a chunk to
    publish, ``None``, or ``Pending(batch)`` when it joined a shared step. The
    output queue holds one item: a job whose chunk cannot be published waits
    (parked) without holding up the others.
    """

    def __init__(self, start: Callable[[], Iterator[Any]]):
        self._start = start
        self._steps: Iterator[Any] | None = None
        self._pending: Any = _NOTHING
        self._cancelled = threading.Event()
        self.output: queue.Queue = queue.Queue(maxsize=1)
        self.finished = False
        # what the generator returned as it ended (set before its END is
        # published, so a reader that has the END sees it)
        self.result: Any = None

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def cancel(self) -> None:
        self._cancelled.set()

    @property
    def runnable(self) -> bool:
        return self.cancelled or self._pending is _NOTHING or not self.output.full()

    @property
    def parked(self) -> bool:
        """Its output waits for its reader: it needs no compute until then."""
        return not self.finished and not self.runnable

    def advance(self) -> Pending | None:
        """Worker thread: publish what is pending, else run one step; returns
        the ``Pending`` the step yielded, if it joined a shared step."""
        if self.cancelled:
            self.close()
            return None
        if self._pending is not _NOTHING and not self._publish():
            return None
        if self.finished:
            return None
        try:
            if self._steps is None:
                self._steps = self._start()
            item = next(self._steps)
        except StopIteration as end:
            self.result = end.value
            item = END
        except Exception as error:  # noqa: BLE001 - every failure goes to the consumer
            item = Failure(error)
        if isinstance(item, Pending):
            if isinstance(item.output, DeferredOutput):
                self._pending = item.output
                item.output.when_done(self._deliver)
            elif item.output is not None:
                self._pending = item.output
                self._publish()
            return item
        if item is None:
            return None
        self._pending = item
        self._publish()
        return None

    def _deliver(self) -> None:
        """Worker thread: publish an output that a flush has just produced."""
        if self._pending is not _NOTHING and not self.finished:
            self._publish()

    def _publish(self) -> bool:
        item = self._pending
        if isinstance(item, DeferredOutput):
            if not item.done:
                return False
            try:
                item = item.result()
            except Exception as error:  # noqa: BLE001 - the consumer gets it
                item = Failure(error)
        try:
            self.output.put_nowait(item)
        except queue.Full:
            self._pending = item
            return False
        if item is END or isinstance(item, Failure):
            self.close()
        self._pending = _NOTHING
        return True

    def close(self) -> None:
        """Worker thread: release the job's model state (runs its ``finally``);
        a reader still waiting is told the stream ended."""
        self.finished = True
        steps, self._steps = self._steps, None
        if steps is not None and hasattr(steps, "close"):
            try:
                steps.close()
            except Exception:  # noqa: BLE001 - a failing cleanup must not stop the worker
                log.exception("a job's cleanup failed")
        try:
            self.output.put_nowait(END)
        except queue.Full:
            pass  # the reader has an item to take first, or the end already
