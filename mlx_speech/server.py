"""``mlx-speech serve``: the Starlette app. Routes parse, validate, submit to
the engine and hand the job to the audio adapter; errors take the OpenAI
shape in one place."""

from __future__ import annotations

import hmac
import json
import logging
import threading
import time
from collections.abc import Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from .engine import DEFAULT_MAX_BATCH, ChunkStream, shared_engine
from .errors import InvalidRequest
from .http.adapter import AudioResponse, Delivery
from .http.errors import ApiError
from .http.metrics import Metrics
from .http.speech_request import RequestRules, SpeechRequest, parse_speech_request
from .tts import TTS
from .voice_store import UnknownVoice, VoiceExists, VoiceStore

log = logging.getLogger("mlx_speech.server")


@dataclass(frozen=True)
class ServerSettings:
    model: str
    api_key: str | None = None
    max_queue: int = 16
    max_batch: int = DEFAULT_MAX_BATCH  # requests stepped together per forward
    max_input_chars: int = 4096
    max_body_bytes: int = 30 * 1024 * 1024
    max_ref_bytes: int = 20 * 1024 * 1024
    stream_idle_timeout: float = 30.0
    retry_after_seconds: int = 2
    voices_dir: Path | None = None  # None: the per-user default
    allowed_local_media_path: Path | None = None  # None: file:// refused


