"""Errors the public API raises, and how they quote what a caller sent."""

from __future__ import annotations

import math
from numbers import Real
from typing import Any

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


def finite_number(name: str, value: Any) -> float:
    """``value`` as a float; anything else (bools, NaN, infinities, integers
    too large for a float) is an ``InvalidRequest``."""
    if not isinstance(value, bool) and isinstance(value, Real):
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if math.isfinite(number):
            return number
    raise InvalidRequest(name, f"{name} must be a finite number, got {shown(value)}")


class ModelLoadError(RuntimeError):
    """The model could not be found, fetched or loaded."""


class ModelNotFetched(ModelLoadError):
    """A hub id could not be downloaded (offline, a wrong id). Its message
    names what to pass instead in the words of the surface (``saying``)."""

    def __init__(self, model: str, reason: str):
        self.model = model
        self.reason = reason
        super().__init__(self.saying("pass mlx_speech.load() a directory DIR"))

    def saying(self, how: str) -> str:
        """The message, with ``how`` to name a local checkpoint directory DIR."""
        return (
            f"could not fetch {self.model!r} from the Hugging Face hub ({self.reason}). "
            f"Without the network, {how} that holds the checkpoint (its config.json "
            "and weights), e.g. one made on a connected machine with "
            f"'hf download {self.model} --local-dir DIR'"
        )


class GenerationError(RuntimeError):
    """Generation failed after the request was accepted (e.g. non-finite audio)."""
