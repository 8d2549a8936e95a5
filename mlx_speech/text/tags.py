"""Kokoro-FastAPI's inline tags in plain text: ``[pause:1.5s]`` or
``[pause:300ms]`` is exact silence in its place, and ``[voice:NAME]`` speaks
what follows in that voice, as SSML's ``<break>`` and ``<voice name>`` do.
A tag is never said."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import InvalidRequest
from .pauses import Pause, check_pauses, pause_seconds

_PAUSE = r"\[\s*pause\s*:\s*(?P<seconds>\d+(?:\.\d+)?)\s*(?P<unit>ms|s)\s*\]"
# Kokoro-FastAPI's voice names, its mixes (``af_bella(2)+af_sky``) included,
# so that a mix is refused as one rather than said.
_VOICE = r"\[\s*voice\s*:\s*(?P<voice>[A-Za-z0-9_][A-Za-z0-9_+\-(). ]*?)\s*\]"
TAG = re.compile(f"{_PAUSE}|{_VOICE}", re.IGNORECASE)
# Kokoro-FastAPI's [rate:] tag, which is not read here: refused, so that it
# is never said.
_UNREAD = re.compile(r"\[\s*rate\s*:[^\]\n]{0,32}\]", re.IGNORECASE)


@dataclass(frozen=True)
class VoiceChange:
    """``[voice:NAME]``: the text after it, up to the next, in that voice."""

    voice: str


def split_tags(text: str) -> list[str | Pause | VoiceChange]:
    """``text`` cut at its tags: its parts, pauses and voice changes in order,
    parts of only whitespace left out."""
    unread = _UNREAD.search(text)
    if unread is not None:
        raise InvalidRequest(
            "text",
            f"the tag {unread.group()!r} is not read here: set the request's speed "
            "(0.25 to 4), or use SSML's <prosody rate>; the tags read are [pause:] "
            "and [voice:]",
        )
    parts: list[str | Pause | VoiceChange] = []
    position = 0
    for match in TAG.finditer(text):
        parts += [text[position : match.start()], _tag(match)]
        position = match.end()
    parts.append(text[position:])
    check_pauses(pause_seconds(parts))
    return [part for part in parts if not isinstance(part, str) or part.strip()]


def _tag(match: re.Match) -> Pause | VoiceChange:
    if match.group("voice") is not None:
        return VoiceChange(match.group("voice"))
    value = float(match.group("seconds"))
    return Pause(value / 1000 if match.group("unit").lower() == "ms" else value)


def without_tags(text: str) -> str:
    """``text`` as it is shown (in captions): its tags taken out."""
    return " ".join(TAG.sub(" ", text).split())
