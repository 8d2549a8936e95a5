"""A book's sentences, in order, each with the key its audio is kept under.

A chapter is spoken as ``speak --captions`` speaks a text: sentence by
sentence (a paragraph never runs into the next), a voice tag's voice
holding for what follows, across chapters too. Each sentence is then
spoken alone, so many can be in flight at once and their audio joined in
order is the chapter's. Its key names everything its audio depends on:
the text as given, the model, the voice and every option, so an edited
sentence, or another voice, is spoken again and nothing else is.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..speech.resolution import Resolved
from ..text.lexicon import Lexicon
from ..text.script import is_ssml, script_of, shown_text, voice_after
from ..text.segments import TextSegmenter
from .dialogue import with_dialogue
from .source import Book


@dataclass(frozen=True)
class Sentence:
    chapter: int  # its chapter's index in the book
    text: str  # what the model is given: a carried voice tag, then the sentence
    shown: str  # what its caption says
    key: str  # its audio's name in the store
    take: int = 0  # its chapter's take: 0, then one more at each --redo


def book_sentences(
    book: Book,
    identity: str,
    takes: Mapping[int, int] | None = None,
    dialogue_voice: str | None = None,
) -> list[Sentence]:
    """Every sentence of ``book`` in order; ``identity`` (``speech_identity``)
    names the model, voice and options they are spoken with, ``takes`` the
    take of each chapter spoken again (``--redo``; by chapter index), and
    ``dialogue_voice`` the voice of what is quoted (``dialogue``)."""
    sentences, voice = [], None
    for index, chapter in enumerate(book.chapters):
        take = (takes or {}).get(index, 0)
        chapter_identity = f"{identity}\ntake {take}" if take else identity
        for text in chapter_segments(chapter.text):
            if voice is not None:
                given = f"[voice:{voice}] {text}"
            elif dialogue_voice is not None:
                given = with_dialogue(text, dialogue_voice)
            else:
                given = text
            voice = voice_after(text, voice)
            script = script_of(given)
            if script is not None and not script.parts:
                continue  # voice tags alone: they say nothing, and change the voice
            shown = shown_text(text).strip()
            key = _key(chapter_identity, given)
            sentences.append(Sentence(index, given, shown, key, take))
    return sentences


def chapter_segments(text: str) -> Iterator[str]:
    """``text`` sentence by sentence, paragraph by paragraph; an SSML
    document, the chapter or a paragraph, is one segment (its parts say how
    it is spoken)."""
    paragraphs = [text] if is_ssml(text) else text.split("\n\n")
    for paragraph in paragraphs:
        if is_ssml(paragraph):
            yield paragraph
            continue
        segmenter = TextSegmenter("sentence")
        yield from segmenter.feed(paragraph)
        yield from segmenter.finish()


def speech_identity(model: str, resolved: Resolved, lexicon: Lexicon | None) -> str:
    """What a sentence's audio depends on beside its text, as one string:
    ``resolved`` is the request as ``TTS.resolve`` gives it (its voice found,
    its pace and normalization decided), so a default asked for and a
    default left out are one."""
    asked = resolved.asked
    identity = {
        "model": model,
        "voice": voice_identity(resolved.voice),
        "speed": resolved.speed,
        "normalize": resolved.normalize,
        "ref_text": asked.ref_text,
        "instructions": asked.instructions,
        "language": asked.language,
        "channels": asked.channels or 1,
        "sampling": sorted(
            (str(name), repr(value))
            for name, value in asked.sampling.items()
            if value is not None
        ),
        "lexicon": sorted(lexicon.entries.items()) if lexicon is not None else None,
    }
    return json.dumps(identity, sort_keys=True, default=repr)


def voice_identity(voice: Any) -> str:
    """A resolved voice as a string that changes when its audio would: a
    clip by its content, a saved voice by its name and upload."""
    if voice is None or isinstance(voice, str):
        return f"named:{voice}"
    if isinstance(voice, Path):
        return f"clip:{_digest(voice.read_bytes())}"
    if isinstance(voice, bytes | bytearray):
        return f"clip:{_digest(bytes(voice))}"
    if isinstance(voice, tuple) and len(voice) == 2:
        samples, rate = voice
        return f"clip:{_digest(np.ascontiguousarray(samples).tobytes())}@{rate}"
    name, version = getattr(voice, "name", None), getattr(voice, "version", None)
    if name is not None:
        return f"saved:{name}:{version}"
    return f"other:{voice!r}"


def _key(identity: str, text: str) -> str:
    return _digest(f"{identity}\n{text}".encode())[:32]


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
