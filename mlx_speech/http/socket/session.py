"""``/v1/audio/speech/stream``: text in as it is written, audio out sentence
by sentence, in vLLM-Omni's WebSocket protocol.

The client sends ``session.config`` first (the speech request's fields,
plus ``split_granularity`` and ``stream_audio``), then any number of
utterances: ``input.text`` pieces ended by ``input.done``. Each utterance is
one ``TTS.stream_text``: its segments are spoken as soon as they are
complete, and ``input.commit`` says its text so far is complete. The server
answers each segment with ``audio.start``, binary frames of audio (one
file, or PCM chunks with ``stream_audio``) and ``audio.done``, each commit
with ``input.committed`` and each utterance with ``session.done``. Mistakes get an
``error`` message and the session goes on, except a first message that is
not a valid config, which ends it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from starlette.websockets import WebSocket, WebSocketDisconnect

from ...audio.events import Seam
from ...audio.samples import Audio
from ...errors import shown
from ...serving.admission import admit
from ...serving.connections import (
    MAX_UTTERANCES_WAITING,
    StalledReader,
    failure_text,
    next_event,
)
from ...serving.refusal import Refusal
from ...serving.shutdown import END_EARLY_SECONDS, SHUTDOWN_POLL_SECONDS, STOPPING
from ...text.captions import Timeline
from ...text.segment_marks import Committed
from ...text.stream import SegmentEnded, SegmentStarted, TextFeed, TextStream
from ...tts import TTS
from ..errors import ApiError
from ..speech.request import RequestRules
from .config import SocketConfig, parse_socket_config
from .sentence_audio import SentenceAudio
from .utterance import Utterance

log = logging.getLogger("mlx_speech.server")

MAX_TEXT_MESSAGE_BYTES = 128 * 1024  # any message but session.config
POLICY_VIOLATION, GOING_AWAY, TRY_AGAIN_LATER = 1008, 1001, 1013


def _is_scalar(value: object) -> bool:
    """A value echoed as the client sent it: never a structure of its size."""
    return value is None or (
        isinstance(value, str | int | float) and len(str(value)) <= 256
    )


async def refuse(websocket: WebSocket, error: ApiError) -> None:
    """Answer the handshake with the error, as an HTTP response where possible."""
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(error.response())
    else:
        await websocket.close(TRY_AGAIN_LATER if error.status == 503 else POLICY_VIOLATION)


class SpeechSocket:
    """One connection's session."""

    def __init__(self, websocket: WebSocket, tts: TTS, state: Any, rules: RequestRules):
        self._socket = websocket
        self._tts = tts
        self._state = state
        self._rules = rules
        self._config: SocketConfig | None = None
        self._utterances: list[Utterance] = []  # not yet answered with session.done
        self._next_index = 0
        self._send_lock = anyio.Lock()
        self._last_sent = time.monotonic()

    async def run(self) -> None:
        await self._socket.accept()
        self._state.sockets.opened()
        try:
            async with anyio.create_task_group() as tasks:
                self._tasks = tasks
                tasks.start_soon(self._end_on_shutdown)
                await self._receive_all()
                tasks.cancel_scope.cancel()
        except WebSocketDisconnect:
            pass
        finally:
            for utterance in self._utterances:
                utterance.cancel()
            self._state.sockets.closed()

    # Receiving

    async def _receive_all(self) -> None:
        idle = self._state.settings.socket_idle_timeout
        while True:
            message = None
            with anyio.move_on_after(idle):
                message = await self._socket.receive()
            if message is None:
                if self._owes_audio() or time.monotonic() - self._last_sent < idle:
                    continue  # the client is waiting for us, not idle
                await self._end(f"idle timeout: no message for {idle:g} s", 1000)
                return
            if message["type"] == "websocket.disconnect":
                return
            if not await self._handle(message):
                return

    def _owes_audio(self) -> bool:
        return any(u.flushed.is_set() or u.answered < u.commits for u in self._utterances)

    async def _handle(self, frame: dict) -> bool:
        """Act on one frame; False once the session is over."""
        message = await self._parse(frame)
        if message is None and self._config is None:
            await self._end("the first message must be a session.config JSON object")
            return False
        if message is None:
            return True
        kind = message.get("type")
        if self._config is None and kind != "session.config":
            await self._end(f"expected session.config first, got {shown(kind)}")
            return False
        if kind == "session.config":
            return await self._configure(message)
        if kind == "input.text":
            await self._add_text(message.get("text"))
        elif kind == "input.commit":
            await self._commit(message.get("commit_id"))
        elif kind == "input.done":
            await self._flush()
        elif kind == "session.close":
            await self._socket.close(1000)
            return False
        else:
            await self._error(
                f"unknown message type {shown(kind)}; expected session.config, "
                "input.text, input.commit, input.done or session.close"
            )
        return True

    async def _parse(self, frame: dict) -> dict | None:
        text = frame.get("text")
        if text is None:
            await self._error("send JSON text frames; binary frames are not accepted")
            return None
        try:
            message = json.loads(text)
        except (ValueError, RecursionError) as error:
            await self._error(f"invalid JSON: {str(error)[:200]}")
            return None
        if not isinstance(message, dict):
            await self._error("each message must be a JSON object with a 'type'")
            return None
        if message.get("type") != "session.config" and len(text) > MAX_TEXT_MESSAGE_BYTES:
            await self._error(
                f"message too large: {len(text)} characters; the limit is "
                f"{MAX_TEXT_MESSAGE_BYTES} (session.config may be larger)"
            )
            return None
        return message

    def _taking_text(self) -> Utterance | None:
        """The utterance whose ``input.done`` has not come yet, if any."""
        if self._utterances and not self._utterances[-1].flushed.is_set():
            return self._utterances[-1]
        return None

    async def _configure(self, message: dict) -> bool:
        if self._taking_text() is not None:
            await self._error(
                "session.config while an utterance's text is buffered is refused; "
                "send input.done first"
            )
            return True
        try:
            config = await anyio.to_thread.run_sync(self._checked_config, message)
        except ApiError as error:
            if self._config is None:
                await self._end(f"invalid session.config: {error.message}")
                return False
            await self._error(
                f"invalid session.config (the previous one stays): {error.message}"
            )
            return True
        self._config = config
        return True

    def _checked_config(self, message: dict) -> SocketConfig:
        """The config, validated by the family too (a thread: it may decode a clip)."""
        config = parse_socket_config(message, self._rules)
        request = config.request
        try:
            self._tts.check_options(request.speech)
        except ValueError as error:
            raise ApiError(400, str(error)) from None
        return config

    async def _add_text(self, text: Any) -> None:
        if not isinstance(text, str):
            await self._error("input.text needs a string 'text'")
            return
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            await self._error("input.text is not valid Unicode (a lone surrogate?)")
            return
        utterance = await self._open_utterance()
        if utterance.stream is None:
            return  # refused: its error was sent once
        limit = self._state.settings.max_input_chars
        if utterance.chars + len(text) > limit:
            await self._error(
                f"this utterance would pass {limit} characters; the piece is dropped "
                "(send input.done to speak what came before)"
            )
            return
        utterance.chars += len(text)
        utterance.feed.put(text)

    async def _open_utterance(self, empty: bool = False) -> Utterance:
        """The utterance taking text: the open one, or a new one (``empty``: one
        that will take none, for an ``input.done`` with nothing before it)."""
        if (open_utterance := self._taking_text()) is not None:
            return open_utterance
        stream = feed = None
        if not empty and len(self._utterances) >= MAX_UTTERANCES_WAITING:
            await self._error(
                f"a session may have {MAX_UTTERANCES_WAITING} utterances waiting to be "
                "spoken; this utterance is dropped (send it after a session.done)"
            )
        elif not empty:
            feed = TextFeed()
            stream = await anyio.to_thread.run_sync(self._text_stream, feed)
        utterance = Utterance(self._next_index, stream, feed)
        previous = self._utterances[-1] if self._utterances else None
        self._next_index += 1
        self._utterances.append(utterance)
        self._tasks.start_soon(self._speak, utterance, previous, self._config)
        return utterance

    def _text_stream(self, feed: TextFeed) -> TextStream:
        request = self._config.request
        split = self._config.split
        return self._tts.open_text(feed, request.speech, split=split)

    async def _commit(self, commit_id: object) -> None:
        """vLLM-Omni's ``input.commit``: the utterance's text so far is spoken
        now, without waiting for more; ``input.committed`` answers once its
        audio is sent, with the client's ``commit_id``. The utterance goes on
        until ``input.done``."""
        utterance = await self._open_utterance()
        utterance.commits += 1
        utterance.commit_ids.append(commit_id if _is_scalar(commit_id) else None)
        if utterance.stream is None or utterance.spoken.is_set():
            # refused, or ended by a failure: nothing more will be spoken
            await self._send(utterance.commit_answer(utterance.sentences))
            return
        utterance.feed.commit()

    async def _flush(self) -> None:
        utterance = await self._open_utterance(empty=True)
        if utterance.stream is not None:
            utterance.feed.end()
        utterance.flushed.set()

    # Sending

    async def _speak(
        self, utterance: Utterance, previous: Utterance | None, config: SocketConfig
    ) -> None:
        """Send one utterance's audio, after the one before it, then session.done;
        a client gone mid-way ends the session."""
        try:
            if previous is not None:
                await previous.done.wait()
            sentences = 0
            if utterance.stream is not None and await self._admitted(utterance):
                sentences = await self._send_segments(utterance, config)
            utterance.sentences = sentences
            utterance.spoken.set()
            while utterance.answered < utterance.commits:  # cut short: none to come
                await self._send(utterance.commit_answer(sentences))
            await utterance.flushed.wait()
            await self._send(
                {
                    "type": "session.done",
                    "utterance_index": utterance.index,
                    "total_sentences": sentences,
                }
            )
        except (WebSocketDisconnect, RuntimeError):  # sending to a closed socket
            self._tasks.cancel_scope.cancel()
        except StalledReader:
            log.warning(
                "a WebSocket client read nothing for %.0f s; session closed",
                self._state.settings.stream_idle_timeout,
            )
            self._tasks.cancel_scope.cancel()
        finally:
            utterance.spoken.set()
            if utterance.stream is not None:
                utterance.cancel()
            if utterance.admitted:
                self._state.metrics.request_closed()
            self._utterances.remove(utterance)
            utterance.done.set()

    async def _admitted(self, utterance: Utterance) -> bool:
        """Count the utterance in now that its turn came, or refuse it."""
        try:
            admit(self._state)  # the bound of waiting HTTP requests holds here too
        except Refusal as error:
            utterance.cancel()
            utterance.stream = None  # its later pieces are dropped
            await self._error(f"{error.message}; this utterance is dropped")
            return False
        utterance.admitted = True
        return True

    async def _send_segments(self, utterance: Utterance, config: SocketConfig) -> int:
        """Each segment's audio.start, audio and audio.done; the count sent."""
        events = utterance.stream.events()
        native_rate = self._tts.sample_rate
        started: SegmentStarted | None = None
        audio: SentenceAudio | None = None
        sent = count = 0
        # where each sentence lies in the utterance's audio (its caption)
        timeline = Timeline(config.request.sample_rate or native_rate)
        while True:
            try:
                event = await next_event(events)
            except Exception as error:  # noqa: BLE001 - a segment failed: say so
                await self._error(failure_text(error))
                event = None
            if event is None:  # the end, a failure, or a cancel mid-sentence
                if started is None:
                    return count
                done = _done_message(utterance, started.index, sent, True)
                await self._send({**done, **_caption(timeline, audio, started)})
                return count + 1
            if isinstance(event, SegmentStarted):
                started, audio, sent = event, SentenceAudio(config, native_rate), 0
                start = self._start_message(utterance, event, audio, config)
                await self._send({**start, "start_sample": timeline.samples})
            elif isinstance(event, Audio):
                sent += await self._send_audio(audio.add(event.samples))
            elif isinstance(event, Seam):
                sent += await self._send_audio(audio.seam())
            elif isinstance(event, Committed):
                await self._send(utterance.commit_answer(count))
            elif isinstance(event, SegmentEnded):
                sent += await self._send_audio(audio.finish())
                done = _done_message(utterance, event.index, sent, False)
                await self._send({**done, **_caption(timeline, audio, event)})
                started, count = None, count + 1

    def _start_message(self, utterance, event, audio, config) -> dict:
        return {
            "type": "audio.start",
            "utterance_index": utterance.index,
            "sentence_index": event.index,
            "sentence_text": event.text,
            "format": config.request.response_format,
            "sample_rate": audio.rate,
            "channels": config.request.speech.channels or 1,
        }

    async def _send_audio(self, data: bytes) -> int:
        if data:
            await self._delivered(lambda: self._socket.send_bytes(data))
        return len(data)

    async def _send(self, message: dict) -> None:
        await self._delivered(lambda: self._socket.send_json(message))

    async def _delivered(self, sending: Callable[[], Awaitable[None]]) -> None:
        """One frame sent; ``StalledReader`` if the client took none of it
        for ``--stream-idle-timeout`` seconds (as an HTTP stream is cut)."""
        async with self._send_lock:
            with anyio.move_on_after(self._state.settings.stream_idle_timeout) as waiting:
                await sending()
            if waiting.cancelled_caught:
                raise StalledReader
            self._last_sent = time.monotonic()

    async def _error(self, message: str) -> None:
        try:
            await self._send({"type": "error", "message": message})
        except (WebSocketDisconnect, RuntimeError, StalledReader):
            pass  # the client has gone or reads nothing; nothing to tell

    async def _end(self, message: str, code: int = POLICY_VIOLATION) -> None:
        await self._error(message)
        try:
            await self._socket.close(code)
        except (WebSocketDisconnect, RuntimeError):
            pass  # already closed

    async def _end_on_shutdown(self) -> None:
        """A stopping server lets the running utterances finish until its
        deadline, then ends the session with an error message."""
        shutdown = self._state.shutdown
        while not shutdown.started or (self._utterances and not shutdown.overdue):
            await anyio.sleep(SHUTDOWN_POLL_SECONDS)
        for utterance in self._utterances:
            utterance.cancel()
        with anyio.move_on_after(END_EARLY_SECONDS):  # a sentence begun gets its end
            for utterance in list(self._utterances):
                if utterance.admitted:
                    await utterance.spoken.wait()
        await self._end(STOPPING, GOING_AWAY)
        self._tasks.cancel_scope.cancel()


def _caption(
    timeline: Timeline, audio: SentenceAudio, segment: SegmentStarted | SegmentEnded
) -> dict:
    """The sentence just ended (``audio``, at the output rate): its start
    and end in the utterance's audio; the next starts there."""
    timeline.count(audio.samples)
    caption = timeline.end_segment(SegmentEnded(segment.index, segment.text))
    return {"start_sample": caption.start, "end_sample": caption.end}


def _done_message(utterance: Utterance, index: int, total_bytes: int, error: bool) -> dict:
    return {
        "type": "audio.done",
        "utterance_index": utterance.index,
        "sentence_index": index,
        "total_bytes": total_bytes,
        "error": error,
    }
