"""The API-key guard: ASGI middleware in front of the whole app."""

from __future__ import annotations

import hmac
from collections.abc import Callable

from .errors import ApiError
from .page import PUBLIC_PATHS

OPEN_PATHS = ("/health", *PUBLIC_PATHS)  # the page asks for the key itself
# What ``--public-listings`` opens: Open WebUI lists models and voices
# without sending its key.
LISTING_PATHS = ("/v1/models", "/v1/audio/models", "/v1/audio/voices")


class ApiKeyGuard:
    """Every route but /health and the page, the WebSocket one too, needs
    ``Authorization: Bearer KEY`` or ``x-api-key``; with ``public_listings``,
    reading the listings does not."""

    def __init__(self, app: Callable, api_key: str, public_listings: bool = False):
        self._app = app
        self._key = api_key.encode()
        self._public_listings = public_listings

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        guarded = scope["type"] in ("http", "websocket") and not self._open(scope)
        if not guarded or self._allowed(scope):
            await self._app(scope, receive, send)
            return
        error = ApiError(
            401, "a valid API key is required", headers={"www-authenticate": "Bearer"}
        )
        if scope["type"] == "websocket":
            await error.refuse_socket(scope, receive, send)
        else:
            await error.response()(scope, receive, send)

    def _open(self, scope: dict) -> bool:
        if scope["path"] in OPEN_PATHS:
            return True
        return (
            self._public_listings
            and scope["path"] in LISTING_PATHS
            and scope.get("method") in ("GET", "HEAD")
        )

    def _allowed(self, scope: dict) -> bool:
        headers = dict(scope["headers"])
        offered = headers.get(b"x-api-key", b"")
        authorization = headers.get(b"authorization", b"")
        if authorization[:7].lower() == b"bearer ":
            offered = authorization[7:].strip()
        return hmac.compare_digest(offered, self._key)
