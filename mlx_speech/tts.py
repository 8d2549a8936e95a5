"""``TTS``: a loaded model, speaking from any thread through the shared
worker. The public face: what a request means is resolved, read and opened
in ``speech/``."""

from __future__ import annotations

from collections.abc import AsyncIterable, Callable, Iterable
from typing import Any

import numpy as np

from .audio.samples import Audio
from .engine import Engine
from .families import SpeechService
from .families.fields import check_text
from .families.languages import language_codes
from .request import SpeechRequest
from .speech.limits import TextLimit
from .speech.opening import Opener
from .speech.reading import Reading
from .speech.resolution import Resolved, Voices, resolve
from .speech.streams import SpeechStream
from .speech.text_speaking import check_tagged_voices, segment_speaker
from .text.lexicon import Lexicon
from .text.normalization import TextNormalizer
from .text.segments import TextSegmenter
from .text.stream import AsyncTextStream, TextFeed, TextStream
from .voices.store import VoiceStore

__all__ = ["TTS", "Resolved", "SpeechStream"]


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
        self.normalize = normalize  # the default of a request's ``normalize``
        self._limit = TextLimit()
        self._reading = Reading(normalizer or TextNormalizer(), self._limit)
        self._voices = Voices(service, voice_store, dict(voice_aliases or {}))
        self._opener = Opener(service, engine, self._reading, self._voices)
        self.backend_reason = ""  # why ``backend`` runs, in a few words (``load``)
        self.model = ""  # the checkpoint's folder (``load``)

    # What the model is, and how it reads.

    family = property(lambda self: self._service.name)
    backend = property(
        lambda self: self._service.backend,
        doc='What runs the model: "mlx", or "host" (the host engine beside MLX).',
    )
    sample_rate = property(lambda self: self._service.sample_rate)
    channels = property(
        lambda self: self._service.channels,
        doc="The model's own channel count (``channels=`` may ask for it; 1 is "
        "the default).",
    )
    streaming = property(
        lambda self: self._service.streaming,
        doc='"incremental" (chunks as frames are generated) or "buffered".',
    )
    voices = property(lambda self: list(self._service.voices))
    voice_store = property(lambda self: self._voices.store)
    voice_aliases = property(
        lambda self: self._voices.aliases, doc="name (lower case) → voice"
    )
    normalizer = property(lambda self: self._reading.normalizer)

    @property
    def languages(self) -> tuple[str, ...]:
        """ISO 639-1 codes of the languages the model speaks (for a model that
        takes any language, those of ``families.languages``' table)."""
        return language_codes(getattr(self._service, "languages", None))

    @property
    def max_text_chars(self) -> int | None:
        """The longest text the model is given, counted as it reads it (after
        normalization, which can make text several times longer); None: any."""
        return self._limit.most

    @max_text_chars.setter
    def max_text_chars(self, most: int | None) -> None:
        self._limit.most = most

    @property
    def lexicon(self) -> Lexicon | None:
        """Words said otherwise, applied before normalization."""
        return self._reading.lexicon

    @lexicon.setter
    def lexicon(self, lexicon: Lexicon | None) -> None:
        self._reading.lexicon = lexicon

    def stats(self) -> dict[str, float]:
        """The family's counters (e.g. reference cache hits) and the text
        normalizer's (texts, seconds spent, words it could not read)."""
        return {**self._service.stats(), **self.normalizer.stats()}

    def normalized(self, text: str, language: str | None = None) -> str:
        """``text`` as the model is given it when normalization is on (the
        lexicon's words said otherwise, then read out)."""
        return self._reading.normalized(text, language)

    # Checking a request.

    def resolve_voice(self, voice: Any) -> Any:
        """``voice`` by the one policy (``voices.resolve``), file paths allowed."""
        return self._voices.resolve(voice, paths=True)

    def resolve(self, request: SpeechRequest) -> Resolved:
        """``request`` resolved, once: its voice found, its pace, its
        normalization and its text's length checked (``ValueError``)."""
        return resolve(request, self._voices, self._limit, self.normalize)

    def prepare(self, text: str, voice: Any = None, **options: Any) -> Any:
        """Validate a request (``ValueError``) without running it; returns the
        family's request. Takes the keywords of ``stream``. ``normalize``
        (default: the TTS's) reads numbers, symbols and dates out and cleans
        the text (``mlx_speech.text.normalization``) before the model sees it.
        ``channels`` 2 asks for a stereo model's own channels (``channels``)
        instead of their mono mix; chunks are then ``[samples, 2]``."""
        resolved = self.resolve(SpeechRequest.of(text, voice, **options))
        asked = resolved.asked
        read, ref_text = self._reading.as_read(
            asked.text, asked.ref_text, asked.language, resolved.normalize
        )
        return self._opener.prepare(resolved, read, ref_text)

    def check(self, text: str, voice: Any = None, **options: Any) -> tuple[str, ...]:
        """Validate what ``stream`` takes (``ValueError``) without running it;
        returns the fields the model ignores."""
        return self.check_request(SpeechRequest.of(text, voice, **options))

    def check_request(self, request: SpeechRequest) -> tuple[str, ...]:
        """``check`` for a ``SpeechRequest``: its text is checked, not read out."""
        check_text(request.text)
        return self.check_options(request)

    def check_options(self, request: SpeechRequest) -> tuple[str, ...]:
        """``check_request`` of all but the text, whose pieces are to come."""
        return self.check_resolved(self.resolve(request))

    def check_resolved(self, resolved: Resolved) -> tuple[str, ...]:
        """The family's checks of a resolved request but its text."""
        return self._opener.check(resolved)

    # Speaking.

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
        return self._opener.open(self.resolve(request))

    def opener(self, resolved: Resolved) -> Callable[[str], SpeechStream]:
        """``open`` for many texts in a resolved request's voice and options
        (a clip decoded once); each text is checked as it opens."""
        return self._opener.opener(resolved)

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
            check_tagged_voices(request.text, self._voices)
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
        resolved = self._opener.reusable(self.resolve(request))
        ignored = self.check_resolved(resolved)
        return segmenter, segment_speaker(self._opener, self._limit, resolved), ignored
