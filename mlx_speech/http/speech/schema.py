"""The JSON the speech routes accept and answer, for ``/openapi.json``:
built from the constants ``request.py`` checks against (a test keeps the
fields in step with what it reads)."""

from __future__ import annotations

from typing import Any

from ...audio.formats import FORMATS, RESPONSE_FORMATS
from ...audio.time_stretch import MAX_SPEED, MIN_SPEED
from ...families.options import SEED_LIMIT
from ...settings import ServerSettings
from ...text.segments import SPLITS
from ...voices.clip_rules import MAX_REF_TEXT_CHARS
from ..schemas import STRING, errors
from .batch import MAX_ITEMS
from .request import ACCEPTED_REFERENCES, MAX_SAMPLE_RATE, MIN_SAMPLE_RATE, PCM_RATE


def paths(settings: ServerSettings) -> dict[str, Any]:
    return {
        "/v1/audio/speech": _speech_route(settings),
        "/v1/audio/speech/batch": _batch_route(settings),
        "/dev/captioned_speech": _captioned_route(settings),
        "/dev/dialogue": _dialogue_route(settings),
    }


def speech_fields(settings: ServerSettings) -> dict[str, Any]:
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
                {"type": "object", "properties": {"id": STRING}, "required": ["id"]},
                {
                    "type": "object",
                    "properties": {"ref_audio": reference, "ref_text": STRING},
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
            "requestBody": _input_body(speech_fields(settings)),
            "responses": {
                "200": {
                    "description": "audio, or Server-Sent Events with stream_format sse",
                    "content": {**audio, "text/event-stream": {}},
                },
                **errors(400, 401, 403, 404, 408, 413, 415, 429, 500, 503),
            },
        }
    }


def _dialogue_route(settings: ServerSettings) -> dict[str, Any]:
    fields = {
        k: v
        for k, v in speech_fields(settings).items()
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
                **errors(400, 401, 403, 404, 408, 413, 415, 429, 500, 503),
            },
        }
    }


def _captioned_route(settings: ServerSettings) -> dict[str, Any]:
    fields = {
        k: v
        for k, v in speech_fields(settings).items()
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
            "audio_format": STRING,
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
                **errors(400, 401, 403, 404, 408, 413, 415, 429, 500, 503),
            },
        }
    }


def _batch_route(settings: ServerSettings) -> dict[str, Any]:
    fields = {
        k: v
        for k, v in speech_fields(settings).items()
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
            "media_type": STRING,
            "sample_rate": {"type": "integer"},
            "usage": {"type": "object"},
            "ignored": {"type": "array", "items": STRING},
            "error": STRING,
        },
        "required": ["index", "status"],
    }
    answer = {
        "type": "object",
        "properties": {
            "id": STRING,
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
                **errors(400, 401, 403, 408, 413, 415, 429, 503),
            },
        }
    }
