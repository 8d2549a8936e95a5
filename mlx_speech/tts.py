"""``TTS``: a loaded model, speaking from any thread through the shared worker."""

from __future__ import annotations

from collections.abc import AsyncIterable, Callable, Iterable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import numpy as np

from .audio.samples import Audio
from .audio.time_stretch import StretchedStream, check_speed
from .engine import ChunkStream, Engine
from .errors import InvalidRequest
from .families import SpeechInput, SpeechService
from .families.fields import check_text
from .families.languages import language_codes
from .request import SpeechRequest, TextTooLong
from .text.lexicon import Lexicon
from .text.normalization import TextNormalizer
from .text.pauses import Pause, PausedStream, check_pauses, pause_seconds
from .text.script import Spoken, Voicing, script_of, voice_after
from .text.segments import TextSegmenter
from .text.stream import AsyncTextStream, TextFeed, TextStream
from .voices.clip_rules import check_ref_text
from .voices.resolve import UnknownTaggedVoice, UnknownVoiceName, resolve_voice
from .voices.store import VoiceStore

SpeechStream = ChunkStream | StretchedStream | PausedStream


@dataclass(frozen=True)
class Resolved:
    """A ``SpeechRequest`` resolved once (``TTS.resolve``)."""

    asked: SpeechRequest
    voice: Any  # as the family takes it
    speed: float
    normalize: bool


@dataclass(frozen=True)
class _ReadPart:
    read: str  # as the model reads it
    ref_text: str | None
    voicing: Voicing