class ModelSlot:
    """The model, loaded in the background so /health can answer meanwhile."""

    def __init__(self, model: str, load: Callable[[str], TTS]):
        self.name = model
        self.tts: TTS | None = None
        self.error: Exception | None = None
        self._thread = threading.Thread(target=self._load, args=(load,), daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _load(self, load: Callable[[str], TTS]) -> None:
        log.info("loading %s", self.name)
        started = time.perf_counter()
        try:
            self.tts = load(self.name)
        except Exception as error:  # noqa: BLE001 - reported by /health and requests
            self.error = error
            log.error("cannot load %s: %s", self.name, error)
            return
        log.info(
            "loaded %s (%s, %d Hz) in %.1f s",
            self.name,
            self.tts.family,
            self.tts.sample_rate,
            time.perf_counter() - started,
        )

    def ready(self) -> TTS:
        if self.tts is None:
            detail = f"failed to load: {self.error}" if self.error else "still loading"
            raise ApiError(503, f"the model is {detail}", headers={"retry-after": "5"})
        return self.tts


def create_app(settings: ServerSettings, load: Callable[[str], TTS]) -> Starlette:
    slot = ModelSlot(settings.model, load)
    metrics = Metrics()
    store = VoiceStore(settings.voices_dir)
    store.sweep()

    def find_saved_voice(name: str):
        try:
            return store.get(name)
        except UnknownVoice:
            return None

    async def speech(request: Request) -> Response:
        tts = slot.ready()
        body = await _json_body(request, settings.max_body_bytes)
        rules = RequestRules(
            max_input_chars=settings.max_input_chars,
            max_ref_bytes=settings.max_ref_bytes,
            presets=tuple(tts.voices),
            find_saved_voice=find_saved_voice,
            media_root=settings.allowed_local_media_path,
        )
        parsed = await anyio.to_thread.run_sync(parse_speech_request, body, rules)
        waiting = metrics.in_flight - tts.max_active_jobs
        if waiting >= settings.max_queue:
            raise ApiError(
                429,
                f"{waiting} requests are already waiting; try again shortly",
                headers={"retry-after": str(settings.retry_after_seconds)},
            )
        metrics.request_opened()  # before the await below, so the queue bound holds
        try:
            # Validation decodes reference audio: keep it off the event loop.
            chunks = await anyio.to_thread.run_sync(_open_stream, tts, parsed)
        except BaseException:
            metrics.request_closed()
            raise
        log.info(
            "speech: model=%s format=%s chars=%d",
            body.get("model"),
            parsed.response_format,
            len(parsed.text),
        )

        mode = ("sse" if parsed.sse else "audio") if parsed.stream else "buffered"
        delivery = Delivery(
            response_format=parsed.response_format,
            native_rate=tts.sample_rate,
            output_rate=parsed.sample_rate or tts.sample_rate,
            mode=mode,
            idle_timeout=settings.stream_idle_timeout,
            metrics=metrics,
            accepted_at=time.perf_counter(),
            on_close=metrics.request_closed,
        )
        return AudioResponse(chunks, delivery)

    async def voices(request: Request) -> Response:
        presets = [{"name": name, "kind": "preset"} for name in slot.ready().voices]
        saved = await anyio.to_thread.run_sync(store.list)
        return JSONResponse({"voices": presets + [voice.describe() for voice in saved]})

    async def add_voice(request: Request) -> Response:
        tts = slot.ready()
        name, clip, ref_text = await _voice_upload(request, settings.max_ref_bytes)
        if name.lower() in {preset.lower() for preset in tts.voices}:
            raise ApiError(409, f"{name!r} is a preset voice of this model", param="name")
        try:
            voice = await anyio.to_thread.run_sync(store.add, name, clip, ref_text)
        except VoiceExists:
            raise ApiError(
                409, f"a voice named {name!r} already exists", param="name"
            ) from None
        except InvalidRequest as error:
            raise ApiError(400, str(error), param=error.param) from None
        log.info("saved voice %s (%.1f s)", voice.name, voice.duration_s)
        return JSONResponse(voice.describe(), status_code=201)

    async def remove_voice(request: Request) -> Response:
        name = request.path_params["name"]
        try:
            await anyio.to_thread.run_sync(store.remove, name)
        except UnknownVoice:
            raise ApiError(404, f"no saved voice named {name!r}", param="name") from None
        return Response(status_code=204)

    async def models(request: Request) -> Response:
        entry: dict[str, Any] = {
            "id": slot.name,
            "object": "model",
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

    async def health(request: Request) -> Response:
        if slot.tts is None:
            status = "failed" if slot.error else "loading"
            return JSONResponse({"status": status}, status_code=503)
        return JSONResponse({"status": "ok", "model": slot.name})

    async def prometheus(request: Request) -> Response:
        counters = slot.tts.stats() if slot.tts is not None else {}
        return PlainTextResponse(
            metrics.render(
                generating_at_once=slot.tts.max_active_jobs if slot.tts else 0,
                counters=counters,
            ),
            media_type="text/plain; version=0.0.4",
        )

    app = Starlette(
        routes=[
            Route("/v1/audio/speech", speech, methods=["POST"]),
            Route("/v1/audio/voices", voices, methods=["GET"]),
            Route("/v1/audio/voices", add_voice, methods=["POST"]),
            Route("/v1/audio/voices/{name}", remove_voice, methods=["DELETE"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Route("/metrics", prometheus, methods=["GET"]),
        ],
        exception_handlers={ApiError: _api_error, HTTPException: _http_error},
        lifespan=_lifespan(slot, settings.max_batch, metrics),
    )
    app.state.metrics = metrics
    app.state.slot = slot
    if settings.api_key:
        return ApiKeyGuard(app, settings.api_key, metrics)
    return app


def _lifespan(slot: ModelSlot, max_batch: int, metrics: Metrics):
    @asynccontextmanager
    async def lifespan(app: Starlette):
        engine = shared_engine()
        before = engine.max_batch
        engine.configure_batching(max_batch)
        engine.forward_observers.append(metrics.forward)
        slot.start()
        try:
            yield
        finally:
            engine.forward_observers.remove(metrics.forward)
            engine.configure_batching(before)

    return lifespan


def _open_stream(tts: TTS, parsed: SpeechRequest) -> ChunkStream:
    """Validate with the family and get the job's stream; bad requests are 400s."""
    try:
        return tts.stream(parsed.text, voice=parsed.voice, **parsed.options)
    except InvalidRequest as error:
        param = "input" if error.param == "text" else error.param
        raise ApiError(400, str(error), param=param) from None
    except ValueError as error:
        raise ApiError(400, str(error)) from None


async def _json_body(request: Request, limit: int) -> Any:
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != "application/json":
        raise ApiError(415, "send the request as JSON (Content-Type: application/json)")
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"the request body is larger than {limit} bytes")
    body = bytearray()
    async for part in request.stream():
        body.extend(part)
        if len(body) > limit:
            raise ApiError(413, f"the request body is larger than {limit} bytes")
    try:
        return json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ApiError(
            400, f"the request body is not valid JSON: {error}", param="body"
        ) from None


async def _voice_upload(request: Request, max_bytes: int) -> tuple[str, bytes, str | None]:
    content_type = request.headers.get("content-type", "")
    if not content_type.lower().startswith("multipart/form-data"):
        raise ApiError(415, "upload voices as multipart/form-data")
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > max_bytes + 64 * 1024:
        raise ApiError(
            413, f"the clip is larger than {max_bytes} bytes", param="audio_sample"
        )
    try:
        form = await request.form(max_files=1, max_fields=8, max_part_size=max_bytes)
    except MultiPartException as error:
        raise ApiError(400, f"bad multipart body: {error.message}") from None
    upload = form.get("audio_sample")
    if not isinstance(upload, UploadFile):
        raise ApiError(400, "audio_sample (a file) is required", param="audio_sample")
    clip = await upload.read(max_bytes + 1)
    if len(clip) > max_bytes:
        raise ApiError(
            413, f"the clip is larger than {max_bytes} bytes", param="audio_sample"
        )
    name = form.get("name")
    if not isinstance(name, str):
        raise ApiError(400, "name is required", param="name")
    ref_text = form.get("ref_text")
    if ref_text is not None and not isinstance(ref_text, str):
        raise ApiError(400, "ref_text must be text", param="ref_text")
    return name, clip, ref_text


async def _api_error(request: Request, error: ApiError) -> Response:
    request.app.state.metrics.response(error.status)
    return error.response()


async def _http_error(request: Request, error: HTTPException) -> Response:
    message = "no such route" if error.status_code == 404 else str(error.detail)
    return await _api_error(request, ApiError(error.status_code, message))


class ApiKeyGuard:
    """Every route but /health needs ``Authorization: Bearer KEY`` or ``x-api-key``."""

    def __init__(self, app: Callable, api_key: str, metrics: Metrics):
        self._app = app
        self._key = api_key.encode()
        self._metrics = metrics

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or scope["path"] == "/health" or self._allowed(scope):
            await self._app(scope, receive, send)
            return
        self._metrics.response(401)
        error = ApiError(
            401, "a valid API key is required", headers={"www-authenticate": "Bearer"}
        )
        await error.response()(scope, receive, send)

    def _allowed(self, scope: dict) -> bool:
        headers = dict(scope["headers"])
        offered = headers.get(b"x-api-key", b"")
        authorization = headers.get(b"authorization", b"")
        if authorization[:7].lower() == b"bearer ":
            offered = authorization[7:].strip()
        return hmac.compare_digest(offered, self._key)
