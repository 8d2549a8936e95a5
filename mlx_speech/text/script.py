"""What a request's text says, part by part: an SSML document (``ssml``),
or a text with inline tags (``tags``: its parts, pauses and voice changes);
``None`` for plain text, spoken as one request."""

from __future__ import annotations

from .pauses import Pause
from .ssml import Script, Spoken, Voicing, is_ssml, parse_ssml
from .tags import TAG, VoiceChange, split_tags, without_tags

__all__ = ["Script", "Spoken", "Voicing", "script_of", "shown_text", "voice_after"]


def script_of(text: str, voice: str | None = None) -> Script | None:
    """``voice``: the voice ``text`` begins in, where a tag of the text before
    it (a text stream's) named one; ``None`` is the request's own."""
    if is_ssml(text):
        return parse_ssml(text)
    pieces = split_tags(text)
    if voice is None and all(isinstance(piece, str) for piece in pieces):
        return None
    script = Script()
    for piece in pieces:
        if isinstance(piece, VoiceChange):
            voice = piece.voice
        elif isinstance(piece, Pause):
            script.parts.append(piece)
        else:
            script.parts.append(Spoken(piece, Voicing(voice)))
    return script


def voice_after(text: str, voice: str | None) -> str | None:
    """The voice a text stream goes on in after ``text``: its last voice
    tag's, else ``voice``. An SSML document's voices end with it."""
    if is_ssml(text):
        return voice
    for match in TAG.finditer(text):
        voice = match.group("voice") or voice
    return voice


def shown_text(text: str) -> str:
    """What ``text`` says, as a caption shows it: an SSML document's spoken
    text, or the text without its tags."""
    if is_ssml(text):
        try:
            return " ".join(p.text for p in parse_ssml(text).parts if isinstance(p, Spoken))
        except ValueError:
            return text  # its speaking fails and says why
    return without_tags(text)
