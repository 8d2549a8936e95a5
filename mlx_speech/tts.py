"""``TTS``: a loaded model, speaking from any thread through the shared worker."""

from __future__ import annotations

from collections.abc import AsyncIterable, Iterable
from dataclasses import dataclass
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
from .text.lexicon import Lexicon
from .text.normalization import TextNormalizer
from .text.pauses import Pause, PausedStream, check_pauses, pause_seconds
from .text.script import Spoken, Voicing, script_of
from .text.segments import TextSegmenter
from .text.stream import AsyncTextStream, TextFeed, TextStream
from .voices.clip_rules import check_ref_text
from .voices.resolve import resolve_voice
from .voices.store import VoiceStore

# ``normalize=AS_READ``: the text is already as the model reads it (the
# lexicon applied and normalized, as ``stream_text`` does per segment).
AS_READ = object()


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
        return self._resolved(voice, paths=True)

    def _resolved(self, voice: Any, *, paths: bool) -> Any:
        return resolve_voice(
            voice,
            presets=self._service.voices,
            find_saved=self.voice_store.find,
            hint=self._service.voice_hint,
            paths=paths,
            aliases=self.voice_aliases,
        )

    def prepare(
        self,
        text: str,
        voice: Any = None,
        ref_text: str | None = None,
        instructions: str | None = None,
        language: str | None = None,
        normalize: bool | None = None,
        channels: int | None = None,
        **sampling: Any,
    ) -> Any:
        """Validate a request (``ValueError``) without running it; returns the
        family's request, which ``stream`` then runs. ``normalize`` (default:
        the TTS's) reads numbers, symbols and dates out and cleans the text
        (``mlx_speech.text.normalization``) before the model sees it. ``channels``
        2 asks for a stereo model's own channels (``channels``) instead of
        their mono mix; chunks are then ``[samples, 2]``."""
        text, ref_text = self._as_read(text, ref_text, language, normalize)
        asked = SpeechInput(
            text,
            self.resolve_voice(voice),
            ref_text,
            instructions,
            language,
            sampling,
            channels,
        )
        return self._service.prepare(asked)

    def _as_read(
        self, text: str, ref_text: str | None, language: Any, normalize: Any
    ) -> tuple[str, str | None]:
        """``text`` and ``ref_text`` as the model reads them; ``text`` within
        ``max_text_chars``."""
        written = len(text) if isinstance(text, str) else 0
        if isinstance(text, str) and self.lexicon is not None and normalize is not AS_READ:
            text = self._said_by_lexicon(text, written)
        if not self._normalizes(normalize):
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
            raise InvalidRequest(
                "text",
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
        raise InvalidRequest("text", message)

    def check(
        self, text: str, voice: Any = None, *, speed: float | None = None, **options: Any
    ) -> tuple[str, ...]:
        """Validate what ``stream`` takes (``ValueError``) without running it;
        returns the fields the model ignores."""
        check_speed(speed)
        self._normalizes(options.pop("normalize", None))  # checked, not run
        return self.prepare(text, voice, normalize=False, **options).ignored

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
        if normalize is AS_READ:
            return False
        if not isinstance(normalize, bool):
            raise InvalidRequest("normalize", "normalize must be true or false")
        return normalize

    def stream(
        self, text: str, voice: Any = None, *, speed: float | None = None, **options: Any
    ) -> ChunkStream | StretchedStream:
        """Audio chunks as they are produced; the first is a single codec frame.

        Takes the keywords of ``prepare``: ``ref_text``, ``instructions``,
        ``language``, ``normalize``, ``channels`` and the sampling ones. ``speed`` (0.25 to
        4.0) changes the pace, not the pitch (``time_stretch``). The request
        is validated here (``ValueError``); generation starts on the first
        read. ``cancel()`` or dropping the iterator stops it.
        """
        speed = check_speed(speed)
        script = script_of(text) if isinstance(text, str) else None
        if script is None:
            return self._opened(self.prepare(text, voice, **options), speed)
        resolved = self._service.reusable_voice(self.resolve_voice(voice))
        read_parts, _ = self._read_parts(script.parts, options)
        return self._paused(read_parts, resolved, speed, options, tuple(script.ignored))

    def _opened(self, request: Any, speed: float) -> ChunkStream | StretchedStream:
        stream = self._engine.stream(lambda: self._service.synthesize(request))
        stream.ignored = request.ignored
        if speed == 1.0:
            return stream
        return StretchedStream(stream, speed, self.sample_rate)

    def _read_parts(
        self, parts: list[Spoken | Pause], options: dict[str, Any]
    ) -> tuple[list[_ReadPart | Pause], int]:
        """Each part as the model reads it (with its ``ref_text``), and how
        many characters they are together, within ``max_text_chars``."""
        read_parts: list[_ReadPart | Pause] = []
        total = 0
        for part in parts:
            if isinstance(part, Pause):
                read_parts.append(part)
                continue
            language = part.voicing.language or options.get("language")
            read, ref_text = self._as_read(
                part.text, options.get("ref_text"), language, options.get("normalize")
            )
            total += len(read)
            read_parts.append(_ReadPart(read, ref_text, part.voicing))
        if self.max_text_chars is not None and total > self.max_text_chars:
            raise InvalidRequest(
                "text",
                f"the text is more than {self.max_text_chars} characters as it is read "
                "out; send it in parts",
            )
        return read_parts, total

    def _paused(
        self,
        read_parts: list,
        voice: Any,
        speed: float,
        options: dict[str, Any],
        marked: tuple[str, ...] = (),
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
            voicing = part.voicing
            as_read = {**options, "ref_text": part.ref_text, "normalize": AS_READ}
            if voicing.language is not None:
                as_read["language"] = voicing.language
            own_voice = voice if voicing.voice is None else self._voice_named(voicing.voice)
            request = self.prepare(part.read, own_voice, **as_read)
            ignored = request.ignored
            items.append(partial(self._opened, request, check_speed(speed * voicing.pace)))
        channels = options.get("channels") or 1
        return PausedStream(items, self.sample_rate, channels, (*ignored, *marked))

    def _voice_named(self, name: str) -> Any:
        """An SSML ``<voice name=>``: a voice's name (never a file)."""
        return self._service.reusable_voice(self._resolved(name, paths=False))

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
        segmenter, speak, ignored = self._text_speaker(voice, split, options)
        stream = TextStream(deltas, segmenter, speak, self.sample_rate)
        stream.ignored = ignored
        return stream

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
        segmenter, speak, _ = self._text_speaker(voice, split, options)
        feed = TextFeed()
        stream = TextStream(feed, segmenter, speak, self.sample_rate)
        return AsyncTextStream(deltas, feed, stream)

    def _text_speaker(self, voice: Any, split: str, options: dict[str, Any]):
        """The segmenter, the per-segment ``stream`` of a text stream and the
        fields the model ignores, checked once so that a bad option fails the
        call, not a segment."""
        segmenter = TextSegmenter(split)
        # a clip is decoded once for every segment (it cost each a decode)
        resolved = self._service.reusable_voice(self.resolve_voice(voice))
        ignored = self.check("Checking the options.", resolved, **options)

        limit, read_out, paused = self.max_text_chars, 0, 0.0

        def speak(text: str) -> PausedStream | ChunkStream | StretchedStream:
            # the limits hold for the whole stream, as for one request
            nonlocal read_out, paused
            script = script_of(text)
            parts = script.parts if script is not None else [Spoken(text, Voicing())]
            paused += pause_seconds(parts)
            check_pauses(paused)
            read_parts, read = self._read_parts(parts, options)
            read_out += read
            if limit is not None and read_out > limit:
                raise InvalidRequest(
                    "text",
                    f"this text passed {limit} characters as it is read out; "
                    "the rest is not spoken",
                )
            if script is not None:
                speed = check_speed(options.get("speed"))
                unpaced = {key: value for key, value in options.items() if key != "speed"}
                return self._paused(read_parts, resolved, speed, unpaced, script.ignored)
            (part,) = read_parts
            as_read = {**options, "ref_text": part.ref_text, "normalize": AS_READ}
            return self.stream(part.read, resolved, **as_read)

        return segmenter, speak, ignored
