"""One Wyoming connection (Home Assistant's text-to-speech protocol).

``describe`` gets ``info``. ``synthesize`` gets one ``audio-start``, the
audio as ``audio-chunk`` events of 16-bit PCM at the model's rate as it is
generated, and ``audio-stop``. The streaming form, ``synthesize-start``,
``synthesize-chunk`` pieces and ``synthesize-stop``, speaks each sentence
as soon as it is complete (``TTS.stream_text``), each in its own
``audio-start`` … ``audio-stop``, and ends with ``synthesize-stopped``; a
``synthesize`` sent inside it (clients send the whole text again for servers
that do not stream) is ignored. ``ping`` gets ``pong``.

Requests are spoken in the order they came, one at a time, while the
connection goes on reading. A mistake gets an ``error`` event and the
connection goes on; bytes that are no event within the bounds
(``framing``) get one and end it. The bounds are HTTP's: the text's length,
the requests waiting for the model (counted from a request's turn), a client
that reads nothing (``--stream-idle-timeout``) or says nothing while nothing
is being spoken (``--socket-idle-timeout``), and the graceful stop.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.error import Error
from wyoming.event import Event
from wyoming.info import Describe
from wyoming.ping import Ping, Pong
from wyoming.tts import (
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeStopped,
)

from ..audio.pcm import to_pcm16
from ..audio.samples import Audio
from ..errors import shown
from ..request import TextTooLong
from ..serving.admission import admit
from ..serving.connections import (
    MAX_UTTERANCES_WAITING,
    StalledReader,
    failure_text,
    leaf_errors,
    next_event,
)
from ..serving.refusal import Refusal
from ..serving.shutdown import SHUTDOWN_POLL_SECONDS, STOPPING
from ..serving.state import ServerState
from ..text.stream import SegmentEnded, SegmentStarted, TextFeed, TextStream
from ..voices.resolve import UnknownTaggedVoice, UnknownVoiceName
from .framing import FramingError, event_bytes, read_event
from .program import program_info
from .requests import BadEvent, DeclaredSsml, SpeechAsked, speech_asked

log = logging.getLogger("mlx_speech.server")

SAMPLE_WIDTH = 2  # bytes: 16-bit PCM


@dataclass
class Utterance:
    """One request's text on its way to the model."""

    feed: TextFeed | DeclaredSsml
    stream: TextStream
    streamed: bool  # synthesize-start's: a cycle a sentence, then synthesize-stopped
    chars: int = 0
    admitted: bool = False  # counted toward --max-queue: its turn came

    def cancel(self) -> None:
        self.stream.close()
        self.feed.end()


