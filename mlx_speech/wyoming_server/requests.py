"""A ``synthesize`` or ``synthesize-start`` event as a ``SpeechRequest``: the
shapes of its voice (a name from ``info``: default, a preset, a saved voice or
an alias; never a path), language, text format and a ``synthesize``'s text
checked here; what they mean ``TTS`` resolves as the request opens."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from wyoming.tts import SynthesizeTextFormat

from ..errors import shown
from ..request import SpeechRequest
from ..text.ssml import is_ssml, ssml_verdict
from ..text.stream import TextFeed, TextStream
from ..tts import TTS

# What an unknown voice's error tells a Wyoming client to look at
VOICE_HINT = "describe lists the available ones"


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


def speech_asked(data: dict, tts: TTS, needs_text: bool) -> SpeechAsked:
    ssml = _is_ssml_format(data.get("text_format"))
    text = data.get("text") if needs_text else None
    if needs_text and not isinstance(text, str):
        raise BadEvent("synthesize needs a string 'text'")
    name, language = _voice(data.get("voice"))
    # a synthesize's text is known whole: its length is checked as it opens
    request = SpeechRequest(
        text or "", name, language=language, voice_paths=False, voice_hint=VOICE_HINT
    )

    def open_stream(feed: TextFeed) -> TextStream:
        return tts.open_text(feed, request)

    return SpeechAsked(text, open_stream, ssml)


def _is_ssml_format(text_format: Any) -> bool:
    if text_format in (None, SynthesizeTextFormat.TEXT.value):
        return False
    if text_format == SynthesizeTextFormat.SSML.value:
        return True
    raise BadEvent(f"unknown text_format {shown(text_format)}; 'text' or 'ssml' is spoken")


def _voice(voice: Any) -> tuple[str | None, str | None]:
    """The voice's name and the language asked (either may be absent)."""
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
    return name, language
