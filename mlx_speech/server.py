"""``mlx-speech serve``'s server: the serving core (``serving``) with its
protocol adapters beside each other: HTTP (with the WebSocket and the page)
and, with ``--wyoming-port``, Wyoming. (``--no-http`` runs Wyoming on the
core alone, without this module: ``cli``.)"""

from __future__ import annotations

from starlette.applications import Starlette

from .http.app import create_http_app, uvicorn_config
from .serving.lifetime import Listener
from .serving.slot import Loader, ModelSlot
from .serving.state import ServerState, server_state
from .settings import ServerSettings
from .wyoming_server import serve_wyoming

__all__ = [
    "ModelSlot",
    "ServerSettings",
    "ServerState",
    "create_app",
    "server_state",
    "uvicorn_config",
]


def other_listeners(settings: ServerSettings) -> list[Listener]:
    """The protocols served beside HTTP."""
    return [serve_wyoming] if settings.wyoming_port is not None else []


def create_app(settings: ServerSettings, load: Loader) -> Starlette:
    """The HTTP app for ``settings``, with the other protocols it names
    listening beside it for the app's life; ``load`` gives the model."""
    return create_http_app(server_state(settings, load), other_listeners(settings))
