"""Letting a request in: the one bound on work waiting for the model."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .refusal import Refusal
from .shutdown import STOPPING

if TYPE_CHECKING:
    from .state import ServerState

STOPPING_RETRY_SECONDS = 5


def refuse_when_stopping(state: ServerState) -> None:
    """``Refusal`` (``stopping``) once the server has begun to stop."""
    if state.shutdown.started:
        raise Refusal("stopping", STOPPING, STOPPING_RETRY_SECONDS)


def admit(state: ServerState) -> None:
    """Count a request in, or refuse it (``stopping``, or ``busy`` with too
    many waiting)."""
    refuse_when_stopping(state)
    waiting = state.metrics.in_flight - state.engine.capacity
    if waiting >= state.settings.max_queue:
        raise Refusal(
            "busy",
            f"{waiting} requests are already waiting; try again shortly",
            state.settings.retry_after_seconds,
        )
    state.metrics.request_opened()  # before any await, so the queue bound holds
