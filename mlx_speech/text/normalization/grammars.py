"""Semantic normalization through the WeTextProcessing grammars (``wetext``):
numbers, money, dates, times, units and symbols read out, for English and
Chinese.

The grammars load once per process (0.4 s, 45 MB of FSTs), on a background
thread while the model loads (``TextNormalizer.preload``), so the first
request does not pay for them.
Tokens the robustness pass keeps (URLs, e-mail addresses, file names,
versions, mentions, hashtags) are not given to them. The grammars fail on
some inputs (an assertion on "#1 hit"); a piece that fails is read again word
by word, and a word that still fails is kept as written.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable
from typing import TypeVar

from . import chinese, english
from .robust import kept_spans

LANGUAGES = ("en", "zh")
T = TypeVar("T")
# The grammars' time grows faster than the text (1600 characters: 6x the time
# of 400), so long text is read a sentence at a time: after a mark that ends
# a sentence, or after a period that follows a word of four letters or more
# and comes before a capital ("Dr. Smith", "Jan. 5" stay whole).
_SENTENCE_END = re.compile(r"(?<=[!?;。！？；])\s*|(?<=\w{4}\.)\s+(?=[A-Z])")
LONGEST_PART = 200  # characters; a longer part without marks is cut at spaces
_AROUND = {"en": (english.prepare, english.finish), "zh": (chinese.prepare, chinese.finish)}


class Grammars:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        # One reader call at a time (not known to be thread-safe), taken per
        # part and in turn, so a short text waits for a part of each text
        # being read, not for all of them.
        self._reading = _TakenInTurn()
        self._readers: dict[str, Callable[[str], str]] | None = None
        self.fallbacks = 0  # pieces or words the grammars could not read

    def load(self) -> dict[str, Callable[[str], str]]:
        """The grammars' readers, loaded at the first call."""
        with self._lock:
            if self._readers is None:
                from wetext import Normalizer

                self._readers = {
                    language: Normalizer(lang=language, operator="tn").normalize
                    for language in LANGUAGES
                }
            return self._readers

    def read(self, text: str, language: str, most: int | None = None) -> str:
        """``text`` (already through the robustness pass) read out in
        ``language``, one of ``LANGUAGES``; with ``most``, reading stops
        once the result passes that many characters (it is then cut short)."""
        reader = self.load()[language]

        def read_span(span: tuple[str, bool], left: int | None) -> str:
            piece, kept = span
            if kept or not piece.strip():
                return piece
            return self._read_words(piece, language, reader, left)

        pieces = read_until_past(kept_spans(text), read_span, most)
        return re.sub(r" {2,}", " ", "".join(pieces))

    def _read_words(self, piece: str, language: str, reader, most: int | None) -> str:
        """One piece of words, a sentence (or ``LONGEST_PART``) at a time."""
        prepare, finish = _AROUND[language]
        lead = piece[: len(piece) - len(piece.lstrip())]
        tail = piece[len(piece.rstrip()) :]
        parts = read_until_past(
            _sentences(prepare(piece.strip())),
            lambda part, _: finish(self._read_piece(reader, part)),
            most,
            separator=1,
        )
        return lead + " ".join(parts) + tail

    def _read_piece(self, reader: Callable[[str], str], piece: str) -> str:
        try:
            with self._reading:
                return reader(piece)
        except Exception:  # the grammars fail on some inputs; read word by word
            pass
        words = []
        for word in piece.split(" "):
            try:
                with self._reading:
                    words.append(reader(word) if word else word)
            except Exception:
                self.fallbacks += 1
                words.append(word)
        return " ".join(words)


def read_until_past(
    items: Iterable[T],
    read: Callable[[T, int | None], str],
    most: int | None,
    separator: int = 0,
) -> list[str]:
    """``read(item, characters left)`` of each item, in order, stopping once
    the results (joined by ``separator`` characters) pass ``most``."""
    results, length = [], 0
    for item in items:
        results.append(read(item, None if most is None else most - length))
        length += len(results[-1]) + separator
        if most is not None and length > most:
            break
    return results


class _TakenInTurn:
    """A lock its waiters get in the order they asked (``threading.Lock``
    lets one thread take it again and again while others wait)."""

    def __init__(self) -> None:
        self._turns = threading.Condition()
        self._next_ticket = 0
        self._serving = 0

    def __enter__(self) -> None:
        with self._turns:
            ticket = self._next_ticket
            self._next_ticket += 1
            self._turns.wait_for(lambda: self._serving == ticket)

    def __exit__(self, *exc) -> None:
        with self._turns:
            self._serving += 1
            self._turns.notify_all()


def _sentences(text: str) -> list[str]:
    parts = []
    for sentence in _SENTENCE_END.split(text):
        while len(sentence) > LONGEST_PART:
            cut = sentence.rfind(" ", 0, LONGEST_PART)
            cut = cut if cut > 0 else LONGEST_PART
            parts.append(sentence[:cut])
            sentence = sentence[cut:].lstrip()
        if sentence.strip():
            parts.append(sentence)
    return parts
