"""The Wyoming protocol (Home Assistant's) beside HTTP: ``mlx-speech serve
--wyoming-port PORT``. ``serve_wyoming`` listens and runs a ``session`` per
connection, on the server's event loop, with its state, limits and stop."""

from __future__ import annotations

import logging
from typing import Any

import anyio
import anyio.abc

from .session import WyomingSession

log = logging.getLogger("mlx_speech.server")


async def serve_wyoming(
    state: Any, *, task_status: anyio.abc.TaskStatus[int] = anyio.TASK_STATUS_IGNORED
) -> None:
    """Listen on ``state.settings``' Wyoming address until cancelled; tells
    ``task_status`` the port it listens on."""
    settings = state.settings
    host = settings.wyoming_host or settings.host
    listener = await anyio.create_tcp_listener(
        local_host=host, local_port=settings.wyoming_port
    )
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    log.info("Wyoming (Home Assistant) listening on tcp://%s:%d", host, port)
    open_connections = 0

    async def session(connection: anyio.abc.SocketStream) -> None:
        nonlocal open_connections
        if open_connections >= settings.max_connections:
            await connection.aclose()  # as HTTP closes them unread
            return
        open_connections += 1
        state.sockets.opened()  # a stopping server waits for it
        try:
            await WyomingSession(connection, state).run()
        finally:
            open_connections -= 1
            state.sockets.closed()

    task_status.started(port)
    async with listener:
        await listener.serve(session)
