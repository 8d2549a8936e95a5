"""What a request's text says, part by part: an SSML document (``ssml``),
or a text with pause tags (``pauses``: its parts and pauses); ``None`` for
plain text, spoken as one request."""

from __future__ import annotations

from .pauses import Pause, split_pauses, without_pauses
from .ssml import Script, Spoken, Voicing, is_ssml, parse_ssml

__all__ = ["Script", "Spoken", "Voicing", "script_of", "shown_text"]


def script_of(text: str) -> Script | None:
    if is_ssml(text):
        return parse_ssml(text)
    parts = split_pauses(text)
    if not any(isinstance(part, Pause) for part in parts):
        return None
    return Script([p if isinstance(p, Pause) else Spoken(p, Voicing()) for p in parts])


def shown_text(text: str) -> str:
    """What ``text`` says, as a caption shows it: an SSML document's spoken
    text, or the text without its pause tags."""
    if is_ssml(text):
        try:
            return " ".join(p.text for p in parse_ssml(text).parts if isinstance(p, Spoken))
        except ValueError:
            return text  # its speaking fails and says why
    return without_pauses(text)
