"""What the OpenAPI schemas of every endpoint group share: the error
responses, in the shape ``http.errors`` gives them."""

from __future__ import annotations

from typing import Any

from .errors import ERROR_TYPES

ERROR = {"$ref": "#/components/schemas/Error"}
STRING = {"type": "string"}


def errors(*statuses: int) -> dict[str, Any]:
    return {
        str(status): {
            "description": ERROR_TYPES.get(status, "error"),
            "content": {"application/json": {"schema": ERROR}},
        }
        for status in statuses
    }
