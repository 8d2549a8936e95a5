"""``GET /openapi.json``: every route, field, default and error of the HTTP
API, built from the same constants the parser checks against (a test keeps
the request fields in step with what the parser reads)."""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

from ..audio.chapters import BOOK_FORMATS, book_media_type
from ..audio.formats import FORMATS, RESPONSE_FORMATS
from ..audio.time_stretch import MAX_SPEED, MIN_SPEED
from ..book.source import FOOTNOTES, MAX_BOOK_BYTES, SUFFIXES
from ..families.options import SEED_LIMIT
from ..settings import ServerSettings
from ..text.segments import SPLITS
from ..voices.clip_rules import MAX_REF_TEXT_CHARS
from .batch import MAX_ITEMS
from .book_request import DEFAULT_BOOK_FORMAT, DEFAULT_INPUT_FORMAT, INPUT_FORMATS
from .errors import ERROR_TYPES
from .page import ASSETS
from .speech_request import (
    ACCEPTED_REFERENCES,
    MAX_SAMPLE_RATE,
    MIN_SAMPLE_RATE,
    PCM_RATE,
)

_ERROR = {"$ref": "#/components/schemas/Error"}
_STRING = {"type": "string"}


def _errors(*statuses: int) -> dict[str, Any]:
    return {
        str(status): {
            "description": ERROR_TYPES.get(status, "error"),
            "content": {"application/json": {"schema": _ERROR}},
        }
        for status in statuses
    }


def _speech_fields(settings: ServerSettings) -> dict[str, Any]:
    """The fields of a speech request; each but ``input`` may be null, which
    means absent (as the parser reads it)."""
    fields = _field_schemas(settings)
    absent = {"type": "null", "description": "the same as leaving the field out"}
    return {
        name: schema if name == "input" else {"anyOf": [schema, absent]}
        for name, schema in fields.items()
    }


def _field_schemas(settings: ServerSettings) -> dict[str, Any]:
    clip = {"type": "string", "description": ACCEPTED_REFERENCES}
    reference = {"oneOf": [clip, {"type": "array", "items": clip, "minItems": 1}]}
    return {
        "input": {
            "type": "string",
            "minLength": 1,
            "maxLength": settings.max_input_chars,
            "description": "text, where [pause:1.5s] or [pause:300ms] is exact "
            "silence; or an SSML <speak> document (break, sub, say-as, prosody rate, "
            "voice name for dialogue, lang, p, s)",
            "examples": [
                "Ready? [pause:700ms] Go!",
                '<speak><voice name="default">Hello Bob.</voice><break time="300ms"/>'
                '<voice name="grandma">Hi Alice!</voice></speak>',
            ],
        },
        "model": {"type": "string", "description": "accepted and logged"},
        "voice": {
            "oneOf": [
                {"type": "string", "description": "default, a preset or a saved voice"},
                {"type": "object", "properties": {"id": _STRING}, "required": ["id"]},
                {
                    "type": "object",
                    "properties": {"ref_audio": reference, "ref_text": _STRING},
                    "required": ["ref_audio"],
                },
            ],
            "default": "default",
        },
        "ref_audio": reference,
        "ref_text": {"type": "string", "maxLength": MAX_REF_TEXT_CHARS},
        "instructions": {"type": "string", "minLength": 1},
        "language": {"type": "string", "default": "auto"},
        "response_format": {
            "enum": list(RESPONSE_FORMATS),
            "default": settings.default_format,
        },
        "sample_rate": {
            "type": "integer",
            "minimum": MIN_SAMPLE_RATE,
            "maximum": MAX_SAMPLE_RATE,
            "description": f"default: {PCM_RATE} for pcm, else the model's rate",
        },
        "speed": {
            "type": "number",
            "minimum": MIN_SPEED,
            "maximum": MAX_SPEED,
            "default": 1.0,
            "description": "pace; pitch is kept",
        },
        "channels": {
            "type": "integer",
            "enum": [1, 2],
            "default": 1,
            "description": "2: the model's own stereo (MOSS-TTS-Nano), not a mono mix",
        },
        "normalize": {
            "type": "boolean",
            "description": "read numbers, symbols and dates out (default: the server's)",
        },
        "normalization_options": {
            "type": "object",
            "description": "Kokoro-FastAPI's; only its normalize is read",
            "properties": {"normalize": {"type": "boolean"}},
        },
        "stream": {
            "type": "boolean",
            "description": "without stream_format: true streams SSE, false one "
            "buffered file; neither field: a streamed file",
        },
        "stream_format": {"enum": ["audio", "sse"], "description": "decides when sent"},
        "captions": {
            "type": "boolean",
            "default": False,
            "description": "with stream_format sse: the text is spoken segment by "
            "segment, and each segment's audio is followed by a speech.audio.caption "
            "event (its text, start and end in samples and seconds)",
        },
        "split_granularity": {
            "enum": list(SPLITS),
            "default": "sentence",
            "description": "with captions: what a segment (a caption) is",
        },
        "temperature": {"type": "number", "minimum": 0},
        "top_p": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "top_k": {"type": "integer", "minimum": 0},
        "repetition_penalty": {"type": "number", "exclusiveMinimum": 0},
        "max_new_tokens": {
            "type": "integer",
            "minimum": 1,
            "description": "audio frames per text segment, up to the family's limit",
        },
        "seed": {"type": "integer", "minimum": 0, "maximum": SEED_LIMIT - 1},
        "task_type": {"type": "string", "description": "vLLM-Omni's; accepted"},
    }


