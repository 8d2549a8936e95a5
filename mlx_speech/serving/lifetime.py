"""A server's life, whatever protocols it speaks: the engine set to the
server's limits, the model loading, the book jobs' runner, and each
listener started beside it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio

from .state import ServerState

# ``await tasks.start(listener, state)``: listens until cancelled (Wyoming's
# ``serve_wyoming``).
Listener = Callable[..., Awaitable[None]]


@asynccontextmanager
async def serving(state: ServerState, listeners: list[Listener]) -> AsyncIterator[None]:
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
            for listener in listeners:
                await tasks.start(listener, state)
            yield
            tasks.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            # the job in flight stops where it is, to resume at the next start
            await anyio.to_thread.run_sync(state.books.stop)
        engine.forward_observers.remove(state.metrics.forward)
        engine.configure(*before)
