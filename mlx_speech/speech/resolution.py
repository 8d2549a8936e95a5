"""A ``SpeechRequest`` resolved once, for every surface: its voice by the
one policy (``voices.resolve``), its pace, whether it is normalized, and
its text's length as written."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..audio.time_stretch import check_speed
from ..errors import InvalidRequest
from ..families import SpeechService
from ..request import SpeechRequest
from ..voices.resolve import UnknownTaggedVoice, UnknownVoiceName, resolve_voice
from ..voices.store import VoiceStore
from .limits import TextLimit


@dataclass(frozen=True)
class Resolved:
    asked: SpeechRequest
    voice: Any  # as the family takes it
    speed: float
    normalize: bool


class Voices:
    """What a voice means to a model: its presets, the saved voices, the
    server's aliases, and files where a surface allows them."""

    def __init__(self, service: SpeechService, store: VoiceStore, aliases: dict[str, str]):
        self._service = service
        self.store = store
        self.aliases = aliases  # name (lower case) → voice

    def resolve(self, voice: Any, *, paths: bool, hint: str | None = None) -> Any:
        """The one place a voice is resolved, for every surface."""
        return resolve_voice(
            voice,
            presets=self._service.voices,
            find_saved=self.store.find,
            hint=hint or self._service.voice_hint,
            paths=paths,
            aliases=self.aliases,
        )

    def named(self, name: str) -> Any:
        """A voice tag's or SSML ``<voice name=>``'s voice (never a file), in
        the form the family takes again cheaply. Unknown, it is a fault of
        the text, not an ``UnknownVoiceName`` (the request's own voice,
        which HTTP answers with 404)."""
        try:
            voice = self.resolve(name, paths=False)
        except UnknownVoiceName as error:
            raise UnknownTaggedVoice(error.param, str(error)) from None
        return self._service.reusable_voice(voice)


def resolve(
    request: SpeechRequest, voices: Voices, limit: TextLimit, normalize_default: bool
) -> Resolved:
    """``request`` resolved, once: its voice found, its pace, its
    normalization and its text's length as written checked (``ValueError``)."""
    speed = check_speed(request.speed)
    normalize = _normalizes(request.normalize, normalize_default)
    # a text that is no string is check_text's to refuse, as it is read
    written = request.text if isinstance(request.text, str) else ""
    limit.check(written, len(written))
    voice = voices.resolve(
        request.voice, paths=request.voice_paths, hint=request.voice_hint
    )
    return Resolved(request, voice, speed, normalize)


def _normalizes(normalize: Any, default: bool) -> bool:
    if normalize is None:
        return default
    if not isinstance(normalize, bool):
        raise InvalidRequest("normalize", "normalize must be true or false")
    return normalize
