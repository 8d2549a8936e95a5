"""A ``synthesize`` or ``synthesize-start`` event's fields, checked: its
voice (a name from ``info``: default, a preset, a saved voice or an alias;
never a path), language and text format, and a ``synthesize``'s text."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from wyoming.tts import SynthesizeTextFormat

from ..errors import shown
from ..text.ssml import is_ssml, ssml_verdict
from ..text.stream import TextFeed, TextStream
from ..tts import TTS
from ..voices.resolve import UnknownVoiceName, resolve_voice


class BadEvent(Exception):
    """What is wrong with an event, for its ``error`` event."""

    def __init__(self, message: str, code: str = "bad-request"):
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class SpeechAsked:
    text: str | None  # a synthesize's; None: a stream's, which comes in chunks
    open_stream: Callable[[TextFeed], TextStream]  # checks the options (ValueError)
    ssml: bool = False  # text_format "ssml"


class DeclaredSsml:
    """The text feed of a request declared SSML (a ``synthesize``'s whole
    text, or a stream's chunks): a text that is a document's content only
    becomes the document (``<speak>`` … ``</speak>``) once its start tells
    which it is; a ``<speak>`` document passes as it is."""

    def __init__(self, feed: TextFeed):
        self._feed = feed
        self._held = ""
        self._closing: str | None = None  # decided: what ends the document
        self._ended = False

    def put(self, text: str) -> None:
        if self._closing is None:
            self._held += text
            if ssml_verdict(self._held) is None:
                return
            text = self._decided()
        self._feed.put(text)

    def end(self, error: BaseException | None = None) -> None:
        if error is None and not self._ended:
            text = self._decided() if self._closing is None else ""
            self._feed.put(text + self._closing)
        self._ended = True
        self._feed.end(error)

    def _decided(self) -> str:
        """The held text, opened as a document where it is content only."""
        whole = is_ssml(self._held)
        self._closing = "" if whole else "</speak>"
        held, self._held = self._held, ""
        return held if whole else "<speak>" + held


def speech_asked(data: dict, tts: TTS, state: Any, needs_text: bool) -> SpeechAsked:
    ssml = _is_ssml_format(data.get("text_format"))
    text = data.get("text") if needs_text else None
    if needs_text:
        if not isinstance(text, str):
            raise BadEvent("synthesize needs a string 'text'")
        limit = state.settings.max_input_chars
        if len(text) > limit:
            raise BadEvent(
                f"the text has {len(text)} characters; at most {limit} are spoken",
                "too-long",
            )
    voice, language = _voice(data.get("voice"), tts, state)
    options = {} if language is None else {"language": language}

    def open_stream(feed: TextFeed) -> TextStream:
        return tts.stream_text(feed, voice, **options)

    return SpeechAsked(text, open_stream, ssml)


def _is_ssml_format(text_format: Any) -> bool:
    if text_format in (None, SynthesizeTextFormat.TEXT.value):
        return False
    if text_format == SynthesizeTextFormat.SSML.value:
        return True
    raise BadEvent(f"unknown text_format {shown(text_format)}; 'text' or 'ssml' is spoken")


def _voice(voice: Any, tts: TTS, state: Any) -> tuple[Any, str | None]:
    """The voice as the model takes it, and the language asked (if any)."""
    if voice is None:
        return None, None
    if not isinstance(voice, dict):
        raise BadEvent("'voice' must be an object with a 'name' or a 'language'")
    name, language = voice.get("name"), voice.get("language")
    if language is not None and not isinstance(language, str):
        raise BadEvent("the voice's 'language' must be a string")
    if name is None:
        return None, language
    if not isinstance(name, str):
        raise BadEvent("the voice's 'name' must be a string")
    try:
        resolved = resolve_voice(
            name,
            presets=tts.voices,
            find_saved=state.store.find,
            hint="describe lists the available ones",
            paths=False,
            aliases=tts.voice_aliases,
        )
    except UnknownVoiceName as error:
        raise BadEvent(str(error), "unknown-voice") from None
    return resolved, language
