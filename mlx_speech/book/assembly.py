"""A spoken book put together from its kept sentences, in the plan's order:
its audio chunk by chunk, its chapter marks and its captions, all counted
in samples, so the marks and the captions meet the audio exactly."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import numpy as np

from ..audio.chapters import ChapterMark
from ..text.captions import Caption
from .plan import Sentence
from .source import Book
from .store import SpokenStore


def sentence_lengths(store: SpokenStore, sentences: Sequence[Sentence]) -> list[int]:
    """Each sentence's length in samples, from the kept files' headers."""
    lengths: dict[str, int] = {}
    for sentence in sentences:
        if sentence.key not in lengths:
            lengths[sentence.key] = store.frames(sentence.key)
    return [lengths[sentence.key] for sentence in sentences]


def chapter_marks(
    book: Book, sentences: Sequence[Sentence], lengths: Sequence[int]
) -> list[ChapterMark]:
    """Where each chapter's audio lies; a chapter that says nothing has none."""
    ends: dict[int, tuple[int, int]] = {}
    position = 0
    for sentence, length in zip(sentences, lengths, strict=True):
        start = ends.get(sentence.chapter, (position, position))[0]
        position += length
        ends[sentence.chapter] = (start, position)
    return [
        ChapterMark(book.chapters[index].title, start, end)
        for index, (start, end) in sorted(ends.items())
        if end > start
    ]


def book_captions(
    sentences: Sequence[Sentence], lengths: Sequence[int], rate: int
) -> list[Caption]:
    """One caption a sentence with audio, continuous across chapters (a
    sentence without audio is not heard, so it has none)."""
    captions, position = [], 0
    for sentence, length in zip(sentences, lengths, strict=True):
        if length:
            start, position = position, position + length
            captions.append(Caption(len(captions), sentence.shown, start, position, rate))
    return captions


def book_chunks(
    store: SpokenStore,
    sentences: Sequence[Sentence],
    gains: Mapping[int, float] | None = None,
) -> Iterator[np.ndarray]:
    """The book's audio, one sentence at a time (a book never sits whole in
    memory), each times its chapter's gain where ``gains`` has one; a
    sentence without audio adds nothing."""
    for sentence in sentences:
        samples = store.load(sentence.key)
        gain = (gains or {}).get(sentence.chapter, 1.0)
        if len(samples):
            yield samples if gain == 1.0 else samples * np.float32(gain)
