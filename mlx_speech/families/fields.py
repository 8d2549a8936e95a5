"""The request fields every family reads the same way, and their checks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidRequest, shown
from ..voices.clip_rules import check_ref_text, check_unicode


def check_text(text: Any) -> None:
    if not isinstance(text, str) or not text.strip():
        raise InvalidRequest("text", "text must be a non-empty string")
    check_unicode("text", text)


def check_instructions(instructions: Any) -> None:
    """``None`` (absent) or words."""
    if instructions is not None and (
        not isinstance(instructions, str) or not instructions.strip()
    ):
        raise InvalidRequest("instructions", "instructions must be a non-empty string")
    if instructions is not None:
        check_unicode("instructions", instructions)


def check_channels(channels: Any, native: int, family: str) -> int:
    """``channels`` (``None`` is mono) where the family has them: 1, or the
    model's native count."""
    if channels is None:
        return 1
    if isinstance(channels, bool) or channels not in (1, native):
        offered = "1 (mono)" if native == 1 else f"1 (mono) or {native} (the model's own)"
        raise InvalidRequest(
            "channels", f"{family} gives channels {offered}; got {shown(channels)}"
        )
    return int(channels)


@dataclass(frozen=True)
class SpeechInput:
    """One request as a family's ``prepare`` receives it: text, instructions
    and ref_text checked here, the voice resolved (``voices.resolve_voice``);
    ``language`` and the sampling keywords are the family's to check. Its
    ``text`` is None where only the rest is checked (``SpeechService.check``)."""

    text: str | None
    voice: Any = None
    ref_text: str | None = None
    instructions: str | None = None
    language: Any = None
    sampling: dict[str, Any] = field(default_factory=dict)
    channels: Any = None  # the family checks it (``check_channels``)

    def __post_init__(self) -> None:
        if self.text is not None:
            check_text(self.text)
        check_instructions(self.instructions)
        check_ref_text(self.ref_text)
