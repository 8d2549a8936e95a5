"""The HTTP adapter's Starlette app. Each endpoint parses, validates with
the family, submits to the engine and hands the job to the audio adapter;
what it needs is the serving core's state, held as ``app.state``; errors
take the OpenAI shape in one place (``http.errors``)."""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Callable
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from ..errors import InvalidRequest, shown
from ..serving.admission import admit, refuse_when_stopping
from ..serving.refusal import Refusal
from ..serving.shutdown import SHUTDOWN_POLL_SECONDS, STOPPING
from ..serving.slot import ModelSlot
from ..serving.state import ServerState
from ..settings import ServerSettings
from ..speech.streams import SpeechStream
from ..tts import TTS
from ..voices.store import UnknownVoice
from .adapter import AudioResponse, Delivery
from .auth import ApiKeyGuard
from .batch import Item, parse_items, run_item
from .batch import answer as batch_answer
from .bodies import read_json, read_voice_upload
from .books import (
    book_audio,
    book_captions,
    cancel_book,
    create_book,
    delete_book,
    get_book,
    list_books,
)
from .counted_responses import CountedResponses
from .errors import ApiError
from .local_only import LocalOnly
from .openapi import openapi_document
from .page import page, page_asset
from .speech_request import (
    HttpSpeech,
    RequestRules,
    parse_captioned_request,
    parse_dialogue_request,
    parse_speech_request,
)
from .speech_socket import SpeechSocket, refuse
from .voice_listing import created_voice, removed_voice, voices_listing

__all__ = ["create_http_app"]

log = logging.getLogger("mlx_speech.server")


def _rules(state: ServerState) -> RequestRules:
    settings = state.settings
    return RequestRules(
        max_ref_bytes=settings.max_ref_bytes,
        media_root=settings.allowed_local_media_path,
        default_format=settings.default_format,
    )


async def speech(request: Request) -> Response:
    return await _speak(request, parse_speech_request)


async def dialogue(request: Request) -> Response:
    """Kokoro-FastAPI's ``/dev/dialogue``: turns in their voices, one audio."""
    return await _speak(request, parse_dialogue_request)


async def captioned_speech(request: Request) -> Response:
    """Kokoro-FastAPI's ``/dev/captioned_speech``: the audio with a caption
    per segment, as JSON."""
    return await _speak(request, parse_captioned_request)


async def _speak(request: Request, parse: Callable[..., HttpSpeech]) -> Response:
    state = request.app.state
    settings: ServerSettings = state.settings
    metrics = state.metrics
    tts = state.slot.ready()
    body = await read_json(request, settings.max_body_bytes, settings.body_timeout)
    # From here to its stream's opening (whose own expectation then holds),
    # a round about to start waits a moment for this request (``Engine.expect``).
    arrived = state.engine.expect()
    try:
        parsed = await anyio.to_thread.run_sync(parse, body, _rules(state))
        admit(state)
        try:
            # Validation decodes reference audio: keep it off the event loop.
            chunks = await anyio.to_thread.run_sync(_open_stream, tts, parsed)
        except BaseException:
            metrics.request_closed()
            raise
    finally:
        arrived()
    log.debug(  # a line per request: --log-level debug
        "speech: model=%s format=%s chars=%d",
        shown(body.get("model")),  # as sent: quoted, escaped and cut short
        parsed.response_format,
        len(parsed.speech.text),
    )
    delivery = Delivery(
        response_format=parsed.response_format,
        native_rate=tts.sample_rate,
        output_rate=parsed.sample_rate or tts.sample_rate,
        mode=parsed.delivery,
        idle_timeout=settings.stream_idle_timeout,
        metrics=metrics,
        accepted_at=time.perf_counter(),
        on_close=metrics.request_closed,
        shutdown=state.shutdown,
        ignored=chunks.ignored,
        timestamps=parsed.timestamps,
    )
    return AudioResponse(chunks, delivery)


async def speech_batch(request: Request) -> Response:
    """vLLM-Omni's batch: the items run together through the engine (as many
    at once as ``--max-batch``); the batch waits in the queue as one request."""
    state = request.app.state
    tts = state.slot.ready()
    settings = state.settings
    body = await read_json(request, settings.max_body_bytes, settings.body_timeout)
    items = await anyio.to_thread.run_sync(parse_items, body, _rules(state))
    admit(state)
    try:
        for item in items:
            if item.request is not None:
                await anyio.to_thread.run_sync(_open_item, tts, item)
        await _run_items(request, items, tts.sample_rate)
    finally:
        for item in items:
            if item.stream is not None:
                item.stream.cancel()
        state.metrics.request_closed()
    log.debug("speech batch: %d items", len(items))
    return JSONResponse(batch_answer(items))


def _open_item(tts: TTS, item: Item) -> None:
    try:
        item.stream = _open_stream(tts, item.request)
    except ApiError as error:
        item.fail(error.message)


