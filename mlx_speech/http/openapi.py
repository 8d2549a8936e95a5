"""``GET /openapi.json``: every route, field, default and error of the HTTP
API, assembled from each endpoint group's schema (``speech/schema.py``,
``voices/schema.py``, ``books/schema.py``), each built from the constants
its parser checks against."""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

from ..settings import ServerSettings
from .books import schema as books
from .page import ASSETS
from .schemas import STRING, errors
from .speech import schema as speech
from .voices import schema as voices


def _other_routes() -> dict[str, Any]:
    def get(summary: str, content_type: str = "application/json") -> dict[str, Any]:
        return {
            "get": {
                "summary": summary,
                "responses": {"200": {"content": {content_type: {}}}, **errors(401)},
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
                | errors(404),
            }
        },
        "/v1/audio/speech/stream": {
            "get": {
                "summary": "WebSocket (vLLM-Omni's protocol): text in as it is written, "
                "audio out sentence by sentence; the messages are in "
                "docs/speech/text-streams.md. "
                "Asked without Upgrade: websocket, 426",
                "responses": {
                    "101": {"description": "Switching Protocols"},
                    **errors(401, 426),
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
                        "message": STRING,
                        "type": STRING,
                        "param": {"type": ["string", "null"]},
                        "code": {"type": ["string", "null"]},
                    },
                    "required": ["message", "type", "param", "code"],
                }
            },
            "required": ["error"],
        },
        "Voice": voices.VOICE,
        "BookJob": books.BOOK_JOB,
    }
}


def openapi_document(settings: ServerSettings) -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {"title": "mlx-speech", "version": version("mlx-speech-server")},
        "paths": {
            **speech.paths(settings),
            **voices.paths(),
            **books.paths(settings),
            **_other_routes(),
        },
        "components": COMPONENTS,
    }
