"""What the model is given for what was written: the lexicon's words said
otherwise, then, where normalization is on, numbers, symbols and dates read
out; each text within the one length limit (``limits``)."""

from __future__ import annotations

from dataclasses import dataclass

from ..families.fields import check_text
from ..text.lexicon import Lexicon
from ..text.normalization import TextNormalizer
from ..text.pauses import Pause
from ..text.script import Spoken, Voicing
from ..voices.clip_rules import check_ref_text
from .limits import TextLimit


@dataclass(frozen=True)
class ReadPart:
    """A part of a text (its voice tags', SSML's) as the model reads it."""

    read: str
    ref_text: str | None
    voicing: Voicing


class Reading:
    def __init__(self, normalizer: TextNormalizer, limit: TextLimit):
        self.normalizer = normalizer
        self.limit = limit
        self.lexicon: Lexicon | None = None  # words said otherwise (``load``)

    def as_read(
        self, text: str, ref_text: str | None, language: object, normalize: bool
    ) -> tuple[str, str | None]:
        """``text`` and ``ref_text`` as the model reads them; ``text`` within
        the limit."""
        if not isinstance(text, str):
            check_text(text)  # refused, in words
        written = len(text)
        if self.lexicon is not None:
            text = self.lexicon.apply(text, most=self.limit.most)
        self.limit.check(text, written)
        if not normalize:
            return text, ref_text
        check_text(text)
        check_ref_text(ref_text)
        read = self.normalizer.normalize(text, language, most=self.limit.most)
        self.limit.check(read, written, normalized=True)
        if ref_text is not None and ref_text.strip():
            ref_text = self.normalizer.normalize(ref_text, language)
        return read, ref_text

    def read_parts(
        self,
        parts: list[Spoken | Pause],
        ref_text: str | None,
        language: object,
        normalize: bool,
    ) -> tuple[list[ReadPart | Pause], int]:
        """Each part as the model reads it (in its own language, or
        ``language``), and how many characters they are together, within the
        limit."""
        read_parts: list[ReadPart | Pause] = []
        total = 0
        for part in parts:
            if isinstance(part, Pause):
                read_parts.append(part)
                continue
            read, part_ref_text = self.as_read(
                part.text, ref_text, part.voicing.language or language, normalize
            )
            total += len(read)
            read_parts.append(ReadPart(read, part_ref_text, part.voicing))
        self.limit.check_parts(total)
        return read_parts, total

    def normalized(self, text: str, language: str | None = None) -> str:
        """``text`` as the model is given it when normalization is on."""
        check_text(text)
        if self.lexicon is not None:
            text = self.lexicon.apply(text)
        return self.normalizer.normalize(text, language)