def _input_body(fields: dict[str, Any]) -> dict[str, Any]:
    """A JSON body of ``fields``, ``input`` required."""
    schema = {"type": "object", "properties": fields, "required": ["input"]}
    return {"required": True, "content": {"application/json": {"schema": schema}}}


def _speech_route(settings: ServerSettings) -> dict[str, Any]:
    audio = {FORMATS[name].content_type: {} for name in RESPONSE_FORMATS}
    return {
        "post": {
            "summary": "Speak the input: streamed as it is generated, or buffered",
            "requestBody": _input_body(_speech_fields(settings)),
            "responses": {
                "200": {
                    "description": "audio, or Server-Sent Events with stream_format sse",
                    "content": {**audio, "text/event-stream": {}},
                },
                **_errors(400, 401, 403, 404, 408, 413, 415, 429, 500, 503),
            },
        }
    }


def _dialogue_route(settings: ServerSettings) -> dict[str, Any]:
    fields = {
        k: v
        for k, v in _speech_fields(settings).items()
        if k not in ("input", "voice", "stream", "stream_format", "captions")
    }
    turn = {
        "type": "object",
        "properties": {
            "voice": {"type": "string", "description": "a voice's name (or voice_id)"},
            "text": {"type": "string", "minLength": 1, "description": "pause tags allowed"},
        },
        "required": ["text"],
    }
    fields["turns"] = {"type": "array", "items": turn, "minItems": 1}
    fields["pause_between_turns"] = {"type": "number", "minimum": 0, "maximum": 10}
    fields["stream"] = {
        "type": "boolean",
        "default": True,
        "description": "true: the file streamed as it is generated; false: whole",
    }
    audio = {FORMATS[name].content_type: {} for name in RESPONSE_FORMATS}
    body = {"type": "object", "properties": fields, "required": ["turns"]}
    return {
        "post": {
            "summary": "Kokoro-FastAPI's dialogue: each turn in its voice, as it would "
            "be alone, in one audio",
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": body}},
            },
            "responses": {
                "200": {"content": audio},
                **_errors(400, 401, 403, 404, 408, 413, 415, 429, 500, 503),
            },
        }
    }


def _captioned_route(settings: ServerSettings) -> dict[str, Any]:
    fields = {
        k: v
        for k, v in _speech_fields(settings).items()
        if k not in ("stream", "stream_format", "captions")
    }
    fields["stream"] = {
        "type": "boolean",
        "default": True,
        "description": "true: a JSON object a line, one per segment; false: one",
    }
    fields["return_timestamps"] = {"type": "boolean", "default": True}
    stamp = {
        "type": "object",
        "description": "a segment (sentence or clause), not a word",
        "properties": {
            "word": {"type": "string", "description": "the segment's text"},
            "start_time": {"type": "number"},
            "end_time": {"type": "number"},
            "start_sample": {"type": "integer"},
            "end_sample": {"type": "integer"},
        },
    }
    answer = {
        "type": "object",
        "properties": {
            "audio": {
                "type": "string",
                "description": "base64: the lines', joined, are one file",
            },
            "audio_format": _STRING,
            "timestamps": {"type": "array", "items": stamp},
        },
    }
    return {
        "post": {
            "summary": "Kokoro-FastAPI's captioned speech: the audio with a caption "
            "per segment, spoken segment by segment",
            "requestBody": _input_body(fields),
            "responses": {
                "200": {"content": {"application/json": {"schema": answer}}},
                **_errors(400, 401, 403, 404, 408, 413, 415, 429, 500, 503),
            },
        }
    }


