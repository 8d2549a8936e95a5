"""The speech routes: OpenAI's ``/v1/audio/speech``, vLLM-Omni's batch,
Kokoro-FastAPI's dialogue and captioned speech. Each parses its body
(``request.py``), is admitted, opens its stream through ``TTS`` and hands
it to ``response.py``."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ...errors import shown
from ...serving.admission import admit
from ...serving.shutdown import SHUTDOWN_POLL_SECONDS, STOPPING
from ...settings import ServerSettings
from ...speech.streams import SpeechStream
from ...tts import TTS
from ..bodies import read_json
from ..errors import ApiError
from .batch import Item, parse_items, run_item
from .batch import answer as batch_answer
from .request import (
    HttpSpeech,
    parse_captioned_request,
    parse_dialogue_request,
    parse_speech_request,
    request_rules,
)
from .response import AudioResponse, Delivery

log = logging.getLogger("mlx_speech.server")


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
        parsed = await anyio.to_thread.run_sync(parse, body, request_rules(state.settings))
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
    items = await anyio.to_thread.run_sync(parse_items, body, request_rules(state.settings))
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


ROUTES = [
    Route("/v1/audio/speech", speech, methods=["POST"]),
    Route("/v1/audio/speech/batch", speech_batch, methods=["POST"]),
    Route("/dev/captioned_speech", captioned_speech, methods=["POST"]),
    Route("/dev/dialogue", dialogue, methods=["POST"]),
]
