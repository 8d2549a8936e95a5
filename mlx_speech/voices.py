"""What a ``voice`` means: one policy for HTTP, the CLI and Python.

A name, in this order: ``"default"`` (any case) is the model's own voice; a
preset of the loaded family (any case) is that preset, by its own spelling;
a saved voice's name is that voice (names win over file paths); where paths
are allowed (CLI, Python), a path to an existing file is a clip to clone.
Any other name is unknown. A ``SavedVoice``, a path object, audio bytes and
``(samples, sample_rate)`` are taken as they are.

What comes out is what the families take: ``None`` (the default voice), a
preset name (``str``), a ``SavedVoice``, or a clip (``Path``, bytes, or
``(samples, sample_rate)``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .errors import InvalidRequest, shown
from .voice_store import SavedVoice

DEFAULT_VOICE = "default"


class UnknownVoiceName(InvalidRequest):
    """A name that is no preset, saved voice or (where allowed) audio file."""

    def __init__(self, name: str, hint: str):
        super().__init__("voice", f"unknown voice {shown(name)}: {hint}")
        self.name = name


def resolve_voice(
    voice: Any,
    *,
    presets: Sequence[str],
    find_saved: Callable[[str], SavedVoice | None],
    hint: str,
    paths: bool,
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
    saved = find_saved(voice)
    if saved is not None:
        return saved
    if paths and Path(voice).is_file():
        return Path(voice)
    raise UnknownVoiceName(voice, hint)
