"""Captions on the wire: the SSE event after each segment's audio, and
Kokoro-FastAPI's captioned-speech JSON (``audio`` base64, ``audio_format``,
``timestamps``), whose entries here are segments (a sentence or clause), not
words: ``word`` holds the segment's text, as Kokoro's clients read it."""

from __future__ import annotations

import base64
import json

from ...text.captions import Caption


def caption_event(caption: Caption) -> dict:
    return {
        "type": "speech.audio.caption",
        "index": caption.index,
        "text": caption.text,
        "start_sample": caption.start,
        "end_sample": caption.end,
        "start": caption.start_seconds,
        "end": caption.end_seconds,
    }


class CaptionedLines:
    """Kokoro's ``CaptionedSpeechResponse`` objects, one per line."""

    def __init__(self, content_type: str, timestamps: bool):
        self._content_type = content_type
        self._timestamps = timestamps

    def line(self, audio: bytes, captions: list[Caption]) -> bytes:
        entries = [_timestamp(caption) for caption in captions] if self._timestamps else []
        return _json_line(
            {
                "audio": base64.b64encode(audio).decode(),
                "audio_format": self._content_type,
                "timestamps": entries,
            }
        )


def error_line(message: str) -> bytes:
    """The last line of a captioned stream that failed or was cut short."""
    return _json_line({"error": {"message": message, "type": "server_error"}})


def _timestamp(caption: Caption) -> dict:
    return {
        "word": caption.text,
        "start_time": caption.start_seconds,
        "end_time": caption.end_seconds,
        "start_sample": caption.start,
        "end_sample": caption.end,
    }


def _json_line(document: dict) -> bytes:
    return (json.dumps(document, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
