"""Dialogue in its own voice (``--dialogue-voice``): a sentence's quoted
speech spoken in one voice and its narration in the request's, as an SSML
document of its parts. A sentence that carries a voice tag, or any tag,
or is SSML already, is left as it is: what the text says wins."""

from __future__ import annotations

import re
from xml.sax.saxutils import escape, quoteattr

from ..text.script import is_ssml
from ..text.tags import TAG

# What is quoted: «…», “…”, „…“, ‹…›, 「…」, 『…』 and "…".
QUOTED = re.compile(r'«[^»]*»|“[^”]*”|„[^“”]*[“”]|‹[^›]*›|「[^」]*」|『[^』]*』|"[^"]*"')


def with_dialogue(text: str, voice: str) -> str:
    """``text`` with its quotes in ``voice``; as it is without quotes."""
    if is_ssml(text) or TAG.search(text) or not QUOTED.search(text):
        return text
    parts, position = [], 0
    for quote in QUOTED.finditer(text):
        parts.append(_said(text[position : quote.start()]))
        if _has_words(quote.group()):
            parts.append(f"<voice name={quoteattr(voice)}>{escape(quote.group())}</voice>")
        position = quote.end()
    parts.append(_said(text[position:]))
    return "<speak>" + " ".join(part for part in parts if part) + "</speak>"


def _said(narration: str) -> str:
    """Narration between quotes, escaped; none where it has no words (the
    "." after a closing quote says nothing alone)."""
    return escape(narration.strip()) if _has_words(narration) else ""


def _has_words(text: str) -> bool:
    return any(character.isalnum() for character in text)