async def _run_items(request: Request, items: list[Item], native_rate: int) -> None:
    limiter = anyio.CapacityLimiter(request.app.state.settings.max_batch)

    async def run(item: Item) -> None:
        await anyio.to_thread.run_sync(
            run_item, item, native_rate, limiter=limiter, abandon_on_cancel=True
        )

    async with anyio.create_task_group() as group:
        group.start_soon(_stop_items_when_abandoned, request, group.cancel_scope)
        async with anyio.create_task_group() as running:
            for item in items:
                if item.stream is not None:
                    running.start_soon(run, item)
        group.cancel_scope.cancel()
    for item in items:
        if item.result is None:
            item.fail(STOPPING if request.app.state.shutdown.overdue else "cancelled")


async def _stop_items_when_abandoned(request: Request, scope: anyio.CancelScope) -> None:
    """The client left, or the server must stop: end the items' work."""
    shutdown = request.app.state.shutdown
    while not (shutdown.overdue or await request.is_disconnected()):
        await anyio.sleep(SHUTDOWN_POLL_SECONDS)
    scope.cancel()


def _open_stream(tts: TTS, parsed: HttpSpeech) -> SpeechStream:
    """Resolve the request, validate it with the family and get the job's
    stream (with captions, the text spoken segment by segment); an unknown
    voice is a 404, other bad requests 400s."""
    speech = parsed.speech
    try:
        if parsed.captions is not None:
            return tts.open_text([speech.text], speech, split=parsed.captions)
        return tts.open(speech)
    except ValueError as error:
        raise ApiError.invalid(error) from None


async def speech_socket_over_http(request: Request) -> Response:
    """The socket's route asked as plain HTTP: say how to reach it."""
    raise ApiError(
        426,
        "this route is a WebSocket (vLLM-Omni's streaming protocol): connect "
        "with ws:// (Upgrade: websocket)",
        headers={"Upgrade": "websocket", "Connection": "Upgrade"},
    )


async def speech_socket(websocket: WebSocket) -> None:
    state: ServerState = websocket.app.state
    try:
        refuse_when_stopping(state)
        tts = state.slot.ready()
    except Refusal as refusal:
        await refuse(websocket, ApiError.refused(refusal))
        return
    await SpeechSocket(websocket, tts, state, _rules(state)).run()


async def list_voices(request: Request) -> Response:
    state = request.app.state
    presets = state.slot.ready().voices
    saved = await anyio.to_thread.run_sync(state.store.list)
    return JSONResponse(voices_listing(presets, saved))


async def add_voice(request: Request) -> Response:
    state = request.app.state
    tts = state.slot.ready()
    settings = state.settings
    upload = await read_voice_upload(request, settings.max_ref_bytes, settings.body_timeout)
    name = upload.name
    if name.lower() in {preset.lower() for preset in tts.voices}:
        message = f"{shown(name)} is a preset voice of this model"
        raise ApiError(409, message, param="name")
    try:
        voice = await anyio.to_thread.run_sync(
            state.store.add, name, upload.clip, upload.ref_text
        )
    except InvalidRequest as error:
        raise ApiError(400, str(error), param=error.param) from None
    except OSError as error:
        if error.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        log.warning("no space left to save voice %s", shown(name))
        message = (
            "no space left on the server's disk to save the voice; nothing was changed"
        )
        raise ApiError(507, message) from None
    log.info("saved voice %s (%.1f s)", voice.name, voice.duration_s)
    return JSONResponse(created_voice(voice), status_code=201)


async def remove_voice(request: Request) -> Response:
    name = request.path_params["name"]
    try:
        await anyio.to_thread.run_sync(request.app.state.store.remove, name)
    except UnknownVoice:
        message = f"no saved voice named {shown(name)}"
        raise ApiError(404, message, param="name") from None
    return JSONResponse(removed_voice(name))


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
    Route("/v1/audio/speech", speech, methods=["POST"]),
    Route("/v1/audio/speech/batch", speech_batch, methods=["POST"]),
    Route("/dev/captioned_speech", captioned_speech, methods=["POST"]),
    Route("/dev/dialogue", dialogue, methods=["POST"]),
    WebSocketRoute("/v1/audio/speech/stream", speech_socket),
    Route("/v1/audio/speech/stream", speech_socket_over_http, methods=["GET"]),
    Route("/v1/audio/voices", list_voices, methods=["GET"]),
    Route("/v1/audio/voices", add_voice, methods=["POST"]),
    Route("/v1/audio/voices/{name}", remove_voice, methods=["DELETE"]),
    Route("/v1/audio/books", create_book, methods=["POST"]),
    Route("/v1/audio/books", list_books, methods=["GET"]),
    Route("/v1/audio/books/{id}", get_book, methods=["GET"]),
    Route("/v1/audio/books/{id}", delete_book, methods=["DELETE"]),
    Route("/v1/audio/books/{id}/audio", book_audio, methods=["GET"]),
    Route("/v1/audio/books/{id}/captions", book_captions, methods=["GET"]),
    Route("/v1/audio/books/{id}/cancel", cancel_book, methods=["POST"]),
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