def _batch_route(settings: ServerSettings) -> dict[str, Any]:
    fields = {
        k: v
        for k, v in _speech_fields(settings).items()
        if k not in ("captions", "split_granularity")
    }
    item = {"type": "object", "properties": fields, "required": ["input"]}
    defaults = {
        k: v for k, v in fields.items() if k not in ("input", "stream", "stream_format")
    }
    body = {
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": item, "minItems": 1, "maxItems": MAX_ITEMS},
            **defaults,
        },
        "required": ["items"],
    }
    result = {
        "type": "object",
        "properties": {
            "index": {"type": "integer"},
            "status": {"enum": ["success", "error"]},
            "audio_data": {"type": "string", "description": "base64"},
            "media_type": _STRING,
            "sample_rate": {"type": "integer"},
            "usage": {"type": "object"},
            "ignored": {"type": "array", "items": _STRING},
            "error": _STRING,
        },
        "required": ["index", "status"],
    }
    answer = {
        "type": "object",
        "properties": {
            "id": _STRING,
            "results": {"type": "array", "items": result},
            "total": {"type": "integer"},
            "succeeded": {"type": "integer"},
            "failed": {"type": "integer"},
        },
    }
    return {
        "post": {
            "summary": "Speak several inputs at once (vLLM-Omni's batch); each item "
            "overrides the body's fields and fails alone",
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": body}},
            },
            "responses": {
                "200": {"content": {"application/json": {"schema": answer}}},
                **_errors(400, 401, 403, 408, 413, 415, 429, 503),
            },
        }
    }


def _voices_routes() -> dict[str, Any]:
    voice = {"$ref": "#/components/schemas/Voice"}
    upload = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,64}$"},
            "audio_sample": {"type": "string", "format": "binary"},
            "ref_text": {"type": "string", "maxLength": MAX_REF_TEXT_CHARS},
        },
        "required": ["name", "audio_sample"],
    }
    voices = {"type": "array", "items": voice}
    uploaded = {"type": "array", "items": {"type": "object", "description": "vLLM-Omni's"}}
    listing = {
        "type": "object",
        "properties": {"voices": voices, "uploaded_voices": uploaded},
    }
    return {
        "/v1/audio/voices": {
            "get": {
                "summary": "The model's presets and the saved voices",
                "responses": {
                    "200": {"content": {"application/json": {"schema": listing}}},
                    **_errors(401, 503),
                },
            },
            "post": {
                "summary": "Save a voice",
                "requestBody": {"content": {"multipart/form-data": {"schema": upload}}},
                "responses": {
                    "201": {"content": {"application/json": {"schema": voice}}},
                    **_errors(400, 401, 403, 408, 409, 413, 415, 503, 507),
                },
            },
        },
        "/v1/audio/voices/{name}": {
            "delete": {
                "summary": "Remove a saved voice",
                "parameters": [
                    {"name": "name", "in": "path", "required": True, "schema": _STRING}
                ],
                "responses": {
                    "200": {"content": {"application/json": {}}},
                    **_errors(401, 403, 404),
                },
            }
        },
    }


# The speech fields a book job takes beside its own (a clip is refused: a
# book is spoken in a voice named)
BOOK_SPEECH_FIELDS = (
    "ref_text",
    "instructions",
    "language",
    "speed",
    "normalize",
    "normalization_options",
    "channels",
    "temperature",
    "top_p",
    "top_k",
    "repetition_penalty",
    "max_new_tokens",
    "seed",
)


def _book_fields(settings: ServerSettings) -> dict[str, Any]:
    """A new book job's fields but the book itself."""
    speech = _speech_fields(settings)
    return {
        "title": {"type": "string", "description": "instead of the book's own"},
        "voice": {
            "oneOf": [
                {"type": "string", "description": "default, a preset or a saved voice"},
                {"type": "object", "properties": {"id": _STRING}, "required": ["id"]},
            ],
            "default": "default",
        },
        "response_format": {"enum": list(BOOK_FORMATS), "default": DEFAULT_BOOK_FORMAT},
        "chapters": {
            "type": "string",
            "description": "speak only these chapters, by the numbers of the job's "
            "contents: 3-5,7",
        },
        "footnotes": {
            "enum": list(FOOTNOTES),
            "default": "skip",
            "description": "skip the book's notes, or read each chapter's at its end",
        },
        "dialogue_voice": {
            "type": "string",
            "description": "speak what the book quotes in this voice, the narration "
            "in voice (a voice tag in the text still wins)",
        },
        "loudness": {
            "oneOf": [
                {"type": "number", "minimum": -40, "maximum": -5},
                {"const": "off"},
                {"type": "null"},
            ],
            "default": -18,
            "description": "the LUFS each chapter is brought to (EBU R128), its "
            "true peak under -1 dBTP; off or null: as spoken",
        },
        **{name: speech[name] for name in BOOK_SPEECH_FIELDS},
    }


