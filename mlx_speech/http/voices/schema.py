"""The JSON the voice routes accept and answer, for ``/openapi.json``."""

from __future__ import annotations

from typing import Any

from ...voices.clip_rules import MAX_REF_TEXT_CHARS
from ..schemas import STRING, errors

VOICE = {
    "type": "object",
    "properties": {
        "id": STRING,
        "name": STRING,
        "kind": {"enum": ["default", "preset", "saved"]},
        "duration_s": {"type": "number"},
        "created": {"type": "integer"},
        "ref_text": STRING,
    },
    "required": ["id", "name", "kind"],
}


def paths() -> dict[str, Any]:
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
                    **errors(401, 503),
                },
            },
            "post": {
                "summary": "Save a voice",
                "requestBody": {"content": {"multipart/form-data": {"schema": upload}}},
                "responses": {
                    "201": {"content": {"application/json": {"schema": voice}}},
                    **errors(400, 401, 403, 408, 409, 413, 415, 503, 507),
                },
            },
        },
        "/v1/audio/voices/{name}": {
            "delete": {
                "summary": "Remove a saved voice",
                "parameters": [
                    {"name": "name", "in": "path", "required": True, "schema": STRING}
                ],
                "responses": {
                    "200": {"content": {"application/json": {}}},
                    **errors(401, 403, 404),
                },
            }
        },
    }


# The speech fields a book job takes beside its own (a clip is refused: a
# book is spoken in a voice named)
