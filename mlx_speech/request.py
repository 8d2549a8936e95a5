"""``SpeechRequest``: one request to speak, as every surface asks it.

Each adapter builds one (HTTP from a body, the WebSocket from its
``session.config``, Wyoming from a ``synthesize`` event, the CLI from its
flags, the Python API from its keywords) and checks only its own protocol's
shapes. ``TTS`` resolves it once, in one place: the voice found by its name,
the pace, normalization and the text's length checked; the family then
checks the rest (language, sampling, channels) as it prepares the work.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from .errors import InvalidRequest


@dataclass(frozen=True)
class SpeechRequest:
    # What to say: plain text, SSML or text with pause tags (``text.script``).
    # A text stream's comes in pieces instead, and this stays empty.
    text: str = ""
    # As asked: a name (default, a preset, an alias, a saved voice; where
    # ``voice_paths``, an audio file's path), a clip (a path, its bytes or
    # ``(samples, rate)``), a ``SavedVoice``, or None for the model's own.
    voice: Any = None
    ref_text: str | None = None
    instructions: str | None = None
    language: str | None = None
    speed: float | None = None  # None: 1.0
    normalize: bool | None = None  # None: the model's default (``TTS.normalize``)
    channels: int | None = None  # None: mono
    # The sampling keywords (``families.options.SamplingOptions``); the
    # family refuses any other.
    sampling: Mapping[str, Any] = field(default_factory=dict)
    voice_paths: bool = True  # servers take names only, never a file's path
    voice_hint: str | None = None  # what to pass instead, for an unknown name

    @classmethod
    def of(cls, text: str, voice: Any = None, **options: Any) -> SpeechRequest:
        """The Python API's keywords as a request: the fields by their names,
        every other keyword a sampling one."""
        own = {name: options.pop(name) for name in KEYWORDS if name in options}
        return cls(text, voice, sampling=options, **own)


# The keywords of ``TTS.stream`` that are fields of their own
KEYWORDS = tuple(
    item.name
    for item in fields(SpeechRequest)
    if item.name not in ("text", "voice", "sampling", "voice_paths", "voice_hint")
)


class TextTooLong(InvalidRequest):
    """A text longer than the server takes, as written or as read out."""

    def __init__(self, message: str):
        super().__init__("text", message)
