"""A text stream's segments spoken one after another as one request: a
voice tag holds until the next, and the length limit and the pauses' total
count over the whole stream."""

from __future__ import annotations

from collections.abc import Callable

from ..text.pauses import check_pauses, pause_seconds
from ..text.script import Spoken, Voicing, script_of, voice_after
from .limits import TextLimit
from .opening import Opener
from .resolution import Resolved, Voices
from .streams import SpeechStream


def segment_speaker(
    opener: Opener, limit: TextLimit, resolved: Resolved
) -> Callable[[str], SpeechStream]:
    """Each segment's stream, in ``resolved``'s voice and options (its
    voice in the form the family takes again cheaply)."""
    read_out, paused = 0, 0.0
    tagged_voice = None  # a voice tag's voice holds until the next tag

    def speak(text: str) -> SpeechStream:
        nonlocal read_out, paused, tagged_voice
        script = script_of(text, tagged_voice)
        tagged_voice = voice_after(text, tagged_voice)
        parts = script.parts if script is not None else [Spoken(text, Voicing())]
        paused += pause_seconds(parts)
        check_pauses(paused)
        read_parts, read = opener.read_parts(parts, resolved)
        read_out += read
        limit.check_stream(read_out)
        if script is not None:
            return opener.paused(read_parts, resolved, script.ignored)
        (part,) = read_parts
        request = opener.prepare(resolved, part.read, part.ref_text)
        return opener.started(request, resolved.speed)

    return speak


def check_tagged_voices(text: str, voices: Voices) -> None:
    """Every voice ``text``'s tags or SSML name, found before any of it is
    spoken (``UnknownTaggedVoice``)."""
    script = script_of(text)
    for part in script.parts if script is not None else []:
        if isinstance(part, Spoken) and part.voicing.voice is not None:
            voices.named(part.voicing.voice)
