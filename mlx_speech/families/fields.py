"""Checks of the request fields every family reads the same way."""

from __future__ import annotations

from typing import Any

from ..errors import InvalidRequest


def check_text(text: Any) -> None:
    if not isinstance(text, str) or not text.strip():
        raise InvalidRequest("text", "text must be a non-empty string")


def check_instructions(instructions: Any) -> None:
    """``None`` (absent) or words."""
    if instructions is not None and (
        not isinstance(instructions, str) or not instructions.strip()
    ):
        raise InvalidRequest("instructions", "instructions must be a non-empty string")


def check_ref_text(ref_text: Any) -> None:
    if ref_text is not None and not isinstance(ref_text, str):
        raise InvalidRequest("ref_text", "ref_text must be a string")


def check_language(language: Any, supported: tuple[str, ...], family: str) -> str:
    """The family's own spelling of ``language`` (any case; ``None`` is "auto")."""
    if language is None:
        language = "auto"
    if isinstance(language, str):
        for name in supported:
            if name.lower() == language.lower():
                return name
    if supported == ("auto",):
        expected = f"{family} detects the language itself; language must be 'auto'"
    else:
        expected = f"language must be one of {', '.join(supported)}"
    raise InvalidRequest("language", f"{expected}, got {language!r}")
