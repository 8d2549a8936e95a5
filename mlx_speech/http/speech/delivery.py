"""How a speech request's audio goes back: the kinds its fields choose
between (``stream``, ``stream_format``, the captioned route's ``stream``)."""

from __future__ import annotations

from enum import Enum


class DeliveryMode(Enum):
    AUDIO = "audio"  # the file, streamed as it is made (OpenAI's default)
    SSE = "sse"  # server-sent events of base64 audio, then usage
    BUFFERED = "buffered"  # the file whole, with its length
    CAPTIONED = "captioned"  # Kokoro's captioned JSON lines, streamed
    CAPTIONED_WHOLE = "captioned-whole"  # Kokoro's captioned JSON, whole
