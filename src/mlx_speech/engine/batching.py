"""Steps that several jobs share.

A job that needs a model step hands its part to a ``Batch`` and yields
``Pending(batch)``. When every runnable job has had its turn, the worker
flushes each batch once: one forward pass serves all the jobs that joined it,
and they resume with their results in the next round. A job that is parked
(its reader is not reading) or cancelled simply does not join.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


class Batch(Protocol):
    def flush(self, max_batch: int) -> list[int]:
        """Worker thread: run what was submitted, in forwards of at most
        ``max_batch`` jobs; returns each forward's size."""


@dataclass(frozen=True)
class Pending:
    """Yielded by a job that submitted work to ``batch``, with a chunk to
    publish meanwhile if it has one."""

    batch: Batch
    output: Any = None
