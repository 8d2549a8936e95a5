"""``mlx-speech serve``'s server: the serving core (``serving``) with its
protocol adapters beside each other: HTTP (with the WebSocket and the page)
and, with ``--wyoming-port``, Wyoming; or Wyoming alone (``--no-http``), for
which neither HTTP's modules nor Starlette are loaded. It runs until SIGINT
or SIGTERM, then lets what is being spoken finish for a grace."""

from __future__ import annotations

import gc
import logging
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import anyio

from .serving.lifetime import Listener, serving
from .serving.shutdown import END_EARLY_SECONDS
from .serving.slot import Loader
from .serving.state import server_state
from .settings import ServerSettings
from .wyoming_server import serve_wyoming

if TYPE_CHECKING:
    from starlette.applications import Starlette

__all__ = ["ServerSettings", "create_app", "serve_http", "serve_without_http"]


def other_listeners(settings: ServerSettings) -> list[Listener]:
    """The protocols served beside HTTP."""
    return [serve_wyoming] if settings.wyoming_port is not None else []


def create_app(settings: ServerSettings, load: Loader) -> Starlette:
    """The HTTP app for ``settings``, with the other protocols it names
    listening beside it for the app's life; ``load`` gives the model."""
    from .http.app import create_http_app  # here: Wyoming alone loads no HTTP

    return create_http_app(server_state(settings, load), other_listeners(settings))


def serve_http(settings: ServerSettings, load: Loader, **uvicorn_options) -> None:
    """Serve ``create_app``'s app with uvicorn until a signal stops it;
    ``uvicorn_options`` go to its config (logging)."""
    import uvicorn

    from .http.app import uvicorn_config

    app = create_app(settings, load)
    server = uvicorn.Server(
        uvicorn_config(app, settings, log_config=None, **uvicorn_options)
    )
    slot = app.state.slot
    slot.on_failure = lambda error: setattr(server, "should_exit", True)
    slot.on_loaded = _keep_loaded_objects_from_the_collector
    _run_until_signalled(server, app.state, settings.shutdown_timeout)
    if slot.error is not None:
        raise RuntimeError(f"could not load the model: {slot.error}")
    if not server.started:
        address = f"http://{settings.host}:{settings.port}"
        raise RuntimeError(f"could not serve on {address} (see the log above)")


def serve_without_http(settings: ServerSettings, load: Loader) -> None:
    """The server's life (the model, the engine, the other listeners: Wyoming)
    without HTTP, until SIGINT or SIGTERM; then what is being spoken may
    finish for the grace, as ``serve_http`` lets it."""
    state = server_state(settings, load)
    slot = state.slot
    grace = state.settings.shutdown_timeout
    stopping = threading.Event()
    slot.on_failure = lambda error: stopping.set()
    slot.on_loaded = _keep_loaded_objects_from_the_collector

    def stop(signum, frame) -> None:
        stopping.set()
        state.shutdown.begin(grace)

    async def run() -> None:
        async with serving(state, other_listeners(settings)):
            while not stopping.is_set():
                await anyio.sleep(0.1)
            deadline = time.monotonic() + grace + END_EARLY_SECONDS
            while state.sockets.active and time.monotonic() < deadline:
                await anyio.sleep(0.05)

    with _signals_call(stop):
        anyio.run(run)
    if slot.error is not None:
        raise RuntimeError(f"could not load the model: {slot.error}")


def _keep_loaded_objects_from_the_collector() -> None:
    """Moves what loading made (the model's modules, tokenizers, text
    normalization tables: about 116,000 objects) out of the cyclic garbage
    collector's scans. A full collection, which Python starts now and then
    while serving, scanned them all: 66 ms during which no stream got a
    frame; it now scans only what serving made (0.45 ms)."""
    gc.freeze()
    logging.getLogger("mlx_speech.server").debug(
        "%d objects from loading kept out of the garbage collector's scans",
        gc.get_freeze_count(),
    )


def _run_until_signalled(server, state, grace_seconds: float) -> None:
    """Serve in a thread; SIGINT/SIGTERM stop it gracefully (a second one forces)
    and the process then exits 0, as a service manager expects. uvicorn drops
    WebSocket sessions as soon as it stops, so it is told to stop once they
    have ended themselves (``http.speech_socket``) or the grace has passed."""
    stopping = threading.Event()

    def exit_when_sockets_end() -> None:
        deadline = time.monotonic() + grace_seconds + END_EARLY_SECONDS
        while state.sockets.active and time.monotonic() < deadline:
            time.sleep(0.05)
        server.should_exit = True

    def stop(signum, frame) -> None:
        if stopping.is_set():
            server.force_exit = server.should_exit = True
            return
        stopping.set()
        state.shutdown.begin(grace_seconds)
        threading.Thread(target=exit_when_sockets_end, daemon=True).start()

    with _signals_call(stop):
        thread = threading.Thread(target=server.run, name="uvicorn")
        thread.start()
        while thread.is_alive():
            thread.join(0.2)


@contextmanager
def _signals_call(stop) -> Iterator[None]:
    """Within, SIGINT and SIGTERM call ``stop``; after, their handlers are
    back as they were."""
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
