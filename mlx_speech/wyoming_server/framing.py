"""Wyoming's framing, read within bounds.

An event is a JSON header line (``type``, maybe ``data``, ``data_length``,
``payload_length``), then ``data_length`` bytes of JSON merged into its
data, then ``payload_length`` bytes of payload: the ``wyoming`` package's
format, whose ``Event`` and event classes we use. Its reader takes any
length a client declares and waits for that many bytes; this one refuses
an event past the bounds before reading its body, so a client cannot make
the server hold more than about a text's worth of bytes.
"""

from __future__ import annotations

import io
import json
from typing import Any

import anyio
from anyio.streams.buffered import BufferedByteReceiveStream
from wyoming.event import Event, write_event

MAX_HEADER_BYTES = 64 * 1024
# A speech server is sent no audio; a client that sends some anyway is
# read past, up to this much an event.
MAX_PAYLOAD_BYTES = 1024 * 1024


class FramingError(Exception):
    """The bytes are no Wyoming event within the bounds: the connection
    cannot be read further."""


async def read_event(
    stream: BufferedByteReceiveStream, max_data_bytes: int
) -> Event | None:
    """The next event, or ``None`` once the client has closed its side."""
    try:
        line = await stream.receive_until(b"\n", MAX_HEADER_BYTES)
    except (anyio.IncompleteRead, anyio.EndOfStream):
        return None
    except anyio.DelimiterNotFound:
        raise FramingError(
            f"an event's header line passed {MAX_HEADER_BYTES} bytes"
        ) from None
    header = _json_object(line, "an event's header line")
    kind = header.get("type")
    if not isinstance(kind, str) or not kind:
        raise FramingError("an event's header has no 'type'")
    data = header.get("data") or {}
    if not isinstance(data, dict):
        raise FramingError("an event's 'data' is not a JSON object")
    data_length = _length(header, "data_length", max_data_bytes)
    payload_length = _length(header, "payload_length", MAX_PAYLOAD_BYTES)
    try:
        if data_length:
            data.update(_json_object(await stream.receive_exactly(data_length), "data"))
        payload = await stream.receive_exactly(payload_length) if payload_length else None
    except (anyio.IncompleteRead, anyio.EndOfStream):
        return None
    return Event(type=kind, data=data, payload=payload)


def event_bytes(event: Event) -> bytes:
    """``event`` framed as the ``wyoming`` package writes it."""
    buffer = io.BytesIO()
    write_event(event, buffer)
    return buffer.getvalue()


def _length(header: dict, name: str, most: int) -> int:
    length = header.get(name) or 0
    if isinstance(length, bool) or not isinstance(length, int) or length < 0:
        raise FramingError(f"an event's '{name}' is not a length")
    if length > most:
        raise FramingError(
            f"an event's '{name}' is {length} bytes; at most {most} are read"
        )
    return length


def _json_object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        parsed = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):  # nested past the parser
        raise FramingError(f"{what} is not JSON") from None
    if not isinstance(parsed, dict):
        raise FramingError(f"{what} is not a JSON object")
    return parsed
