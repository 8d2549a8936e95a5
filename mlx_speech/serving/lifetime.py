"""A server's life, whatever protocols it speaks. The serving core starts
(the engine set to the server's limits, the model loading, the book jobs'
runner), then each listener (HTTP, Wyoming) beside it in one task group.
One stop for all: the first ``stop`` (SIGINT or SIGTERM) refuses new
speech, lets what is being spoken finish for the grace and waits for the
long-lived sessions to end themselves, then closes the listeners; a second
cuts it all off at once."""

from __future__ import annotations

import logging
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager, nullcontext

import anyio

from .connections import leaf_errors
from .shutdown import END_EARLY_SECONDS, SHUTDOWN_POLL_SECONDS
from .state import ServerState

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup

log = logging.getLogger("mlx_speech.server")

# ``await tasks.start(listener, state)``: listens, tells ``task_status``
# once it does, and goes on until cancelled; then it closes, cutting off
# what it still serves only where ``state.shutdown.cut``.
Listener = Callable[..., Awaitable[None]]


class ListenerFailed(RuntimeError):
    """A listener could not start (its address taken since it was checked)."""


class ServerLife:
    def __init__(self, state: ServerState, listeners: list[Listener]):
        self.state = state
        self._listeners = listeners
        self._stops = 0
        self.listening = False  # every listener has started

    def run(self, signals: bool = False) -> None:
        """Serves until stopped. With ``signals`` (the main thread's), SIGINT
        and SIGTERM call ``stop``, and their handlers are back after."""
        with _signals_call(self.stop) if signals else nullcontext():
            try:
                anyio.run(self._serve)
            except BaseExceptionGroup as group:  # a listener's, out of the task group
                raise next(leaf_errors(group)) from None

    def stop(self) -> None:
        """Any thread, a signal handler included: the first call stops within
        the grace (``--shutdown-timeout``), a second at once."""
        self._stops += 1
        shutdown = self.state.shutdown
        if self._stops == 1:
            shutdown.begin(self.state.settings.shutdown_timeout)
            self._say_stopping()
        else:
            shutdown.cut_short()
            log.warning("stopping now: what is being spoken is cut off")

    async def _serve(self) -> None:
        async with serving(self.state), anyio.create_task_group() as tasks:
            for listener in self._listeners:
                await tasks.start(listener, self.state)
            self.listening = True
            while not self.state.shutdown.started:
                await anyio.sleep(SHUTDOWN_POLL_SECONDS)
            await self._sessions_ended()
            tasks.cancel_scope.cancel()

    async def _sessions_ended(self) -> None:
        """Until the long-lived sessions (WebSocket, Wyoming), which end
        themselves at the deadline with a word to their clients, have
        ended, or the deadline and the moment to say so have passed."""
        shutdown, sockets = self.state.shutdown, self.state.sockets
        deadline = shutdown.deadline + END_EARLY_SECONDS
        while sockets.active and not shutdown.cut and time.monotonic() < deadline:
            await anyio.sleep(0.05)

    def _say_stopping(self) -> None:
        """What a first stop waits for, and for how long."""
        grace = self.state.settings.shutdown_timeout
        requests, sessions = self.state.metrics.in_flight, self.state.sockets.active
        if not requests and not sessions:
            log.info("stopping")
            return
        log.warning(
            "stopping: what is being spoken (%d request(s), %d WebSocket or Wyoming "
            "session(s)) may finish for up to %g s (--shutdown-timeout); press "
            "Ctrl-C again to stop now",
            requests,
            sessions,
            grace,
        )


@asynccontextmanager
async def serving(state: ServerState) -> AsyncIterator[None]:
    """The serving core, started for the block's life."""
    engine = state.engine
    before = engine.max_batch, engine.max_parked
    engine.configure(state.settings.max_batch, state.settings.max_parked)
    engine.forward_observers.append(state.metrics.forward)
    state.slot.start()
    # A request's checks run on anyio's threads; their first use costs 12 ms
    # once (seen on the first request after start), paid here instead, by
    # reading the kept book jobs (the unfinished queued again).
    await anyio.to_thread.run_sync(state.books.start)
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(state.shutdown.end_bodies_when_overdue)
            yield
            tasks.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            # the job in flight stops where it is, to resume at the next start
            await anyio.to_thread.run_sync(state.books.stop)
        engine.forward_observers.remove(state.metrics.forward)
        engine.configure(*before)


@contextmanager
def _signals_call(stop: Callable[[], None]) -> Iterator[None]:
    previous = {
        sig: signal.signal(sig, lambda signum, frame: stop())
        for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
