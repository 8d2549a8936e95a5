"""The ASGI audio adapter: a job's chunks → a streamed body, SSE events, or
one buffered body; a text stream's (``captions``) with each segment's
caption: an SSE event, or Kokoro-FastAPI's captioned JSON (``captioned``).

The next chunk is requested only after the previous send completed
(backpressure). A client that disconnects, a send that fails, task
cancellation, or a send that makes no progress for ``idle_timeout`` seconds
all cancel the job, which releases the worker at its next frame.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import numpy as np

from ...audio.containers import StreamEncoder
from ...audio.events import Seam, events_of
from ...audio.formats import FORMATS, encode_whole
from ...audio.resample import StreamingResampler
from ...audio.samples import Audio
from ...serving.metrics import Metrics
from ...serving.shutdown import END_EARLY_SECONDS, SHUTDOWN_POLL_SECONDS, STOPPING, Shutdown
from ...speech.streams import SpeechStream
from ...text.captions import Caption, Timeline
from ...text.segment_marks import SegmentEnded, SegmentStarted
from ..errors import ApiError
from .captioned import CaptionedLines, caption_event, error_line
from .delivery import DeliveryMode

log = logging.getLogger("mlx_speech.server")


class IdleClient(Exception):
    """The client accepted no data for the idle timeout."""


@dataclass
class Delivery:
    """How a response is shaped and where its numbers go."""

    response_format: str
    native_rate: int
    output_rate: int
    mode: DeliveryMode
    idle_timeout: float
    metrics: Metrics
    accepted_at: float
    on_close: Callable[[], None]
    shutdown: Shutdown
    ignored: tuple[str, ...] = ()  # request fields the model did not use
    timestamps: bool = True  # captioned: list the captions (Kokoro's return_timestamps)


class AudioResponse:
    def __init__(self, chunks: SpeechStream, delivery: Delivery):
        self._chunks = chunks
        # a text stream's events (its chunks, and where each segment ends)
        # or a paused text's (its chunks, and the seams between its parts)
        self._items = events_of(chunks)
        self._delivery = delivery
        self._audio_seconds = 0.0
        self._first_audio_at: float | None = None
        self._started = False  # the response's headers went out
        self._encoder: StreamEncoder | None = None
        self._channels = 1  # of the audio, known from its first chunk

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._cancel_on_disconnect, receive, group.cancel_scope)
                with anyio.CancelScope() as delivering:
                    group.start_soon(self._stop_when_overdue, delivering)
                    try:
                        await self._deliver(scope, send)
                    except IdleClient:
                        log.warning(
                            "client read nothing for %.0f s; stream cancelled",
                            self._delivery.idle_timeout,
                        )
                if delivering.cancelled_caught:
                    with anyio.move_on_after(END_EARLY_SECONDS):
                        await self._end_early(scope, send)
                group.cancel_scope.cancel()
        finally:
            self._chunks.cancel()
            self._delivery.on_close()

    async def _stop_when_overdue(self, delivering: anyio.CancelScope) -> None:
        while not self._delivery.shutdown.overdue:
            await anyio.sleep(SHUTDOWN_POLL_SECONDS)
        delivering.cancel()

    async def _end_early(self, scope: dict, send: Callable) -> None:
        """The server is stopping and this stream ran out of time: end it as
        its format ends (closing the container; an SSE error event)."""
        log.info("server stopping: a stream ended early")
        if not self._started:
            error = ApiError(503, STOPPING, headers={"retry-after": "5"})
            await error.response()(scope, None, send)
            return
        if self._delivery.mode is DeliveryMode.SSE:
            message = {"message": STOPPING, "type": "server_error"}
            await self._event(send, {"type": "speech.audio.error", "error": message})
        elif self._delivery.mode is DeliveryMode.CAPTIONED:
            await self._send(send, error_line(STOPPING))
        elif self._encoder is not None:
            await self._send(send, self._encoder.finish())
        await self._send(send, b"", more=False)

    async def _cancel_on_disconnect(
        self, receive: Callable, scope: anyio.CancelScope
    ) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self._chunks.cancel()
        scope.cancel()

    async def _next_chunk(self) -> Any:
        """The next ``Audio`` chunk, or a text stream's ``SegmentEnded``."""
        chunk = await anyio.to_thread.run_sync(self._next_item, abandon_on_cancel=True)
        if isinstance(chunk, Audio) and self._first_audio_at is None:
            self._first_audio_at = time.perf_counter()
            self._delivery.metrics.first_audio(
                self._first_audio_at - self._delivery.accepted_at
            )
        return chunk

    def _next_item(self) -> Any:
        for item in self._items:
            if not isinstance(item, SegmentStarted):
                return item
        return None

    async def _pcm(self, first: Any) -> AsyncIterator[np.ndarray | Caption]:
        """The job's audio at the output rate, starting with ``first``; a
        text stream's segments are each resampled on their own and followed
        by their ``Caption``, counted at the output rate (so exact)."""
        delivery = self._delivery
        resampler = StreamingResampler(delivery.native_rate, delivery.output_rate)
        timeline = Timeline(delivery.output_rate)
        item = first
        while item is not None:
            if isinstance(item, SegmentEnded | Seam):
                yield self._counted(timeline, resampler.restart())
                if isinstance(item, SegmentEnded):
                    yield timeline.end_segment(item)
            else:
                self._audio_seconds += len(item.samples) / delivery.native_rate
                yield self._counted(timeline, resampler.process(item.samples))
            item = await self._next_chunk()
        yield resampler.flush()

    @staticmethod
    def _counted(timeline: Timeline, samples: np.ndarray) -> np.ndarray:
        timeline.count(len(samples))
        return samples

    async def _send(self, send: Callable, body: bytes, more: bool = True) -> None:
        if not body and more:
            return
        with anyio.move_on_after(self._delivery.idle_timeout) as waiting:
            await send({"type": "http.response.body", "body": body, "more_body": more})
        if waiting.cancelled_caught:
            raise IdleClient

    async def _start(
        self, send: Callable, content_type: str, extra: dict[str, str]
    ) -> None:
        headers = {
            "content-type": content_type,
            "cache-control": "no-cache",
            "x-audio-sample-rate": str(self._delivery.output_rate),
            "x-audio-channels": str(self._channels),
            **extra,
        }
        if self._delivery.response_format == "pcm":
            headers["x-audio-bits"] = "16"
        if self._delivery.ignored:
            ignored = ", ".join(self._delivery.ignored)
            # a header is ASCII: other characters of a name go as \xe9, \u4e2d
            ascii_only = ignored.encode("ascii", "backslashreplace").decode()
            headers["x-mlx-speech-ignored"] = ascii_only
        self._started = True
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(k.encode(), v.encode()) for k, v in headers.items()],
            }
        )

    async def _deliver(self, scope: dict, send: Callable) -> None:
        try:
            first = await self._next_chunk()  # early failures still get a JSON error
        except Exception as error:  # noqa: BLE001 - mapped to the error shape
            await self._send_error(scope, send, error)
            return
        started = time.perf_counter()
        if isinstance(first, Audio):
            self._channels = first.channels
        deliver = {
            DeliveryMode.AUDIO: self._stream_audio,
            DeliveryMode.SSE: self._stream_events,
            DeliveryMode.BUFFERED: self._send_buffered,
            DeliveryMode.CAPTIONED: self._stream_captioned,
            DeliveryMode.CAPTIONED_WHOLE: self._send_captioned_whole,
        }[self._delivery.mode]
        await deliver(send, first)
        self._delivery.metrics.finished(time.perf_counter() - started, self._audio_seconds)

    async def _send_error(self, scope: dict, send: Callable, error: Exception) -> None:
        status = 400 if isinstance(error, ValueError) else 500
        log.warning("speech request failed before audio: %s", error)
        response = ApiError(status, str(error) or type(error).__name__).response()
        await response(scope, None, send)

    async def _stream_audio(self, send: Callable, first: Any) -> None:
        encoder = self._stream_encoder()
        self._encoder = encoder
        await self._start(send, FORMATS[encoder.response_format].content_type, {})
        await self._send(send, encoder.start())
        async for samples in self._audio_only(first):
            await self._send(send, encoder.encode(samples))
        await self._send(send, encoder.finish())
        await self._send(send, b"", more=False)

    async def _audio_only(self, first: Any) -> AsyncIterator[np.ndarray]:
        async for part in self._pcm(first):
            if not isinstance(part, Caption):
                yield part

    def _stream_encoder(self) -> StreamEncoder:
        delivery = self._delivery
        return StreamEncoder(delivery.response_format, delivery.output_rate, self._channels)

    async def _send_buffered(self, send: Callable, first: Any) -> None:
        parts = [samples async for samples in self._audio_only(first)]
        body = self._whole_file(parts)
        content_type = FORMATS[self._delivery.response_format].content_type
        await self._start(send, content_type, {"content-length": str(len(body))})
        await self._send(send, body, more=False)

    def _whole_file(self, parts: list[np.ndarray]) -> bytes:
        samples = np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)
        return encode_whole(
            samples, self._delivery.output_rate, self._delivery.response_format
        )

    async def _event(self, send: Callable, event: dict) -> None:
        await self._send(send, f"data: {json.dumps(event)}\n\n".encode())

    async def _stream_events(self, send: Callable, first: Any) -> None:
        encoder = self._stream_encoder()
        await self._start(send, "text/event-stream", {})

        async def delta(data: bytes) -> None:
            if data:
                audio = base64.b64encode(data).decode()
                await self._event(send, {"type": "speech.audio.delta", "audio": audio})

        try:
            await delta(encoder.start())
            async for part in self._pcm(first):
                if isinstance(part, Caption):
                    await self._event(send, caption_event(part))
                else:
                    await delta(encoder.encode(part))
            await delta(encoder.finish())
        except Exception as error:  # noqa: BLE001 - reported in-band, then the stream ends
            log.warning("speech stream failed: %s", error)
            message = {"message": str(error), "type": "server_error"}
            await self._event(send, {"type": "speech.audio.error", "error": message})
        else:
            usage = {"output_audio_seconds": round(self._audio_seconds, 3)}
            await self._event(send, {"type": "speech.audio.done", "usage": usage})
        await self._send(send, b"", more=False)

    async def _stream_captioned(self, send: Callable, first: Any) -> None:
        """Kokoro-FastAPI's streamed captioned speech: a JSON line per
        segment with its audio (the encoder's bytes since the line before:
        the lines' audio, joined, is one file) and its caption. A failure
        after the first line is a last line with an ``error``."""
        encoder = self._stream_encoder()
        content_type = FORMATS[encoder.response_format].content_type
        lines = CaptionedLines(content_type, self._delivery.timestamps)
        await self._start(send, "application/json", {})
        held = encoder.start()
        try:
            async for part in self._pcm(first):
                if isinstance(part, Caption):
                    await self._send(send, lines.line(held, [part]))
                    held = b""
                else:
                    held += encoder.encode(part)
            held += encoder.finish()
            if held:
                await self._send(send, lines.line(held, []))
        except Exception as error:  # noqa: BLE001 - reported in-band, then the stream ends
            log.warning("speech stream failed: %s", error)
            await self._send(send, error_line(str(error)))
        await self._send(send, b"", more=False)

    async def _send_captioned_whole(self, send: Callable, first: Any) -> None:
        """Kokoro-FastAPI's captioned speech, not streamed: one JSON object
        with the whole file and every caption."""
        parts = [part async for part in self._pcm(first)]
        captions = [part for part in parts if isinstance(part, Caption)]
        body = self._whole_file([part for part in parts if not isinstance(part, Caption)])
        content_type = FORMATS[self._delivery.response_format].content_type
        lines = CaptionedLines(content_type, self._delivery.timestamps)
        document = lines.line(body, captions)
        await self._start(send, "application/json", {"content-length": str(len(document))})
        await self._send(send, document, more=False)
