"""Errors the public API raises, and how they quote what a caller sent."""

from __future__ import annotations

SHOWN_CHARACTERS = 64


def shown(value: object) -> str:
    """``repr(value)``, cut short: an error quotes what was sent, never all of it."""
    if isinstance(value, int) and abs(value) >= 10**30:
        return "a huge integer"  # its repr may be thousands of digits, or refused
    text = repr(value)
    if len(text) <= SHOWN_CHARACTERS:
        return text
    return text[: SHOWN_CHARACTERS - 1] + "…"


class InvalidRequest(ValueError):
    """A bad request; ``param`` names the offending field."""

    def __init__(self, param: str, message: str):
        super().__init__(message)
        self.param = param


class ModelLoadError(RuntimeError):
    """The model could not be found, fetched or loaded."""


class GenerationError(RuntimeError):
    """Generation failed after the request was accepted (e.g. non-finite audio)."""