class TTS:
    def __init__(
        self,
        service: SpeechService,
        engine: Engine,
        voice_store: VoiceStore,
        voice_aliases: dict[str, str] | None = None,
        normalize: bool = True,
        normalizer: TextNormalizer | None = None,
        device: str = "cpu",
    ):
        self._service = service
        self.device = device  # MLX's: "cpu" or "gpu"
        self._engine = engine
        self.voice_store = voice_store
        self.voice_aliases = dict(voice_aliases or {})  # name (lower case) → voice
        self.normalize = normalize  # the default of a request's ``normalize``
        self.normalizer = normalizer or TextNormalizer()
        # The longest text the model is given, counted as it reads it (after
        # normalization, which can make text several times longer); None: any.
        self.max_text_chars: int | None = None
        # Words said otherwise, applied before normalization (``lexicon``).
        self.lexicon: Lexicon | None = None
        self.backend_reason = ""  # why ``backend`` runs, in a few words (``load``)
        self.model = ""  # the checkpoint's folder (``load``)

    @property
    def family(self) -> str:
        return self._service.name

    @property
    def backend(self) -> str:
        """What runs the model: "mlx", or "host" (the host engine beside MLX)."""
        return self._service.backend

    @property
    def sample_rate(self) -> int:
        return self._service.sample_rate

    @property
    def channels(self) -> int:
        """The model's own channel count (``channels=`` may ask for it; 1 is
        the default)."""
        return self._service.channels

    @property
    def streaming(self) -> str:
        """ "incremental" (chunks as frames are generated) or "buffered"."""
        return self._service.streaming

    @property
    def voices(self) -> list[str]:
        return list(self._service.voices)

    @property
    def languages(self) -> tuple[str, ...]:
        """ISO 639-1 codes of the languages the model speaks (for a model that
        takes any language, those of ``families.languages``' table)."""
        return language_codes(getattr(self._service, "languages", None))

    def stats(self) -> dict[str, float]:
        """The family's counters (e.g. reference cache hits) and the text
        normalizer's (texts, seconds spent, words it could not read)."""
        return {**self._service.stats(), **self.normalizer.stats()}

    def resolve_voice(self, voice: Any) -> Any:
        """``voice`` by the one policy (``voices.resolve``), file paths allowed."""
        return self._voice(voice, paths=True)

    def _voice(self, voice: Any, *, paths: bool, hint: str | None = None) -> Any:
        """The one place a voice is resolved, for every surface."""
        return resolve_voice(
            voice,
            presets=self._service.voices,
            find_saved=self.voice_store.find,
            hint=hint or self._service.voice_hint,
            paths=paths,
            aliases=self.voice_aliases,
        )

    def resolve(self, request: SpeechRequest) -> Resolved:
        """``request`` resolved, once: its voice found, its pace, its
        normalization and its text's length checked (``ValueError``)."""
        speed = check_speed(request.speed)
        normalize = self._normalizes(request.normalize)
        # a text that is no string is check_text's to refuse, as it is read
        written = request.text if isinstance(request.text, str) else ""
        self._check_length(written, len(written))
        voice = self._voice(
            request.voice, paths=request.voice_paths, hint=request.voice_hint
        )
        return Resolved(request, voice, speed, normalize)

    def prepare(self, text: str, voice: Any = None, **options: Any) -> Any:
        """Validate a request (``ValueError``) without running it; returns the
        family's request, which ``stream`` then runs. Takes the keywords of
        ``stream``. ``normalize`` (default: the TTS's) reads numbers, symbols
        and dates out and cleans the text (``mlx_speech.text.normalization``)
        before the model sees it. ``channels`` 2 asks for a stereo model's own
        channels (``channels``) instead of their mono mix; chunks are then
        ``[samples, 2]``."""
        resolved = self.resolve(SpeechRequest.of(text, voice, **options))
        return self._prepared_whole(resolved)

    def _prepared_whole(self, resolved: Resolved) -> Any:
        """The family's request for ``resolved``'s whole text, read out."""
        asked = resolved.asked
        text, ref_text = self._as_read(
            asked.text, asked.ref_text, asked.language, resolved.normalize
        )
        return self._prepared(resolved, text, ref_text, resolved.voice, asked.language)

    def _prepared(
        self, resolved: Resolved, read: str, ref_text: Any, voice: Any, language: Any
    ) -> Any:
        """The family's request for text already read out (``read``)."""
        asked = resolved.asked
        return self._service.prepare(
            SpeechInput(
                read,
                voice,
                ref_text,
                asked.instructions,
                language,
                dict(asked.sampling),
                asked.channels,
            )
        )

    def _as_read(
        self, text: str, ref_text: str | None, language: Any, normalize: bool
    ) -> tuple[str, str | None]:
        """``text`` and ``ref_text`` as the model reads them; ``text`` within
        ``max_text_chars``."""
        written = len(text) if isinstance(text, str) else 0
        if isinstance(text, str) and self.lexicon is not None:
            text = self._said_by_lexicon(text, written)
        if not normalize:
            if isinstance(text, str):
                self._check_length(text, written)
            return text, ref_text
        check_text(text)
        check_ref_text(ref_text)
        read = self.normalizer.normalize(text, language, most=self.max_text_chars)
        self._check_length(read, written)
        if ref_text is not None and ref_text.strip():
            ref_text = self.normalizer.normalize(ref_text, language)
        return read, ref_text

    def _said_by_lexicon(self, text: str, written: int) -> str:
        limit = self.max_text_chars
        said = self.lexicon.apply(text, most=limit)
        if limit is not None and len(said) > limit:  # cut short as it passed
            raise TextTooLong(
                f"the text is {written} characters and more than {limit} once the "
                f"lexicon's words are said; the limit is {limit}: send it in parts",
            )
        return said

    def _check_length(self, text: str, written: int) -> None:
        limit = self.max_text_chars
        if limit is None or len(text) <= limit:
            return
        if len(text) == written:
            message = (
                f"the text is {written} characters; the limit is {limit}: send it in parts"
            )
        else:
            message = (
                f"the text is {written} characters and more than {limit} once numbers "
                f"and symbols are read out; the limit is {limit}: send it in parts, or "
                "with normalization off"
            )
        raise TextTooLong(message)

    def check(self, text: str, voice: Any = None, **options: Any) -> tuple[str, ...]:
        """Validate what ``stream`` takes (``ValueError``) without running it;
        returns the fields the model ignores."""
        return self.check_request(SpeechRequest.of(text, voice, **options))

    def check_request(self, request: SpeechRequest) -> tuple[str, ...]:
        """``check`` for a ``SpeechRequest``: its text is checked, not read out."""
        resolved = self.resolve(request)
        return self.check_resolved(resolved, request.text)

    def check_resolved(self, resolved: Resolved, text: str) -> tuple[str, ...]:
        """``check_request`` for a request resolved already, with ``text``."""
        asked = resolved.asked
        request = self._prepared(
            resolved, text, asked.ref_text, resolved.voice, asked.language
        )
        return request.ignored

    def normalized(self, text: str, language: str | None = None) -> str:
        """``text`` as the model is given it when normalization is on (the
        lexicon's words said otherwise, then read out)."""
        check_text(text)
        if self.lexicon is not None:
            text = self.lexicon.apply(text)
        return self.normalizer.normalize(text, language)

    def _normalizes(self, normalize: Any) -> bool:
        if normalize is None:
            return self.normalize
        if not isinstance(normalize, bool):
            raise InvalidRequest("normalize", "normalize must be true or false")
        return normalize

    def stream(self, text: str, voice: Any = None, **options: Any) -> SpeechStream:
        """Audio chunks as they are produced; the first is a single codec frame.

        Takes the keywords of ``prepare``: ``ref_text``, ``instructions``,
        ``language``, ``normalize``, ``channels`` and the sampling ones. ``speed`` (0.25 to
        4.0) changes the pace, not the pitch (``time_stretch``). The request
        is validated here (``ValueError``); generation starts on the first
        read. ``cancel()`` or dropping the iterator stops it.
        """
        return self.open(SpeechRequest.of(text, voice, **options))

    def open(self, request: SpeechRequest) -> SpeechStream:
        """``stream`` for a ``SpeechRequest``."""
        return self._open_resolved(self.resolve(request))

    def opener(self, resolved: Resolved) -> Callable[[str], SpeechStream]:
        """``open`` for many texts in a resolved request's voice and options
        (a clip decoded once); each text is checked as it opens."""
        resolved = self._reusable(resolved)

        def open_text(text: str) -> SpeechStream:
            asked = replace(resolved.asked, text=text)
            return self._open_resolved(replace(resolved, asked=asked))

        return open_text

    def _open_resolved(self, resolved: Resolved) -> SpeechStream:
        request = resolved.asked
        script = script_of(request.text) if isinstance(request.text, str) else None
        if script is None:
            return self._opened(self._prepared_whole(resolved), resolved.speed)
        if not script.parts:  # as an empty text is refused
            raise InvalidRequest("text", "the text says nothing: it has only voice tags")
        reusable = self._reusable(resolved)
        read_parts, _ = self._read_parts(script.parts, reusable)
        return self._paused(read_parts, reusable, tuple(script.ignored))

    def _reusable(self, resolved: Resolved) -> Resolved:
        """``resolved`` with its voice in the form the family takes again
        cheaply, for its parts or segments (a clip decoded once)."""
        return replace(resolved, voice=self._service.reusable_voice(resolved.voice))

    def _opened(self, request: Any, speed: float) -> ChunkStream | StretchedStream:
        stream = self._engine.stream(lambda: self._service.synthesize(request))
        stream.ignored = request.ignored
        if speed == 1.0:
            return stream
        return StretchedStream(stream, speed, self.sample_rate)

    def _read_parts(
        self, parts: list[Spoken | Pause], resolved: Resolved
    ) -> tuple[list[_ReadPart | Pause], int]:
        """Each part as the model reads it (with its ``ref_text``), and how
        many characters they are together, within ``max_text_chars``."""
        asked = resolved.asked
        read_parts: list[_ReadPart | Pause] = []
        total = 0
        for part in parts:
            if isinstance(part, Pause):
                read_parts.append(part)
                continue
            language = part.voicing.language or asked.language
            read, ref_text = self._as_read(
                part.text, asked.ref_text, language, resolved.normalize
            )
            total += len(read)
            read_parts.append(_ReadPart(read, ref_text, part.voicing))
        if self.max_text_chars is not None and total > self.max_text_chars:
            raise TextTooLong(
                f"the text is more than {self.max_text_chars} characters as it is read "
                "out; send it in parts",
            )
        return read_parts, total

    def _paused(
        self, read_parts: list, resolved: Resolved, marked: tuple[str, ...] = ()
    ) -> PausedStream:
        """The parts' audio with the pauses' silence between, each part in its
        own voice, pace and language (all checked now; each part's generation
        starts once the one before ends); ``marked``: SSML not read, named in
        ``ignored`` with the fields the model did not use."""
        asked = resolved.asked
        items: list = []
        ignored: tuple[str, ...] = ()
        for part in read_parts:
            if isinstance(part, Pause):
                items.append(part)
                continue
            voicing = part.voicing
            language = voicing.language or asked.language
            own_voice = (
                resolved.voice
                if voicing.voice is None
                else self._voice_named(voicing.voice)
            )
            request = self._prepared(
                resolved, part.read, part.ref_text, own_voice, language
            )
            ignored = request.ignored
            pace = check_speed(resolved.speed * voicing.pace)
            items.append(partial(self._opened, request, pace))
        channels = asked.channels or 1
        return PausedStream(items, self.sample_rate, channels, (*ignored, *marked))

    def _voice_named(self, name: str) -> Any:
        """An SSML ``<voice name=>``: a voice's name (never a file). Unknown,
        it is a fault of the text, not an ``UnknownVoiceName`` (the request's
        own voice, which HTTP answers with 404)."""
        try:
            voice = self._voice(name, paths=False)
        except UnknownVoiceName as error:
            raise UnknownTaggedVoice(error.param, str(error)) from None
        return self._service.reusable_voice(voice)

    def speak(self, text: str, voice: Any = None, **options: Any) -> Audio:
        """The whole utterance at once; takes the keywords of ``stream``."""
        chunks = [chunk.samples for chunk in self.stream(text, voice, **options)]
        samples = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32)
        return Audio(samples, self.sample_rate)

    def stream_text(
        self,
        deltas: Iterable[str],
        voice: Any = None,
        *,
        split: str = "sentence",
        **options: Any,
    ) -> TextStream:
        """Audio chunks of text that is still being written (a chat model's
        deltas, any size): each segment (``split``: "sentence", "clause", or
        "none" for the whole text) is spoken as soon as it is complete, while
        later deltas are still read. Takes the keywords of ``stream``, which
        apply to every segment; they are validated here (``ValueError``).
        ``close()`` cancels what is queued and running.
        """
        return self.open_text(deltas, SpeechRequest.of("", voice, **options), split)

    def open_text(
        self, deltas: Iterable[str], request: SpeechRequest, split: str = "sentence"
    ) -> TextStream:
        """``stream_text`` for a ``SpeechRequest``. The deltas are what is
        spoken; the request's ``text``, where the caller has it whole already
        (a Wyoming ``synthesize``), is checked against the length limit now."""
        segmenter, speak, ignored = self._text_speaker(request, split)
        if request.text:
            self._check_text_voices(request.text)
        stream = TextStream(deltas, segmenter, speak, self.sample_rate)
        stream.ignored = ignored
        return stream

    def _check_text_voices(self, text: str) -> None:
        """Every voice ``text``'s tags or SSML name, found before any of it is
        spoken (``UnknownTaggedVoice``)."""
        script = script_of(text)
        for part in script.parts if script is not None else []:
            if isinstance(part, Spoken) and part.voicing.voice is not None:
                self._voice_named(part.voicing.voice)

    def astream_text(
        self,
        deltas: AsyncIterable[str],
        voice: Any = None,
        *,
        split: str = "sentence",
        **options: Any,
    ) -> AsyncTextStream:
        """``stream_text`` for asyncio: ``async for chunk in ...``; ``aclose()``
        cancels."""
        request = SpeechRequest.of("", voice, **options)
        segmenter, speak, _ = self._text_speaker(request, split)
        feed = TextFeed()
        stream = TextStream(feed, segmenter, speak, self.sample_rate)
        return AsyncTextStream(deltas, feed, stream)

    def _text_speaker(self, request: SpeechRequest, split: str):
        """The segmenter, the per-segment stream of a text stream and the
        fields the model ignores, checked once so that a bad option fails the
        call, not a segment."""
        segmenter = TextSegmenter(split)
        # a clip is decoded once for every segment (it cost each a decode)
        resolved = self._reusable(self.resolve(request))
        ignored = self.check_resolved(resolved, "Checking the options.")
        limit, read_out, paused = self.max_text_chars, 0, 0.0
        tagged_voice = None  # a voice tag's voice holds until the next tag

        def speak(text: str) -> SpeechStream:
            # the limits hold for the whole stream, as for one request
            nonlocal read_out, paused, tagged_voice
            script = script_of(text, tagged_voice)
            tagged_voice = voice_after(text, tagged_voice)
            parts = script.parts if script is not None else [Spoken(text, Voicing())]
            paused += pause_seconds(parts)
            check_pauses(paused)
            read_parts, read = self._read_parts(parts, resolved)
            read_out += read
            if limit is not None and read_out > limit:
                raise TextTooLong(
                    f"this text passed {limit} characters as it is read out; "
                    "the rest is not spoken",
                )
            if script is not None:
                return self._paused(read_parts, resolved, script.ignored)
            (part,) = read_parts
            language = resolved.asked.language
            family_request = self._prepared(
                resolved, part.read, part.ref_text, resolved.voice, language
            )
            return self._opened(family_request, resolved.speed)

        return segmenter, speak, ignored
