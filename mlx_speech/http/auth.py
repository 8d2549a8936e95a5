"""The API-key guard: ASGI middleware in front of the whole app."""

from __future__ import annotations

import hmac
from collections.abc import Callable

from .errors import ApiError
from .page import PUBLIC_PATHS

OPEN_PATHS = ("/health", *PUBLIC_PATHS)  # the page asks for the key itself


class ApiKeyGuard:
    """Every route but /health and the page, the WebSocket one too, needs
    ``Authorization: Bearer KEY`` or ``x-api-key``."""

    def __init__(self, app: Callable, api_key: str):
        self._app = app
        self._key = api_key.encode()

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        guarded = scope["type"] in ("http", "websocket") and scope["path"] not in OPEN_PATHS
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

    def _allowed(self, scope: dict) -> bool:
        headers = dict(scope["headers"])
        offered = headers.get(b"x-api-key", b"")
        authorization = headers.get(b"authorization", b"")
        if authorization[:7].lower() == b"bearer ":
            offered = authorization[7:].strip()
        return hmac.compare_digest(offered, self._key)