def _book_body(settings: ServerSettings) -> dict[str, Any]:
    text = {
        "input": {
            "type": "string",
            "minLength": 1,
            "description": f"the book's text, at most {MAX_BOOK_BYTES} bytes in UTF-8 "
            "(--max-input-chars does not apply)",
        },
        "input_format": {
            "enum": list(INPUT_FORMATS),
            "default": DEFAULT_INPUT_FORMAT,
            "description": "markdown: a chapter at each heading of the highest level",
        },
    }
    upload = {
        "file": {
            "type": "string",
            "format": "binary",
            "description": f"the book, at most {MAX_BOOK_BYTES} bytes; its name's "
            f"suffix says its kind ({', '.join(SUFFIXES)})",
        }
    }
    fields = _book_fields(settings)
    json_body = {"type": "object", "properties": text | fields, "required": ["input"]}
    form = {"type": "object", "properties": upload | fields, "required": ["file"]}
    return {
        "required": True,
        "content": {
            "application/json": {"schema": json_body},
            "multipart/form-data": {"schema": form},
        },
    }


def _books_routes(settings: ServerSettings) -> dict[str, Any]:
    job = {
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/BookJob"}}
        }
    }
    listing = {
        "type": "object",
        "properties": {
            "object": {"const": "list"},
            "data": {"type": "array", "items": {"$ref": "#/components/schemas/BookJob"}},
        },
    }
    deleted = {
        "type": "object",
        "properties": {
            "id": _STRING,
            "object": {"const": "audio.book.deleted"},
            "deleted": {"type": "boolean"},
        },
    }
    job_id = [{"name": "id", "in": "path", "required": True, "schema": _STRING}]
    audio = {book_media_type(name): {} for name in BOOK_FORMATS}
    return {
        "/v1/audio/books": {
            "post": {
                "summary": "Make a book job: a long text or a book file spoken in the "
                "background into one chaptered audiobook",
                "requestBody": _book_body(settings),
                "responses": {
                    "202": {
                        "description": "queued; Location is the job's URL",
                        **job,
                    },
                    **_errors(400, 401, 403, 404, 408, 413, 415, 429, 500, 503, 507),
                },
            },
            "get": {
                "summary": "Every book job, the newest first",
                "responses": {
                    "200": {"content": {"application/json": {"schema": listing}}},
                    **_errors(401, 503),
                },
            },
        },
        "/v1/audio/books/{id}": {
            "get": {
                "summary": "A book job: where it stands",
                "parameters": job_id,
                "responses": {"200": job, **_errors(401, 404, 503)},
            },
            "delete": {
                "summary": "Delete a book job and its files (cancelled first if it runs)",
                "parameters": job_id,
                "responses": {
                    "200": {"content": {"application/json": {"schema": deleted}}},
                    **_errors(401, 403, 404, 503),
                },
            },
        },
        "/v1/audio/books/{id}/cancel": {
            "post": {
                "summary": "Cancel a queued or running book job (a finished one is "
                "left as it is)",
                "parameters": job_id,
                "responses": {"200": job, **_errors(401, 403, 404, 503)},
            }
        },
        "/v1/audio/books/{id}/audio": {
            "get": {
                "summary": "A done job's audiobook, as a download",
                "parameters": job_id,
                "responses": {"200": {"content": audio}, **_errors(401, 404, 409, 503)},
            }
        },
        "/v1/audio/books/{id}/captions": {
            "get": {
                "summary": "A done job's captions (WebVTT), one cue a sentence",
                "parameters": job_id,
                "responses": {
                    "200": {"content": {"text/vtt": {}}},
                    **_errors(401, 404, 409, 503),
                },
            }
        },
    }


