"""What a ``voice`` means: one policy for HTTP, the CLI and Python.

A name, in this order: ``"default"`` (any case) is the model's own voice; a
preset of the loaded family (any case) is that preset, by its own spelling;
an alias the user set (``--voice-alias alloy=grandma``) is the voice it names;
a saved voice's name is that voice (names win over file paths); one of
OpenAI's built-in voice names (any case) is the model's own voice, since
OpenAI clients require one; where paths are allowed (CLI, Python), a path to
an existing file is a clip to clone. Any other name is unknown. A
``SavedVoice``, a path object, audio bytes and ``(samples, sample_rate)``
are taken as they are.

What comes out is what the families take: ``None`` (the default voice), a
preset name (``str``), a ``SavedVoice``, or a clip (``Path``, bytes, or
``(samples, sample_rate)``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..audio.formats import FORMATS
from ..errors import InvalidRequest, shown
from .store import SavedVoice

DEFAULT_VOICE = "default"
# Kokoro-FastAPI's voice mixes, "af_bella+af_sky" or weighted "af_bella(2)":
# no voice's name has a "+" or a "(" (``store.NAME_PATTERN``).
_KOKORO_MIX = re.compile(r"\+|\(\s*\d")
# The names OpenAI's clients and tutorials send (its API requires a voice).
OPENAI_VOICES = (
    "alloy",
    "ash",
    "ballad",
    "coral",
    "echo",
    "fable",
    "onyx",
    "nova",
    "sage",
    "shimmer",
    "verse",
    "marin",
    "cedar",
)


def parse_aliases(pairs: Sequence[str]) -> dict[str, str]:
    """``["alloy=grandma", …]`` → ``{"alloy": "grandma"}``; names in any case."""
    aliases = {}
    for pair in pairs:
        name, separator, target = pair.partition("=")
        if not separator or not name.strip() or not target.strip():
            raise ValueError(f"a voice alias is NAME=VOICE, got {pair!r}")
        aliases[name.strip().lower()] = target.strip()
    return aliases


class UnknownVoiceName(InvalidRequest):
    """A name that is no preset, saved voice or (where allowed) audio file."""

    def __init__(self, name: str, hint: str):
        super().__init__("voice", f"unknown voice {shown(name)}: {hint}")
        self.name = name


class UnknownTaggedVoice(InvalidRequest):
    """A voice tag's or an SSML ``<voice>``'s name that is no voice: a fault
    of the text, where ``UnknownVoiceName`` is the request's own voice."""


def resolve_voice(
    voice: Any,
    *,
    presets: Sequence[str],
    find_saved: Callable[[str], SavedVoice | None],
    hint: str,
    paths: bool,
    aliases: Mapping[str, str] | None = None,
) -> Any:
    """``voice`` as the families take it; ``hint`` (what the caller may
    pass instead) completes the unknown-name error."""
    if isinstance(voice, os.PathLike):
        return Path(voice)
    if not isinstance(voice, str):
        return voice
    if voice.lower() == DEFAULT_VOICE:
        return None
    by_name = {name.lower(): name for name in presets}
    if voice.lower() in by_name:
        return by_name[voice.lower()]
    if aliases and voice.lower() in aliases:
        target = aliases[voice.lower()]
        return resolve_voice(
            target,
            presets=presets,
            find_saved=find_saved,
            paths=paths,
            hint=f"the alias {shown(voice)} names no voice ({shown(target)})",
        )
    saved = find_saved(voice)
    if saved is not None:
        return saved
    if voice.lower() in OPENAI_VOICES:
        return None
    if paths and Path(voice).is_file():
        return Path(voice)
    if paths and _names_a_file(voice):
        hint = f"no file {shown(voice)} exists, and no saved voice has that name"
    elif _KOKORO_MIX.search(voice):
        raise InvalidRequest(
            "voice", f"mixing voices ({shown(voice)}) is not supported: name one voice"
        )
    raise UnknownVoiceName(voice, hint)


def _names_a_file(voice: str) -> bool:
    """Whether a voice name reads as a path: a directory in it, or an audio
    file's suffix."""
    suffix = Path(voice).suffix.lstrip(".").lower()
    return os.sep in voice or suffix in FORMATS or suffix in ("m4a", "webm")
