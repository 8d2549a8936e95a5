"""The HTTP adapter's Starlette app: the routes of each endpoint group
(``speech/``, ``socket/``, ``voices/``, ``books/``) with the server's own
(models, health, metrics, this API's description, the page), what they
need held as ``app.state`` (the serving core's state), and errors in the
OpenAI shape in one place (``http.errors``)."""

from __future__ import annotations

import logging
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from ..serving.refusal import Refusal
from ..serving.slot import ModelSlot
from ..serving.state import ServerState
from .auth import ApiKeyGuard
from .books.endpoints import ROUTES as books_routes
from .counted_responses import CountedResponses
from .errors import ApiError
from .local_only import LocalOnly
from .openapi import openapi_document
from .page import page, page_asset
from .socket.endpoints import ROUTES as socket_routes
from .speech.endpoints import ROUTES as speech_routes
from .voices.endpoints import ROUTES as voices_routes

__all__ = ["create_http_app"]

log = logging.getLogger("mlx_speech.server")


async def models(request: Request) -> Response:
    """OpenAI's model list; ``created`` is when this server started."""
    slot: ModelSlot = request.app.state.slot
    entry: dict[str, Any] = {
        "id": slot.id,
        "object": "model",
        "created": request.app.state.started,
        "owned_by": "mlx-speech",
    }
    if slot.tts is not None:
        entry.update(
            family=slot.tts.family,
            sample_rate=slot.tts.sample_rate,
            streaming=slot.tts.streaming,
            voices=slot.tts.voices,
        )
    return JSONResponse({"object": "list", "data": [entry]})


async def audio_models(request: Request) -> Response:
    """The speech models, as Open WebUI discovers them (``models[i]["id"]``)."""
    slot: ModelSlot = request.app.state.slot
    return JSONResponse({"models": [{"id": slot.id, "name": slot.id}]})


async def health(request: Request) -> Response:
    """The model's state and each protocol's listener; 503 while the model is
    not ready or a listener has stopped, so a supervisor can restart it."""
    state = request.app.state
    slot: ModelSlot = state.slot
    listeners = dict(state.listeners)
    down = [name for name, status in listeners.items() if status != "serving"]
    if slot.error is not None:
        answer = {"status": "failed", "error": str(slot.error)}
    elif down:
        names = " and ".join(down)
        answer = {"status": "failed", "error": f"the {names} listener is not serving"}
    elif slot.tts is None:
        answer = {"status": "loading"}
    else:
        tts = slot.tts
        answer = {
            "status": "ok",
            "model": slot.id,
            "backend": tts.backend,
            "device": tts.device,
        }
    status_code = 200 if answer["status"] == "ok" else 503
    return JSONResponse({**answer, "listeners": listeners}, status_code=status_code)


async def prometheus(request: Request) -> Response:
    state = request.app.state
    tts = state.slot.tts
    holding, _ = state.engine.load
    text = state.metrics.render(
        holding=holding, parked=state.engine.parked, counters=tts.stats() if tts else {}
    )
    return PlainTextResponse(text, media_type="text/plain; version=0.0.4")


async def openapi(request: Request) -> Response:
    return JSONResponse(openapi_document(request.app.state.settings))


ROUTES = [
    *speech_routes,
    *socket_routes,
    *voices_routes,
    *books_routes,
    Route("/v1/models", models, methods=["GET"]),
    Route("/v1/audio/models", audio_models, methods=["GET"]),
    Route("/health", health, methods=["GET"]),
    Route("/metrics", prometheus, methods=["GET"]),
    Route("/openapi.json", openapi, methods=["GET"]),
    Route("/", page, methods=["GET"]),
    Route("/page/{name}", page_asset, methods=["GET"]),
]


def create_http_app(state: ServerState) -> Starlette:
    """The app serving ``state``; the server's life (``serving.lifetime``)
    runs it, so it has no lifespan of its own."""
    settings = state.settings
    middleware = [
        Middleware(CountedResponses, metrics=state.metrics),
        Middleware(
            LocalOnly,
            allowed_hosts=settings.allowed_hosts,
            cors_origins=settings.cors_origins,
        ),
    ]
    if settings.cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(settings.cors_origins),
                allow_methods=["GET", "POST", "DELETE"],
                allow_headers=["authorization", "content-type", "x-api-key"],
                expose_headers=["x-audio-sample-rate", "x-audio-channels", "x-audio-bits"],
            )
        )
    if settings.api_key:
        middleware.append(
            Middleware(
                ApiKeyGuard,
                api_key=settings.api_key,
                public_listings=settings.public_listings,
            )
        )
    app = Starlette(
        routes=ROUTES,
        middleware=middleware,
        exception_handlers={
            ApiError: _api_error,
            Refusal: _refused,
            HTTPException: _http_error,
            Exception: _internal_error,
        },
    )
    app.state = state  # typed: ``request.app.state`` is the ServerState
    return app


async def _api_error(request: Request, error: ApiError) -> Response:
    return error.response()


async def _refused(request: Request, refusal: Refusal) -> Response:
    return ApiError.refused(refusal).response()


async def _http_error(request: Request, error: HTTPException) -> Response:
    message = "no such route" if error.status_code == 404 else str(error.detail)
    # e.g. a 405's Allow, which names the methods the route takes
    return ApiError(error.status_code, message, headers=error.headers).response()


async def _internal_error(request: Request, error: Exception) -> Response:
    """A bug, not a bad request: the JSON shape still, the traceback in the
    log. Starlette answers it outside the middleware, so it is counted here."""
    request.app.state.metrics.response(500)
    message = "internal server error; the server log has the details"
    return ApiError(500, message).response()
