"""Letting a request in: the one bound on work waiting for the model."""

from __future__ import annotations

from typing import Any

from .errors import ApiError
from .shutdown import STOPPING


def admit(state: Any) -> None:
    """Count a request in, or refuse it (503 stopping, 429 too many waiting)."""
    if state.shutdown.started:
        raise ApiError(503, STOPPING, headers={"retry-after": "5"})
    waiting = state.metrics.in_flight - state.engine.capacity
    if waiting >= state.settings.max_queue:
        raise ApiError(
            429,
            f"{waiting} requests are already waiting; try again shortly",
            headers={"retry-after": str(state.settings.retry_after_seconds)},
        )
    state.metrics.request_opened()  # before any await, so the queue bound holds
