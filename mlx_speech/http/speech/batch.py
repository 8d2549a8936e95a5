"""``POST /v1/audio/speech/batch``, vLLM-Omni's shape: ``items`` (1-32), each
a speech request whose fields override the body's; every item comes back
buffered and base64-encoded, and one bad item fails alone."""

from __future__ import annotations

import base64
import secrets
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...audio.formats import FORMATS, encode_whole
from ...audio.resample import resampled_parts
from ...speech.streams import SpeechStream
from ..errors import ApiError
from .request import HttpSpeech, RequestRules, parse_speech_request

MAX_ITEMS = 32
# Fields that shape one HTTP response, not a batch item's audio.
_RESPONSE_FIELDS = ("items", "stream", "stream_format")


@dataclass
class Item:
    """One item: its request once parsed, then its result."""

    index: int
    request: HttpSpeech | None = None
    stream: SpeechStream | None = None
    result: dict[str, Any] | None = None

    def fail(self, message: str) -> None:
        self.result = {"index": self.index, "status": "error", "error": message}


def parse_items(body: Any, rules: RequestRules) -> list[Item]:
    """Each item merged over the body's defaults and parsed; an item that is
    wrong holds its error, and only a wrong body is an ``ApiError``."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object", param="body")
    entries = body.get("items")
    if not isinstance(entries, list) or not 1 <= len(entries) <= MAX_ITEMS:
        raise ApiError(
            400, f"items must be a list of 1 to {MAX_ITEMS} requests", param="items"
        )
    defaults = {k: v for k, v in body.items() if k not in _RESPONSE_FIELDS}
    items = []
    for index, entry in enumerate(entries):
        item = Item(index)
        if not isinstance(entry, dict):
            item.fail("each item must be a JSON object with at least 'input'")
        else:
            merged = {**defaults, **entry, "stream": False}
            merged.pop("stream_format", None)
            try:
                item.request = parse_speech_request(merged, rules)
            except ApiError as error:
                item.fail(error.message)
        items.append(item)
    return items


def render(stream: SpeechStream, request: HttpSpeech, native_rate: int) -> dict[str, Any]:
    """Blocking: the item's whole audio, encoded (runs on a thread)."""
    output_rate = request.sample_rate or native_rate
    samples = np.concatenate(list(resampled_parts(stream, native_rate, output_rate)))
    data = encode_whole(samples, output_rate, request.response_format)
    result = {
        "status": "success",
        "audio_data": base64.b64encode(data).decode(),
        "media_type": FORMATS[request.response_format].content_type,
        "sample_rate": output_rate,
        "usage": {"output_audio_seconds": round(len(samples) / output_rate, 3)},
    }
    if stream.ignored:
        result["ignored"] = list(stream.ignored)
    return result


def answer(items: list[Item]) -> dict[str, Any]:
    results = [item.result or {} for item in items]
    succeeded = sum(result.get("status") == "success" for result in results)
    return {
        "id": f"speech-batch-{secrets.token_hex(8)}",
        "results": results,
        "total": len(results),
        "succeeded": succeeded,
        "failed": len(results) - succeeded,
    }


def run_item(item: Item, native_rate: int) -> None:
    """Blocking: render the item into its result; a failure stays its own."""
    try:
        result = render(item.stream, item.request, native_rate)
    except Exception as error:  # noqa: BLE001 - reported in the item's result
        item.fail(str(error).splitlines()[0] if str(error) else type(error).__name__)
        return
    item.result = {"index": item.index, **result}
