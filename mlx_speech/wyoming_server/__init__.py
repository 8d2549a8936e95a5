"""The Wyoming protocol (Home Assistant's) beside HTTP: ``mlx-speech serve
--wyoming-port PORT``. ``serve_wyoming`` listens and runs a ``session`` per
connection, on the server's event loop, with its state, limits and stop.

Whatever happens in one connection ends there: the listener goes on serving
the others, and ``state.listeners`` says whether it is serving (``/health``
reads it)."""

from __future__ import annotations

import logging

import anyio
import anyio.abc

from ..serving.connections import leaf_errors
from ..serving.state import ServerState
from .session import WyomingSession

log = logging.getLogger("mlx_speech.server")

LISTENER = "wyoming"  # its name in ``state.listeners``


async def serve_wyoming(
    state: ServerState,
    *,
    task_status: anyio.abc.TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Listen on ``state.settings``' Wyoming address until cancelled; tells
    ``task_status`` the port it listens on. Should the listener itself fail,
    ``state.listeners`` says so and the rest of the server goes on."""
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
        except Exception:  # a bug in one connection: it alone ends
            log.exception("a Wyoming connection failed; the listener goes on")
        finally:
            open_connections -= 1
            state.sockets.closed()

    state.wyoming_port = port
    state.listeners[LISTENER] = "serving"
    task_status.started(port)
    ended = "stopped"
    try:
        async with listener:
            await listener.serve(session)
    except Exception as error:
        log.exception("the Wyoming listener stopped")
        first = next(leaf_errors(error))  # out of the listener's task group
        ended = f"failed: {first!r}"
    finally:
        state.listeners[LISTENER] = ended
