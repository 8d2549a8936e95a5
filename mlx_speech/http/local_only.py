"""Keeping web pages from driving the local server.

A page the user visits may send requests to 127.0.0.1: simple cross-origin
requests (a multipart POST needs no preflight) and, through DNS rebinding,
requests whose ``Host`` is the attacker's name. So a request must name this
server in ``Host`` (an IP address, ``localhost``, or an allowed host), and a
request that changes something must come from no page or from this server's
own pages, unless its ``Origin`` was allowed (``--cors-origin``). WebSocket
handshakes are held to the same rules.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable

from .errors import ApiError

log = logging.getLogger("mlx_speech.server")

LOOPBACK_NAMES = ("localhost",)
# A refused Host is said in the log once a name, and only for so many names:
# a client in Docker (Open WebUI) sees its 400 where its user never looks.
LOGGED_HOSTS = 32
CHANGING_METHODS = ("POST", "PUT", "PATCH", "DELETE")


def host_name(host: str) -> str:
    """``Host`` without its port, brackets and case: ``[::1]:8000`` → ``::1``."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class LocalOnly:
    """ASGI middleware: ``Host`` must name this server, and state-changing
    requests from another origin are refused unless it is allowed."""

    def __init__(
        self, app: Callable, allowed_hosts: tuple[str, ...], cors_origins: tuple[str, ...]
    ):
        self._app = app
        self._hosts = {name.lower() for name in (*LOOPBACK_NAMES, *allowed_hosts)}
        self._origins = {origin.rstrip("/").lower() for origin in cors_origins}
        self._logged: set[str] = set()  # the refused Host names said in the log

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        error = self._refusal(scope) if scope["type"] in ("http", "websocket") else None
        if error is None:
            await self._app(scope, receive, send)
        elif scope["type"] == "websocket":
            await error.refuse_socket(scope, receive, send)
        else:
            await error.response()(scope, receive, send)

    def _refusal(self, scope: dict) -> ApiError | None:
        headers = {key.lower(): value for key, value in scope["headers"]}
        host = headers.get(b"host", b"").decode("latin-1")
        name = host_name(host)
        if not (_is_ip(name) or name in self._hosts):
            self._log_refused(name)
            return ApiError(
                400,
                f"unknown Host {host[:64]!r}; start the server with --allowed-host "
                "NAME to serve under another name",
            )
        origin = headers.get(b"origin")
        if origin is None or not self._changes_state(scope):
            return None
        origin = origin.decode("latin-1").rstrip("/").lower()
        if origin in self._origins or "*" in self._origins:
            return None
        if origin.split("://", 1)[-1] == host.lower():  # this server's own page
            return None
        return ApiError(
            403,
            f"requests from the page at {origin[:64]!r} are refused; start the server "
            "with --cors-origin ORIGIN to allow a page",
        )

    def _log_refused(self, name: str) -> None:
        if name in self._logged or len(self._logged) >= LOGGED_HOSTS:
            return
        self._logged.add(name)
        log.warning(
            "refused a request for Host %r (400): to serve clients that call this "
            "server by that name (Open WebUI in Docker calls it host.docker.internal), "
            "start it with --allowed-host %s, and --host 0.0.0.0 for other machines",
            name[:64],
            name[:64],
        )

    @staticmethod
    def _changes_state(scope: dict) -> bool:
        """A WebSocket session spends the machine's time: it counts as a change
        (browsers open sockets to any origin; no CORS check protects them)."""
        return scope["type"] == "websocket" or scope["method"] in CHANGING_METHODS
