"""A request the server will not take now, said without a protocol: HTTP
renders it as a status (``http.errors``), Wyoming as an ``error`` event."""

from __future__ import annotations

from typing import Literal

Reason = Literal["stopping", "busy", "not-ready"]


class Refusal(Exception):
    """``reason``: ``stopping`` (the server is shutting down), ``busy`` (too
    many requests wait for the model) or ``not-ready`` (the model is loading
    or failed to load); ``retry_after``: seconds a client may wait before
    trying again."""

    def __init__(self, reason: Reason, message: str, retry_after: int):
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.retry_after = retry_after