def _other_routes() -> dict[str, Any]:
    def get(summary: str, content_type: str = "application/json") -> dict[str, Any]:
        return {
            "get": {
                "summary": summary,
                "responses": {"200": {"content": {content_type: {}}}, **_errors(401)},
            }
        }

    return {
        "/v1/models": get("The loaded model (OpenAI's list shape)"),
        "/v1/audio/models": get("The speech models, as Open WebUI lists them"),
        "/health": get(
            "200 when ready, with the model, its backend (mlx or host), MLX's "
            "device (cpu or gpu) and each protocol's listener; 503 while loading, "
            "when loading failed or when a listener has stopped"
        ),
        "/metrics": get("Prometheus text", "text/plain"),
        "/openapi.json": get("This document"),
        "/": get("The page: type, pick or clone a voice, hear it stream", "text/html"),
        "/page/{name}": {
            "get": {
                "summary": "The page's script (page.js) and style sheet (page.css)",
                "parameters": [
                    {
                        "name": "name",
                        "in": "path",
                        "required": True,
                        "schema": {"enum": list(ASSETS)},
                    }
                ],
                "responses": {"200": {"content": dict.fromkeys(ASSETS.values(), {})}}
                | _errors(404),
            }
        },
        "/v1/audio/speech/stream": {
            "get": {
                "summary": "WebSocket (vLLM-Omni's protocol): text in as it is written, "
                "audio out sentence by sentence; the messages are in docs/speech.md. "
                "Asked without Upgrade: websocket, 426",
                "responses": {
                    "101": {"description": "Switching Protocols"},
                    **_errors(401, 426),
                },
            }
        },
    }


COMPONENTS = {
    "schemas": {
        "Error": {
            "type": "object",
            "properties": {
                "error": {
                    "type": "object",
                    "properties": {
                        "message": _STRING,
                        "type": _STRING,
                        "param": {"type": ["string", "null"]},
                        "code": {"type": ["string", "null"]},
                    },
                    "required": ["message", "type", "param", "code"],
                }
            },
            "required": ["error"],
        },
        "Voice": {
            "type": "object",
            "properties": {
                "id": _STRING,
                "name": _STRING,
                "kind": {"enum": ["default", "preset", "saved"]},
                "duration_s": {"type": "number"},
                "created": {"type": "integer"},
                "ref_text": _STRING,
            },
            "required": ["id", "name", "kind"],
        },
        "BookJob": {
            "type": "object",
            "properties": {
                "id": {"type": "string", "pattern": "^book_[0-9a-f]{24}$"},
                "object": {"const": "audio.book"},
                "status": {
                    "enum": ["queued", "speaking", "writing", "done", "failed", "cancelled"]
                },
                "created_at": {"type": "integer", "description": "Unix seconds"},
                "started_at": {"type": ["integer", "null"]},
                "finished_at": {"type": ["integer", "null"]},
                "title": {"type": ["string", "null"]},
                "author": {"type": ["string", "null"]},
                "source": {"type": "string", "description": "the book's file name"},
                "response_format": {"enum": list(BOOK_FORMATS)},
                "chapters": {"type": "integer", "description": "those spoken"},
                "chapters_asked": {"type": ["string", "null"]},
                "footnotes": {"enum": list(FOOTNOTES)},
                "loudness": {"type": ["number", "null"]},
                "dialogue_voice": {"type": ["string", "null"]},
                "contents": {
                    "type": "array",
                    "description": "every chapter that says something, as "
                    "mlx-speech book --list shows it",
                    "items": {
                        "type": "object",
                        "properties": {
                            "number": {"type": "integer"},
                            "title": _STRING,
                            "sentences": {"type": "integer"},
                            "estimated_minutes": {"type": "number"},
                        },
                    },
                },
                "left_out": {
                    "type": "array",
                    "items": _STRING,
                    "description": "what a reader skips, left out unspoken, and why",
                },
                "sentences": {
                    "type": "object",
                    "properties": {
                        "done": {"type": "integer"},
                        "total": {"type": "integer"},
                    },
                },
                "audio_seconds": {"type": "number", "description": "spoken so far"},
                "error": {"type": ["string", "null"], "description": "why it failed"},
                "audio_url": {"type": ["string", "null"]},
                "captions_url": {"type": ["string", "null"]},
            },
        },
    }
}


def openapi_document(settings: ServerSettings) -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {"title": "mlx-speech", "version": version("mlx-speech-server")},
        "paths": {
            "/v1/audio/speech": _speech_route(settings),
            "/v1/audio/speech/batch": _batch_route(settings),
            "/dev/captioned_speech": _captioned_route(settings),
            "/dev/dialogue": _dialogue_route(settings),
            **_voices_routes(),
            **_books_routes(settings),
            **_other_routes(),
        },
        "components": COMPONENTS,
    }
