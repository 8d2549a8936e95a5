"""The JSON the book routes accept and answer, for ``/openapi.json``:
built from the constants ``request.py`` checks against."""

from __future__ import annotations

from typing import Any

from ...audio.chapters import book_media_type
from ...audio.formats import BOOK_FORMATS
from ...book.source import FOOTNOTES, MAX_BOOK_BYTES, SUFFIXES
from ...book.speech import MAX_RETAKES
from ...book.takes import DEFAULT_RETAKES
from ...settings import ServerSettings
from ..schemas import STRING, errors
from ..speech.schema import speech_fields
from .request import DEFAULT_BOOK_FORMAT, DEFAULT_INPUT_FORMAT, INPUT_FORMATS

BOOK_JOB = {
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
        "retakes": {"type": "integer"},
        "suspects": {
            "type": "array",
            "description": "the kept sentences whose take is still suspect, once "
            "the book is spoken",
            "items": {
                "type": "object",
                "properties": {
                    "chapter": {"type": "integer"},
                    "title": STRING,
                    "start_seconds": {"type": "number"},
                    "text": STRING,
                    "why": STRING,
                },
            },
        },
        "contents": {
            "type": "array",
            "description": "every chapter that says something, as "
            "mlx-speech book --list shows it",
            "items": {
                "type": "object",
                "properties": {
                    "number": {"type": "integer"},
                    "title": STRING,
                    "sentences": {"type": "integer"},
                    "estimated_minutes": {"type": "number"},
                },
            },
        },
        "left_out": {
            "type": "array",
            "items": STRING,
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
}


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
    speech = speech_fields(settings)
    return {
        "title": {"type": "string", "description": "instead of the book's own"},
        "voice": {
            "oneOf": [
                {"type": "string", "description": "default, a preset or a saved voice"},
                {"type": "object", "properties": {"id": STRING}, "required": ["id"]},
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
        "retakes": {
            "type": "integer",
            "minimum": 0,
            "maximum": MAX_RETAKES,
            "default": DEFAULT_RETAKES,
            "description": "speak a take again, up to this many times, while it is "
            "suspect (it ran to the frame budget, or its length is far from what "
            "its text implies); the best is kept",
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


def paths(settings: ServerSettings) -> dict[str, Any]:
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
            "id": STRING,
            "object": {"const": "audio.book.deleted"},
            "deleted": {"type": "boolean"},
        },
    }
    job_id = [{"name": "id", "in": "path", "required": True, "schema": STRING}]
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
                    **errors(400, 401, 403, 404, 408, 413, 415, 429, 500, 503, 507),
                },
            },
            "get": {
                "summary": "Every book job, the newest first",
                "responses": {
                    "200": {"content": {"application/json": {"schema": listing}}},
                    **errors(401, 503),
                },
            },
        },
        "/v1/audio/books/{id}": {
            "get": {
                "summary": "A book job: where it stands",
                "parameters": job_id,
                "responses": {"200": job, **errors(401, 404, 503)},
            },
            "delete": {
                "summary": "Delete a book job and its files (cancelled first if it runs)",
                "parameters": job_id,
                "responses": {
                    "200": {"content": {"application/json": {"schema": deleted}}},
                    **errors(401, 403, 404, 503),
                },
            },
        },
        "/v1/audio/books/{id}/cancel": {
            "post": {
                "summary": "Cancel a queued or running book job (a finished one is "
                "left as it is)",
                "parameters": job_id,
                "responses": {"200": job, **errors(401, 403, 404, 503)},
            }
        },
        "/v1/audio/books/{id}/audio": {
            "get": {
                "summary": "A done job's audiobook, as a download",
                "parameters": job_id,
                "responses": {"200": {"content": audio}, **errors(401, 404, 409, 503)},
            }
        },
        "/v1/audio/books/{id}/captions": {
            "get": {
                "summary": "A done job's captions (WebVTT), one cue a sentence",
                "parameters": job_id,
                "responses": {
                    "200": {"content": {"text/vtt": {}}},
                    **errors(401, 404, 409, 503),
                },
            }
        },
    }
