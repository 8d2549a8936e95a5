"""HTTP (with the WebSocket and the page) as one of the server's listeners:
uvicorn serves the app in the server's task group (``serving.lifetime``),
with its own signal handlers kept out, since the server's life has the one
stop for every protocol."""

from __future__ import annotations

import contextlib
import socket
from typing import Any

import anyio
import anyio.abc
import uvicorn
from starlette.applications import Starlette

from ..serving.lifetime import ListenerFailed
from ..serving.shutdown import END_EARLY_SECONDS
from ..serving.state import ServerState
from ..settings import ServerSettings
from .app import create_http_app
from .connections import guarded_protocol
from .protocol_errors import JsonErrorsWebSocketProtocol

LISTENER = "http"  # its name in ``state.listeners``
STOP_POLL_SECONDS = 0.05


class HttpListener:
    def __init__(self, sockets: list[socket.socket] | None = None, **uvicorn_options: Any):
        """``sockets``: listen on these, already bound, instead of the
        settings' address; ``uvicorn_options`` go to uvicorn's config."""
        self._sockets = sockets
        self._options = uvicorn_options
        self.app: Starlette | None = None  # once started

    async def __call__(
        self,
        state: ServerState,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        self.app = create_http_app(state)
        config = uvicorn_config(self.app, state.settings, **self._options)
        server = _Uvicorn(config)
        ended = anyio.Event()

        async def serve() -> None:
            # shielded: it ends when told to (below), never half-way
            with anyio.CancelScope(shield=True):
                try:
                    await server.serve(self._sockets)
                except SystemExit:  # how uvicorn says it could not listen
                    pass
                finally:
                    ended.set()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(serve)
            while not (server.started or ended.is_set()):
                await anyio.sleep(STOP_POLL_SECONDS)
            if not server.started:
                address = f"http://{state.settings.host}:{state.settings.port}"
                raise ListenerFailed(f"could not serve on {address} (see the log above)")
            state.listeners[LISTENER] = "serving"
            task_status.started()
            try:
                await ended.wait()
            finally:
                with anyio.CancelScope(shield=True):
                    await _stop(server, state, ended)
                state.listeners[LISTENER] = "stopped"


def uvicorn_config(
    app: Starlette, settings: ServerSettings, **options: Any
) -> uvicorn.Config:
    """uvicorn's settings for ``app``, with the connection limits of ``settings``."""
    return uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        http=guarded_protocol(settings.header_timeout, settings.max_connections),
        ws=JsonErrorsWebSocketProtocol,
        timeout_keep_alive=settings.keep_alive_timeout,
        ws_max_size=settings.max_body_bytes,
        lifespan="off",  # the server's life is ``serving.lifetime``'s
        # Streams end themselves at the deadline (``serving.shutdown``); uvicorn
        # cancels only what is still running a moment later.
        timeout_graceful_shutdown=settings.shutdown_timeout + END_EARLY_SECONDS + 1,
        **options,
    )


class _Uvicorn(uvicorn.Server):
    def capture_signals(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()


async def _stop(server: _Uvicorn, state: ServerState, ended: anyio.Event) -> None:
    """uvicorn closes: what it still serves may end within its own grace
    (``uvicorn_config``), or, cut short, its connections are dropped and
    their requests, told their client left, end by themselves (cancelled,
    each would log a traceback)."""
    server.should_exit = True
    while not ended.is_set():
        if state.shutdown.cut and not server.force_exit:
            server.force_exit = True
            _drop_connections(server)
        await anyio.sleep(STOP_POLL_SECONDS)
    if state.shutdown.cut:
        _drop_connections(server)
        with anyio.move_on_after(END_EARLY_SECONDS):
            while server.server_state.tasks:
                await anyio.sleep(STOP_POLL_SECONDS)


def _drop_connections(server: uvicorn.Server) -> None:
    for connection in list(server.server_state.connections):
        transport = getattr(connection, "transport", None)
        if transport is not None:
            transport.abort()