class WyomingSession:
    def __init__(self, connection: anyio.abc.ByteStream, state: ServerState):
        self._connection = connection
        self._reader = BufferedByteReceiveStream(connection)
        self._state = state
        self._send_lock = anyio.Lock()
        self._turns_in, self._turns = anyio.create_memory_object_stream[Utterance](
            MAX_UTTERANCES_WAITING
        )
        self._utterances: list[Utterance] = []  # waiting or speaking, in order
        self._open: Utterance | None = None  # taking synthesize-chunk text
        # A stream refused at its start, answered at its stop: its error
        self._refused_stream: BadEvent | None = None
        self._last_heard = time.monotonic()
        self._last_sent = self._last_heard

    async def run(self) -> None:
        try:
            async with anyio.create_task_group() as watchers:
                watchers.start_soon(self._end_on_shutdown, watchers.cancel_scope)
                watchers.start_soon(self._end_when_idle, watchers.cancel_scope)
                async with anyio.create_task_group() as speaking:
                    speaking.start_soon(self._speak_in_turn)
                    await self._receive_all()
                    if self._open is not None:  # the client left mid-stream
                        self._open.cancel()
                    self._turns_in.close()
                watchers.cancel_scope.cancel()
        except Exception as error:
            if not _departure(error):
                raise
        finally:
            for utterance in self._utterances:
                utterance.cancel()
            with anyio.CancelScope(shield=True):
                await self._connection.aclose()

    # Receiving

    async def _receive_all(self) -> None:
        max_data = 4 * self._state.settings.max_input_chars + 64 * 1024
        while True:
            try:
                event = await read_event(self._reader, max_data)
            except FramingError as error:
                await self._error(f"{error}; the connection is closed", "bad-framing")
                return
            if event is None:
                return
            self._last_heard = time.monotonic()
            try:
                await self._handle(event)
            except BadEvent as error:
                await self._error(str(error), error.code)

    async def _handle(self, event: Event) -> None:
        if Describe.is_type(event.type):
            await self._describe()
        elif Ping.is_type(event.type):
            await self._send(Pong(text=event.data.get("text")).event())
        elif Synthesize.is_type(event.type):
            # inside a stream, refused or not, it repeats the chunks' text
            if self._open is None and self._refused_stream is None:
                await self._request(event, streamed=False)
        elif SynthesizeStart.is_type(event.type):
            if self._open is not None or self._refused_stream is not None:
                raise BadEvent("a synthesize-start came before the last one's stop")
            self._open = await self._open_stream(event)
        elif SynthesizeChunk.is_type(event.type):
            if self._refused_stream is None:  # a refused stream's text goes nowhere
                self._add_text(event)
        elif SynthesizeStop.is_type(event.type):
            if self._refused_stream is not None:
                refused, self._refused_stream = self._refused_stream, None
                await self._refused(str(refused), refused.code, streamed=True)
                return
            if self._open is None:
                raise BadEvent("synthesize-stop without a synthesize-start")
            self._open.feed.end()
            self._open = None
        else:
            raise BadEvent(f"unknown event type {shown(event.type)}", "unknown-event")

    async def _request(self, event: Event, streamed: bool) -> Utterance | None:
        """The request queued, or refused: its error, then the end its client
        waits for (``_refused``)."""
        try:
            return await self._queue(self._parsed(event, not streamed), streamed)
        except BadEvent as error:
            await self._refused(str(error), error.code, streamed)
            return None

    async def _open_stream(self, event: Event) -> Utterance | None:
        """A stream's utterance; or, refused, None, and its answer kept for
        its ``synthesize-stop``: Home Assistant writes its chunks and its stop
        while it reads, and a connection its reader closed early failed its
        writer (an ``AssertionError`` in its log)."""
        try:
            return await self._queue(self._parsed(event), streamed=True)
        except BadEvent as error:
            self._refused_stream = error
            return None

    async def _refused(self, text: str, code: str, streamed: bool) -> None:
        """A request's error, then the end of its answer: ``audio-stop`` with
        no audio, or a stream's ``synthesize-stopped``. Home Assistant reads
        audio until that end and ignores errors; without it, it waited for
        the idle timeout."""
        await self._error(text, code)
        await self._send(SynthesizeStopped().event() if streamed else AudioStop().event())

    def _parsed(self, event: Event, needs_text: bool = False) -> SpeechAsked:
        tts = self._tts()
        return speech_asked(event.data, tts, needs_text)

    def _tts(self):
        try:
            return self._state.slot.ready()
        except Refusal as refusal:  # still loading, or failed to
            raise BadEvent(refusal.message, refusal.reason) from None

    async def _describe(self) -> None:
        tts = self._tts()
        saved = await anyio.to_thread.run_sync(self._state.store.list)
        await self._send(program_info(tts, self._state.slot.id, saved).event())

    async def _queue(self, asked: SpeechAsked, streamed: bool) -> Utterance:
        if len(self._utterances) >= MAX_UTTERANCES_WAITING:
            raise BadEvent(
                f"a connection may have {MAX_UTTERANCES_WAITING} requests waiting to "
                "be spoken; this one is dropped",
                "too-many-waiting",
            )
        feed = TextFeed()
        try:
            stream = await anyio.to_thread.run_sync(asked.open_stream, feed)
        except (UnknownVoiceName, UnknownTaggedVoice) as error:
            raise BadEvent(str(error), "unknown-voice") from None
        except TextTooLong as error:
            raise BadEvent(str(error), "too-long") from None
        except ValueError as error:
            raise BadEvent(f"not spoken: {str(error)[:300]}") from None
        text_in = DeclaredSsml(feed) if asked.ssml else feed
        utterance = Utterance(text_in, stream, streamed)
        if asked.text is not None:
            utterance.chars = len(asked.text)
            text_in.put(asked.text)
            text_in.end()
        self._utterances.append(utterance)
        await self._turns_in.send(utterance)
        return utterance

    def _add_text(self, event: Event) -> None:
        utterance = self._open
        if utterance is None:
            raise BadEvent("synthesize-chunk without a synthesize-start")
        text = event.data.get("text")
        if not isinstance(text, str):
            raise BadEvent("synthesize-chunk needs a string 'text'")
        limit = self._state.settings.max_input_chars
        if utterance.chars + len(text) > limit:
            raise BadEvent(
                f"this stream would pass {limit} characters; the chunk is dropped",
                "too-long",
            )
        utterance.chars += len(text)
        utterance.feed.put(text)

    # Speaking

    async def _speak_in_turn(self) -> None:
        async with self._turns:
            async for utterance in self._turns:
                try:
                    if await self._admitted(utterance):
                        await self._speak(utterance)
                finally:
                    utterance.cancel()
                    if utterance.admitted:
                        self._state.metrics.request_closed()
                    self._utterances.remove(utterance)

    async def _admitted(self, utterance: Utterance) -> bool:
        try:
            admit(self._state)  # the bound on requests waiting for the model
        except Refusal as refusal:
            message = f"{refusal.message}; this request is dropped"
            await self._refused(message, refusal.reason, utterance.streamed)
            return False
        utterance.admitted = True
        return True

    async def _speak(self, utterance: Utterance) -> None:
        """The utterance's audio cycles; a failure is said, and what was
        begun is ended (its audio-stop, a stream's synthesize-stopped)."""
        rate = self._state.slot.ready().sample_rate
        audio = _AudioCycles(rate, utterance.streamed)
        events = utterance.stream.events()
        while True:
            try:
                event = await next_event(events)
            except Exception as error:  # noqa: BLE001 - a sentence failed: say so
                await self._send_all(audio.stop())
                await self._error(failure_text(error))
                break
            if event is None:
                break
            await self._send_all(audio.events_for(event))
        await self._send_all(audio.stop())
        if utterance.streamed:
            await self._send(SynthesizeStopped().event())

    # Sending

    async def _send_all(self, events: list[Event]) -> None:
        for event in events:
            await self._send(event)

    async def _send(self, event: Event) -> None:
        """One event sent; ``StalledReader`` if the client took none of it for
        ``--stream-idle-timeout`` seconds."""
        data = event_bytes(event)
        async with self._send_lock:
            with anyio.move_on_after(self._state.settings.stream_idle_timeout) as waiting:
                await self._connection.send(data)
            self._last_sent = time.monotonic()
            if waiting.cancelled_caught:
                log.warning(
                    "a Wyoming client read nothing for %.0f s; connection closed",
                    self._state.settings.stream_idle_timeout,
                )
                raise StalledReader

    async def _error(self, text: str, code: str = "bad-request") -> None:
        await self._send(Error(text=text, code=code).event())

    # Ending

    async def _end_on_shutdown(self, scope: anyio.CancelScope) -> None:
        """A stopping server lets what is being spoken finish until its
        deadline, then says so and closes the connection."""
        shutdown = self._state.shutdown
        while not shutdown.started or (self._utterances and not shutdown.overdue):
            await anyio.sleep(SHUTDOWN_POLL_SECONDS)
        for utterance in self._utterances:
            utterance.cancel()
        with anyio.move_on_after(1):
            await self._error(STOPPING, "stopping")
        scope.cancel()

    async def _end_when_idle(self, scope: anyio.CancelScope) -> None:
        """A connection that says nothing for ``--socket-idle-timeout``
        seconds, and is sent nothing meanwhile, is closed unless a request
        waits for its turn: an open stream whose text stopped coming holds
        its place in the queue only that long."""
        timeout = self._state.settings.socket_idle_timeout
        while True:
            await anyio.sleep(min(timeout, 1.0))
            quiet = time.monotonic() - max(self._last_heard, self._last_sent)
            waiting = [one for one in self._utterances if one is not self._open]
            if quiet >= timeout and not waiting:
                log.debug("a Wyoming connection said nothing for %.0f s; closed", quiet)
                scope.cancel()
                return


