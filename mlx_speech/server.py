"""``mlx-speech serve``'s server: the serving core's life
(``serving.lifetime``) with the listeners the settings name: HTTP (with the
WebSocket and the page) and, with ``--wyoming-port``, Wyoming; or Wyoming
alone (``--no-http``), for which neither HTTP's modules nor Starlette are
loaded. It runs until SIGINT or SIGTERM, then lets what is being spoken
finish for a grace."""

from __future__ import annotations

import errno
import gc
import logging
import socket

from .serving.lifetime import Listener, ServerLife
from .serving.slot import Loader
from .serving.state import server_state
from .settings import ServerSettings
from .wyoming_server import serve_wyoming

__all__ = ["ServerSettings", "listeners", "serve"]

log = logging.getLogger("mlx_speech.server")


def listeners(settings: ServerSettings, **uvicorn_options) -> list[Listener]:
    """The protocols ``settings`` name; ``uvicorn_options`` go to HTTP's
    uvicorn config (logging)."""
    chosen: list[Listener] = []
    if settings.http:
        from .http.listener import HttpListener  # here: Wyoming alone loads no HTTP

        chosen.append(HttpListener(**uvicorn_options))
    if settings.wyoming_port is not None:
        chosen.append(serve_wyoming)
    return chosen


def serve(settings: ServerSettings, load: Loader, **uvicorn_options) -> None:
    """Serve what ``settings`` name until SIGINT or SIGTERM (a second one
    stops at once); ``load`` gives the model."""
    state = server_state(settings, load)
    life = ServerLife(state, listeners(settings, **uvicorn_options))
    state.slot.on_failure = lambda error: life.stop()
    state.slot.on_loaded = _keep_loaded_objects_from_the_collector
    life.run(signals=True)
    if state.slot.error is not None:
        raise RuntimeError(f"could not load the model: {state.slot.error}")


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
