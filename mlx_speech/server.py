"""``mlx-speech serve``'s server: the serving core (``serving``) with its
protocol adapters beside each other: HTTP (with the WebSocket and the page)
and, with ``--wyoming-port``, Wyoming; or Wyoming alone (``--no-http``), for
which neither HTTP's modules nor Starlette are loaded. It runs until SIGINT
or SIGTERM, then lets what is being spoken finish for a grace."""

from __future__ import annotations

import errno
import gc
import logging
import signal
import socket
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

log = logging.getLogger("mlx_speech.server")


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

    forced = threading.Event()

    def stop(signum, frame) -> None:
        if stopping.is_set():
            forced.set()
            _say_stopping_now()
            return
        stopping.set()
        state.shutdown.begin(grace)
        _say_stopping(state, grace)

    async def run() -> None:
        async with serving(state, other_listeners(settings)):
            while not stopping.is_set():
                await anyio.sleep(0.1)
            deadline = time.monotonic() + grace + END_EARLY_SECONDS
            while state.sockets.active and time.monotonic() < deadline:
                if forced.is_set():
                    break
                await anyio.sleep(0.05)

    with _signals_call(stop):
        anyio.run(run)
    if slot.error is not None:
        raise RuntimeError(f"could not load the model: {slot.error}")


def check_ports(settings: ServerSettings) -> None:
    """Each port the server will listen on can be had: else a
    ``PortUnavailable`` naming it and the flag that sets it. ``serve`` asks
    before it loads anything or says where it listens (not, later, a
    listener's traceback)."""
    ports = [
        (settings.wyoming_host or settings.host, settings.wyoming_port, "--wyoming-port")
    ]
    if settings.http:
        ports.insert(0, (settings.host, settings.port, "--port"))
    for host, port, flag in ports:
        if not port:  # none, or any free one
            continue
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as error:
            raise PortUnavailable(f"cannot listen on {host}: {error.strerror}") from None
        family, kind, _, _, address = infos[0]
        with socket.socket(family, kind) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind
            try:
                probe.bind(address)
            except OSError as error:
                raise PortUnavailable(_why_not(host, port, flag, error)) from None


class PortUnavailable(RuntimeError):
    """A port the server was told to listen on cannot be had."""


def _why_not(host: str, port: int, flag: str, error: OSError) -> str:
    if error.errno == errno.EADDRNOTAVAIL:
        host_flag = flag.replace("port", "host")
        return f"{host} is no address of this machine: pass {host_flag} with one that is"
    if error.errno == errno.EADDRINUSE:
        reason = "is in use (another server listens there)"
    elif error.errno == errno.EACCES:
        reason = "needs privileges (ports below 1024 do)"
    else:
        reason = f"cannot be had ({error.strerror})"
    return f"port {port} on {host} {reason}: pass {flag} with another port"


def _keep_loaded_objects_from_the_collector() -> None:
    """Moves what loading made (the model's modules, tokenizers, text
    normalization tables: about 116,000 objects) out of the cyclic garbage
    collector's scans. A full collection, which Python starts now and then
    while serving, scanned them all: 66 ms during which no stream got a
    frame; it now scans only what serving made (0.45 ms)."""
    gc.freeze()
    log.debug(
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
            _say_stopping_now()
            return
        stopping.set()
        state.shutdown.begin(grace_seconds)
        _say_stopping(state, grace_seconds)
        threading.Thread(target=exit_when_sockets_end, daemon=True).start()

    with _signals_call(stop):
        thread = threading.Thread(target=server.run, name="uvicorn")
        thread.start()
        while thread.is_alive():
            thread.join(0.2)


def _say_stopping(state, grace_seconds: float) -> None:
    """What a first signal waits for, and for how long."""
    requests, sessions = state.metrics.in_flight, state.sockets.active
    if not requests and not sessions:
        log.info("stopping")
        return
    log.warning(
        "stopping: what is being spoken (%d request(s), %d WebSocket session(s)) "
        "may finish for up to %g s (--shutdown-timeout); press Ctrl-C again to "
        "stop now",
        requests,
        sessions,
        grace_seconds,
    )


def _say_stopping_now() -> None:
    log.warning("stopping now: what is being spoken is cut off")


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
