"""``POST /v1/audio/books`` bodies: the book (its text in a JSON body, or a
file in a multipart form) and what it is spoken with: the voice and option
fields of ``/v1/audio/speech``, read by its parser (``parse_speech_fields``).
A form's fields are text, so the numbers and switches among them are read
as JSON first."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from ...audio.formats import BOOK_FORMATS
from ...audio.loudness import TARGET_LUFS, TARGETS_LUFS, is_target
from ...book.files import file_name
from ...book.source import FOOTNOTES, MAX_BOOK_BYTES
from ...book.speech import MAX_RETAKES
from ...book.takes import DEFAULT_RETAKES
from ...errors import shown
from ...serving.books import BookOrder
from ..bodies import BookUpload
from ..errors import ApiError
from ..speech.request import SAMPLING_FIELDS, RequestRules, parse_speech_fields

INPUT_FORMATS = {"text": ".txt", "markdown": ".md"}  # a text sent as JSON
DEFAULT_INPUT_FORMAT = "text"
DEFAULT_BOOK_FORMAT = "m4b"
# The form fields read as JSON before they are checked
TYPED_FORM_FIELDS = (
    "speed",
    "normalize",
    "channels",
    "loudness",
    "retakes",
    *SAMPLING_FIELDS,
)


def book_too_large(param: str) -> ApiError:
    megabytes = MAX_BOOK_BYTES / (1024 * 1024)
    return ApiError(
        413,
        f"the book is larger than {MAX_BOOK_BYTES} bytes ({megabytes:g} MB), the "
        "limit: split it into parts",
        param=param,
    )


def parse_book_request(body: Any | BookUpload, rules: RequestRules) -> BookOrder:
    """A JSON body's book or an uploaded one, with the fields beside it."""
    if isinstance(body, BookUpload):
        fields = _typed(body.fields)
        return _order(fields, rules, body.data, body.name, _title(fields))
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object", param="body")
    text = body.get("input")
    if not isinstance(text, str) or not text.strip():
        raise ApiError(400, "input (the book's text) is required", param="input")
    input_format = body.get("input_format") or DEFAULT_INPUT_FORMAT
    if not isinstance(input_format, str) or input_format not in INPUT_FORMATS:
        formats = " or ".join(INPUT_FORMATS)
        message = f"input_format must be {formats}, got {shown(input_format)}"
        raise ApiError(400, message, param="input_format")
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate, which JSON can spell
        raise ApiError(400, "input is not valid Unicode text", param="input") from None
    if len(data) > MAX_BOOK_BYTES:
        raise book_too_large("input")
    title = _title(body)
    # a plain text's one chapter is named after the file: the title here
    name = file_name(title, "input") if title else "input"
    return _order(body, rules, data, name + INPUT_FORMATS[input_format], title)


def _order(
    fields: dict, rules: RequestRules, data: bytes, name: str, title: str | None
) -> BookOrder:
    speech = parse_speech_fields(fields, rules)
    if speech.voice is not None and not isinstance(speech.voice, str):
        raise ApiError(
            400,
            "a book is spoken in a voice named: save the clip as a voice first "
            "(POST /v1/audio/voices), then name it",
            param="voice",
        )
    response_format = fields.get("response_format") or DEFAULT_BOOK_FORMAT
    if response_format not in BOOK_FORMATS:
        formats = ", ".join(BOOK_FORMATS)
        raise ApiError(
            400,
            f"response_format must be one of {formats}, got {shown(response_format)}",
            param="response_format",
        )
    chapters = fields.get("chapters")
    if chapters is not None and not isinstance(chapters, str | int):
        raise ApiError(400, "chapters must be a string such as 3-5,7", param="chapters")
    footnotes = fields.get("footnotes") or "skip"
    if footnotes not in FOOTNOTES:
        raise ApiError(
            400,
            f"footnotes must be {' or '.join(FOOTNOTES)}, got {shown(footnotes)}",
            param="footnotes",
        )
    chapters = None if chapters is None else str(chapters)
    loudness = _loudness(fields.get("loudness", TARGET_LUFS))
    dialogue_voice = fields.get("dialogue_voice")
    if dialogue_voice is not None and not isinstance(dialogue_voice, str):
        raise ApiError(400, "dialogue_voice must be a voice's name", param="dialogue_voice")
    retakes = _retakes(fields.get("retakes"))
    return BookOrder(
        data,
        name,
        title,
        response_format,
        speech,
        chapters,
        footnotes,
        loudness,
        dialogue_voice,
        retakes,
    )


def _retakes(value: Any) -> int:
    """``retakes``: 0 to ``MAX_RETAKES``."""
    if value is None:
        return DEFAULT_RETAKES
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not 0 <= value <= MAX_RETAKES
    ):
        raise ApiError(
            400,
            f"retakes must be a whole number from 0 to {MAX_RETAKES}, got {shown(value)}",
            param="retakes",
        )
    return value


def _loudness(value: Any) -> float | None:
    """``loudness``: LUFS (``audio.loudness.TARGETS_LUFS``), or "off" (or
    null): as spoken."""
    if value is None or value == "off":
        return None
    if is_target(value):
        return float(value)
    low, high = TARGETS_LUFS
    raise ApiError(
        400,
        f"loudness must be LUFS from {low:g} to {high:g}, or off; got {shown(value)}",
        param="loudness",
    )


def _title(fields: dict) -> str | None:
    """The title asked for, its whitespace collapsed; None if blank."""
    title = fields.get("title")
    if title is None:
        return None
    if not isinstance(title, str):
        raise ApiError(400, "title must be a string", param="title")
    return " ".join(title.split()) or None


def _typed(fields: dict[str, str]) -> dict[str, Any]:
    """A form's fields, those of ``TYPED_FORM_FIELDS`` read as JSON where
    they are (``1.5``, ``true``); the rest, and what is not JSON, as sent."""
    typed: dict[str, Any] = dict(fields)
    for name in TYPED_FORM_FIELDS:
        if name in typed:
            with contextlib.suppress(ValueError):
                typed[name] = json.loads(typed[name])
    return typed
