"""Every HTTP response counted by status, in front of everything."""

from __future__ import annotations

from ..serving.metrics import Metrics


class CountedResponses:
    """ASGI middleware in front of everything: counts every response by
    status, whichever layer answered (routes, errors, auth, the server)."""

    def __init__(self, app, metrics: Metrics):
        self._app = app
        self._metrics = metrics

    async def __call__(self, scope: dict, receive, send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return

        async def counted(message: dict) -> None:
            if message["type"] == "http.response.start":
                self._metrics.response(message["status"])
            await send(message)

        await self._app(scope, receive, counted)
