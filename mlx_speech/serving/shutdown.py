"""A graceful stop: new speech requests are refused, running streams may
finish until a deadline, then each ends cleanly by itself (a closed
container, an SSE error event) before the server closes its connections.
Cut short (a second Ctrl-C), the deadline is now."""

from __future__ import annotations

import time

import anyio

SHUTDOWN_POLL_SECONDS = 0.1
STOPPING = "the server is shutting down"
END_EARLY_SECONDS = 2.0  # before the deadline, to send a stream's end


class Shutdown:
    """Set from any thread, a signal handler's included: so no lock, which
    a handler could wait on forever in the thread holding it; a float's
    assignment is atomic, and two stops racing give the same answer."""

    def __init__(self):
        self._deadline: float | None = None
        self.cut = False  # stopped at once: what runs is cut off
        # The reading of request bodies still arriving (on the event loop):
        # at the deadline they are cancelled, and answered 503.
        self.bodies: set[anyio.CancelScope] = set()

    def begin(self, grace_seconds: float) -> None:
        """From now on, streams have ``grace_seconds``."""
        if self._deadline is None:
            self._deadline = time.monotonic() + grace_seconds

    def cut_short(self) -> None:
        """The deadline is now: streams end, and connections close."""
        self.cut = True
        self._deadline = time.monotonic()

    @property
    def started(self) -> bool:
        return self._deadline is not None

    @property
    def deadline(self) -> float | None:
        return self._deadline

    @property
    def overdue(self) -> bool:
        deadline = self._deadline
        return deadline is not None and time.monotonic() >= deadline

    async def end_bodies_when_overdue(self) -> None:
        """Runs for the server's life (a task of the serving core)."""
        while True:
            if self.overdue:
                for reading in list(self.bodies):
                    reading.cancel()
            await anyio.sleep(SHUTDOWN_POLL_SECONDS)
