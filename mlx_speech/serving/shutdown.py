"""A graceful stop: new speech requests are refused, running streams may
finish until a deadline, then each ends cleanly by itself (a closed
container, an SSE error event) before the server closes its connections."""

from __future__ import annotations

import threading
import time

import anyio

SHUTDOWN_POLL_SECONDS = 0.1
STOPPING = "the server is shutting down"
END_EARLY_SECONDS = 2.0  # before the deadline, to send a stream's end


class Shutdown:
    def __init__(self):
        self._lock = threading.Lock()
        self._deadline: float | None = None
        # The reading of request bodies still arriving (on the event loop):
        # at the deadline they are cancelled, and answered 503.
        self.bodies: set[anyio.CancelScope] = set()

    def begin(self, grace_seconds: float) -> None:
        """Any thread (a signal handler): from now on, streams have ``grace_seconds``."""
        with self._lock:
            if self._deadline is None:
                self._deadline = time.monotonic() + grace_seconds

    @property
    def started(self) -> bool:
        with self._lock:
            return self._deadline is not None

    @property
    def overdue(self) -> bool:
        with self._lock:
            return self._deadline is not None and time.monotonic() >= self._deadline

    async def end_bodies_when_overdue(self) -> None:
        """Runs for the server's life (its lifespan task)."""
        while True:
            if self.overdue:
                for reading in list(self.bodies):
                    reading.cancel()
            await anyio.sleep(SHUTDOWN_POLL_SECONDS)
