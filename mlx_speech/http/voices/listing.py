"""The voices endpoints' JSON, in one shape that the clients people run read:
``voices`` entries with ``id`` and ``name`` (Open WebUI, the OpenAI SDK's
custom voices), and ``uploaded_voices`` as vLLM-Omni lists them."""

from __future__ import annotations

import mimetypes
from typing import Any

from ...voices.resolve import DEFAULT_VOICE
from ...voices.store import SavedVoice


def _entry(name: str, kind: str) -> dict[str, Any]:
    return {"id": name, "name": name, "kind": kind}


def saved_entry(voice: SavedVoice) -> dict[str, Any]:
    entry = _entry(voice.name, "saved")
    entry.update(duration_s=round(voice.duration_s, 3), created=int(voice.created))
    if voice.ref_text is not None:
        entry["ref_text"] = voice.ref_text
    return entry


def uploaded_entry(voice: SavedVoice) -> dict[str, Any]:
    """vLLM-Omni's description of an uploaded voice."""
    try:
        size = voice.clip.stat().st_size
    except OSError:  # removed meanwhile
        size = 0
    entry = {
        "name": voice.name,
        "created_at": int(voice.created),
        "file_size": size,
        "mime_type": mimetypes.guess_type(voice.clip_name)[0] or "application/octet-stream",
    }
    if voice.ref_text is not None:
        entry["ref_text"] = voice.ref_text
    return entry


def voices_listing(presets: list[str], saved: list[SavedVoice]) -> dict[str, Any]:
    return {
        "voices": [
            _entry(DEFAULT_VOICE, "default"),
            *(_entry(name, "preset") for name in presets),
            *(saved_entry(voice) for voice in saved),
        ],
        "uploaded_voices": [uploaded_entry(voice) for voice in saved],
    }


def created_voice(voice: SavedVoice) -> dict[str, Any]:
    """The new voice as the OpenAI SDK's ``audio.voices.create`` reads it
    (``id``, ``object``, ``created_at``, ``type``), with vLLM-Omni's
    ``success`` and ``voice`` beside it."""
    return {
        **saved_entry(voice),
        "object": "audio.voice",
        "created_at": int(voice.created),
        "type": "audio_sample",
        "success": True,
        "voice": uploaded_entry(voice),
    }


def removed_voice(name: str) -> dict[str, Any]:
    """OpenAI's ``VoiceDeleted`` with vLLM-Omni's ``success`` and ``message``."""
    message = f"voice {name} deleted"
    return {
        "id": name,
        "object": "audio.voice.deleted",
        "deleted": True,
        "success": True,
        "message": message,
    }
