"""Steps that several jobs share.

A job that needs a model step hands its part to a ``Batch`` and yields
``Pending(batch)``. When every runnable job has had its turn, the worker
flushes each batch once: one forward pass serves all the jobs that joined it,
and they resume with their results in the next round. A job that is parked
(its reader is not reading) or cancelled simply does not join.

A job may also hand over work whose result is its next output (a chunk of
audio to decode) as a ``DeferredOutput``. The batches holding such work are
flushed first, and each output is published the moment it is produced, so a
chunk reaches its reader before the next frames are computed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol


class Batch(Protocol):
    def flush(self, max_batch: int) -> list[int]:
        """Worker thread: run what was submitted, in forwards of at most
        ``max_batch`` jobs; returns each forward's size."""


_UNSET = object()


class DeferredOutput:
    """An output that ``batch`` produces at its next flush."""

    def __init__(self, batch: Batch):
        self.batch = batch
        self._value: Any = _UNSET
        self._failure: BaseException | None = None
        self._listeners: list[Callable[[], None]] = []

    @property
    def done(self) -> bool:
        return self._value is not _UNSET or self._failure is not None

    def when_done(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (on the worker) once the output is produced."""
        if self.done:
            listener()
        else:
            self._listeners.append(listener)

    def resolve(self, value: Any) -> None:
        self._value = value
        self._notify()

    def fail(self, error: BaseException) -> None:
        self._failure = error
        self._notify()

    def _notify(self) -> None:
        listeners, self._listeners = self._listeners, []
        for listener in listeners:
            listener()

    def result(self) -> Any:
        """The output, or the exception its work raised."""
        if self._failure is not None:
            raise self._failure
        if self._value is _UNSET:
            raise RuntimeError("the output was read before its batch was flushed")
        return self._value


@dataclass(frozen=True)
class Pending:
    """Yielded by a job that submitted work to ``batch``, with an output to
    publish meanwhile if it has one (a ``DeferredOutput`` is published once
    produced)."""

    batch: Batch
    output: Any = None