# The client has gone (closed, reset), or reads nothing.
_DEPARTURES = (
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    ConnectionError,
    StalledReader,
)


def _departure(error: BaseException) -> bool:
    """Whether ``error`` (or every error of a group) says only that the
    client left; task groups gather them into groups."""
    return all(isinstance(one, _DEPARTURES) for one in leaf_errors(error))


class _AudioCycles:
    """A request's engine events → Wyoming audio events: one cycle for a
    ``synthesize``, one a sentence for a stream."""

    def __init__(self, rate: int, per_sentence: bool):
        self._rate = rate
        self._per_sentence = per_sentence
        self._open = False
        self._chunks = 0  # in the open cycle
        self._samples = 0  # sent so far: the chunks' timestamps (ms)

    def events_for(self, event: Any) -> list[Event]:
        if isinstance(event, SegmentStarted):
            if self._open:
                return []
            self._open = True
            return [AudioStart(self._rate, SAMPLE_WIDTH, 1).event()]
        if isinstance(event, SegmentEnded):
            return self.stop() if self._per_sentence else []
        if isinstance(event, Audio) and len(event.samples):
            return [self._chunk(to_pcm16(event.samples).tobytes())]
        return []

    def _chunk(self, pcm: bytes) -> Event:
        chunk = AudioChunk(
            self._rate, SAMPLE_WIDTH, 1, pcm, timestamp=self._samples * 1000 // self._rate
        )
        self._chunks += 1
        self._samples += len(pcm) // SAMPLE_WIDTH
        return chunk.event()

    def stop(self) -> list[Event]:
        if not self._open:
            return []
        self._open = False
        # A model that said nothing: one chunk of no samples, as clients that
        # count chunks (wyoming-bench) take a cycle without one for a failure.
        empty = [] if self._chunks else [self._chunk(b"")]
        self._chunks = 0
        return [*empty, AudioStop(timestamp=self._samples * 1000 // self._rate).event()]
