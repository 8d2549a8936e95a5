"""Opening a resolved request's stream: its text read out, the family's
request prepared, and the job started on the engine, alone, at a pace, or
part by part with pauses between (voice tags, SSML)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

from ..audio.time_stretch import StretchedStream, check_speed
from ..engine import ChunkStream, Engine
from ..errors import InvalidRequest
from ..families import SpeechInput, SpeechService
from ..text.pauses import Pause, PausedStream
from ..text.script import script_of
from .reading import Reading, ReadPart
from .resolution import Resolved, Voices
from .streams import SpeechStream


class Opener:
    def __init__(
        self, service: SpeechService, engine: Engine, reading: Reading, voices: Voices
    ):
        self._service = service
        self._engine = engine
        self._reading = reading
        self._voices = voices

    def check(self, resolved: Resolved) -> tuple[str, ...]:
        """The family's checks of everything ``resolved`` asks but its text
        (``ValueError``); the fields the model ignores."""
        return self._service.check(self._input(resolved, None, resolved.voice))

    def open(self, resolved: Resolved) -> SpeechStream:
        request = resolved.asked
        script = script_of(request.text) if isinstance(request.text, str) else None
        if script is None:
            read, ref_text = self._reading.as_read(
                request.text, request.ref_text, request.language, resolved.normalize
            )
            prepared = self.prepare(resolved, read, ref_text)
            return self.started(prepared, resolved.speed)
        if not script.parts:  # as an empty text is refused
            raise InvalidRequest("text", "the text says nothing: it has only voice tags")
        reusable = self.reusable(resolved)
        read_parts, _ = self.read_parts(script.parts, reusable)
        return self.paused(read_parts, reusable, tuple(script.ignored))

    def opener(self, resolved: Resolved) -> Callable[[str], SpeechStream]:
        """``open`` for many texts in a resolved request's voice and options
        (a clip decoded once); each text is checked as it opens."""
        resolved = self.reusable(resolved)

        def open_text(text: str) -> SpeechStream:
            asked = replace(resolved.asked, text=text)
            return self.open(replace(resolved, asked=asked))

        return open_text

    def reusable(self, resolved: Resolved) -> Resolved:
        """``resolved`` with its voice in the form the family takes again
        cheaply, for its parts or segments (a clip decoded once)."""
        return replace(resolved, voice=self._service.reusable_voice(resolved.voice))

    def read_parts(self, parts: list, resolved: Resolved) -> tuple[list, int]:
        asked = resolved.asked
        return self._reading.read_parts(
            parts, asked.ref_text, asked.language, resolved.normalize
        )

    def prepare(
        self,
        resolved: Resolved,
        read: str,
        ref_text: Any,
        voice: Any = None,
        language: Any = None,
    ) -> Any:
        """The family's request for text already read out (``read``), in
        ``resolved``'s voice and language unless a part names its own."""
        voice = resolved.voice if voice is None else voice
        return self._service.prepare(self._input(resolved, read, voice, ref_text, language))

    def started(self, request: Any, speed: float) -> ChunkStream | StretchedStream:
        stream = self._engine.stream(lambda: self._service.synthesize(request))
        stream.ignored = request.ignored
        if speed == 1.0:
            return stream
        return StretchedStream(stream, speed, self._service.sample_rate)

    def paused(
        self, read_parts: list, resolved: Resolved, marked: tuple[str, ...] = ()
    ) -> PausedStream:
        """The parts' audio with the pauses' silence between, each part in its
        own voice, pace and language (all checked now; each part's generation
        starts once the one before ends); ``marked``: SSML not read, named in
        ``ignored`` with the fields the model did not use."""
        items: list = []
        ignored: tuple[str, ...] = ()
        for part in read_parts:
            if isinstance(part, Pause):
                items.append(part)
                continue
            request = self._part_request(part, resolved)
            ignored = request.ignored
            pace = check_speed(resolved.speed * part.voicing.pace)
            items.append(partial(self.started, request, pace))
        channels = resolved.asked.channels or 1
        rate = self._service.sample_rate
        return PausedStream(items, rate, channels, (*ignored, *marked))

    def _part_request(self, part: ReadPart, resolved: Resolved) -> Any:
        voicing = part.voicing
        voice = None if voicing.voice is None else self._voices.named(voicing.voice)
        return self.prepare(resolved, part.read, part.ref_text, voice, voicing.language)

    def _input(
        self,
        resolved: Resolved,
        read: str | None,
        voice: Any,
        ref_text: Any = None,
        language: Any = None,
    ) -> SpeechInput:
        asked = resolved.asked
        return SpeechInput(
            read,
            voice,
            asked.ref_text if read is None else ref_text,
            asked.instructions,
            language or asked.language,
            dict(asked.sampling),
            asked.channels,
        )
