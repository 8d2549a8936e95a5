"""What the adapters of long-lived connections (the speech WebSocket,
Wyoming) share: the count a stopping server waits on, the bound on a
connection's waiting utterances, and reading a stream's events off the
event loop."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import anyio

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup

# Utterances a connection may have sent and not yet had answered; each waits
# for its turn, and only the one speaking counts toward --max-queue.
MAX_UTTERANCES_WAITING = 8


class StalledReader(Exception):
    """The client accepted nothing for ``--stream-idle-timeout`` seconds."""


class OpenSockets:
    """How many connections are open: a stopping server waits for them."""

    def __init__(self):
        self.active = 0

    def opened(self) -> None:
        self.active += 1

    def closed(self) -> None:
        self.active -= 1


async def next_event(events) -> Any:
    """A stream's next event, read off the event loop; None at its end."""
    return await anyio.to_thread.run_sync(next, events, None, abandon_on_cancel=True)


def leaf_errors(error: BaseException) -> Iterator[BaseException]:
    """``error``, or each error inside it where it is a group (task groups
    gather their tasks' errors into groups, nested as the groups were)."""
    if isinstance(error, BaseExceptionGroup):
        for one in error.exceptions:
            yield from leaf_errors(one)
    else:
        yield error


def failure_text(error: Exception) -> str:
    """What a client is told of a segment that failed: its text refused
    (a ``ValueError``) or its generation."""
    why = "not spoken" if isinstance(error, ValueError) else "generation failed"
    return f"{why}: {str(error)[:300]}"
