"""One book spoken with one request's voice and options, as every surface
speaks it (the command, ``speak_book``, the server's jobs): its plan checked
before any work, its missing sentences spoken into a store, and the spoken
book put together from the store."""

from __future__ import annotations

import contextlib
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from ..audio.chapters import ChapterMark, write_book_audio
from ..audio.loudness import TARGET_LUFS, gain_to, measured
from ..audio.samples import Audio
from ..families.options import SEED_LIMIT
from ..request import SpeechRequest
from ..text.captions import Caption
from ..text.tags import TAG
from ..tts import TTS
from .assembly import book_captions, book_chunks, chapter_marks, sentence_lengths
from .contents import chosen_chapters
from .files import chapter_paths, write_whole
from .plan import Sentence, book_sentences, speech_identity
from .report import Suspect, suspects
from .source import Book, BookError, read_book
from .speaker import IN_FLIGHT, BookCancelled, SentenceSpoken, speak_missing
from .store import SpokenStore, kept_takes, redone
from .takes import DEFAULT_RETAKES

MAX_RETAKES = 10
# A retake's seed is this far from its take's: clear of the takes --redo makes
RETAKE_SEED_STEP = 1_000_003

NO_AUDIO = "no sentence of the book has audio: there is nothing to write"


class BookSpeech:
    def __init__(
        self,
        tts: TTS,
        book: Book,
        request: SpeechRequest,
        *,
        chapters: frozenset[int] | None = None,
        takes: Mapping[int, int] | None = None,
        dialogue_voice: str | None = None,
        retakes: int = DEFAULT_RETAKES,
    ):
        """Resolves the request once and checks it and every voice the book's
        tags name (``ValueError``), so a bad one fails now, not hours in.
        ``chapters``: the indexes of those to speak (all where None);
        ``takes``: a chapter's take where it was spoken again (``--redo``),
        by index: another seed, so other sentences. ``dialogue_voice``: the
        voice of what is quoted, the narration in the request's. ``retakes``:
        how many more times a suspect take is spoken (``takes``)."""
        if not isinstance(retakes, int) or not 0 <= retakes <= MAX_RETAKES:
            raise ValueError(f"retakes must be 0..{MAX_RETAKES}, got {retakes!r}")
        resolved = tts.resolve(request)
        identity = speech_identity(tts.model, resolved, tts.lexicon)
        self.book = book
        self.sentences: list[Sentence] = [
            sentence
            for sentence in book_sentences(book, identity, takes, dialogue_voice)
            if chapters is None or sentence.chapter in chapters
        ]
        if not self.sentences:
            raise BookError("the book says nothing: it has only voice tags")
        self._by_chapter: dict[int, list[Sentence]] = {}
        for sentence in self.sentences:
            self._by_chapter.setdefault(sentence.chapter, []).append(sentence)
        self.rate = tts.sample_rate
        self.channels = request.channels or 1
        narrator = request.voice if isinstance(request.voice, str) else None
        # what the written files say beside title and author (write_book_audio)
        self.tags = {"narrator": narrator, "details": book.details, "picture": book.cover}
        said = next((s.shown for s in self.sentences if s.shown), None)
        if said is None:
            raise BookError("the book says nothing: it has only tags")
        tts.check_resolved(resolved)
        for name in _tagged_voices(self.sentences) | {dialogue_voice} - {None}:
            tts.resolve(replace(request, voice=name, voice_paths=False))
        # a greedy take is the same whatever its seed: retaking it adds nothing
        greedy = request.sampling.get("temperature") == 0
        self.retakes = 0 if greedy else retakes
        self._tts, self._request = tts, request
        self._openers = {(0, 0): tts.opener(resolved)}
        for take in {sentence.take for sentence in self.sentences} - {0}:
            self._opener(take, 0)  # checked now; retakes' only seeds differ
        self._openers_lock = threading.Lock()
        # each chapter's gain, by store and target: measured once for the book
        # and its chapter files alike, again after the store changes (speak)
        self._gains: dict[tuple[Path, float], dict[int, float]] = {}

    def _opener(self, take: int, retake: int) -> Callable[[str], Any]:
        opener = self._openers.get((take, retake))
        if opener is None:
            asked = _retaken(self._request, take, retake)
            opener = self._tts.opener(self._tts.resolve(asked))
            self._openers[take, retake] = opener
        return opener

    def _open(self, sentence: Sentence, retake: int) -> Any:
        with self._openers_lock:
            opener = self._opener(sentence.take, retake)
        return opener(sentence.text)

    def kept(self, store: SpokenStore) -> int:
        """How many of the sentences the store has already."""
        return sum(store.has(sentence.key) for sentence in self.sentences)

    def speak(
        self,
        store: SpokenStore,
        *,
        in_flight: int = IN_FLIGHT,
        spoken: Callable[[SentenceSpoken], None] = lambda _: None,
        stop: threading.Event | None = None,
    ) -> None:
        """Speak what the store lacks (``speaker.speak_missing``); setting
        ``stop`` ends it with ``BookCancelled``."""
        self._gains.clear()
        speak_missing(
            self._open,
            self.sentences,
            store,
            self.rate,
            retakes=self.retakes,
            in_flight=in_flight,
            spoken=spoken,
            stop=stop,
        )

    def write(
        self,
        store: SpokenStore,
        path: Path,
        format: str | None = None,
        stop: threading.Event | None = None,
        written: Callable[[int], None] = lambda _: None,
        loudness: float | None = TARGET_LUFS,
    ) -> None:
        """The whole book into ``path``, with its chapters and metadata;
        setting ``stop`` ends it with ``BookCancelled`` (``path`` then holds
        part of the book). ``written(samples)`` is told of each sentence's
        audio as it is encoded. ``loudness``: each chapter brought to this
        many LUFS (``chapter_gains``), or None to leave it as spoken."""
        lengths = sentence_lengths(store, self.sentences)
        if not any(lengths):
            raise BookError(NO_AUDIO)
        gains = self.chapter_gains(store, loudness)
        chunks = book_chunks(store, self.sentences, gains)
        write_book_audio(
            path,
            _told(_until_stopped(chunks, stop), written),
            self.rate,
            self.channels,
            chapter_marks(self.book, self.sentences, lengths),
            title=self.book.title,
            author=self.book.author,
            format=format,
            **self.tags,
        )

    def chapter_gains(self, store: SpokenStore, loudness: float | None) -> dict[int, float]:
        """Each chapter's one gain to ``loudness`` LUFS, its true peak kept
        under -1 dBTP (``audio.loudness``); none where ``loudness`` is None."""
        if loudness is None:
            return {}
        known = self._gains.get((store.folder, loudness))
        if known is not None:
            return known
        gains = {}
        for index, sentences in self._by_chapter.items():
            if any(sentence_lengths(store, sentences)):
                chunks = book_chunks(store, sentences)
                gains[index] = gain_to(measured(chunks, self.rate, self.channels), loudness)
        self._gains[store.folder, loudness] = gains
        return gains

    def write_chapters(
        self,
        store: SpokenStore,
        folder: Path,
        suffix: str,
        format: str | None = None,
        loudness: float | None = TARGET_LUFS,
    ) -> None:
        """Each chapter with audio as a file of its own in ``folder`` (made
        where missing; named by ``files.chapter_paths``), marked as one
        chapter, each written whole or not at all."""
        folder.mkdir(parents=True, exist_ok=True)
        gains = self.chapter_gains(store, loudness)
        titles = [chapter.title for chapter in self.book.chapters]
        for index, path in enumerate(chapter_paths(titles, folder, suffix)):
            sentences = self._by_chapter.get(index, [])
            length = sum(sentence_lengths(store, sentences))
            if length:
                write = partial(self._write_chapter, store, index, length, format, gains)
                write_whole(path, write)

    def _write_chapter(
        self,
        store: SpokenStore,
        index: int,
        length: int,
        format: str | None,
        gains: dict[int, float],
        path: Path,
    ) -> None:
        title = self.book.chapters[index].title
        write_book_audio(
            path,
            book_chunks(store, self._by_chapter[index], gains),
            self.rate,
            self.channels,
            [ChapterMark(title, 0, length)],
            title=title,
            author=self.book.author,
            format=format,
            **self.tags,
        )

    def captions(self, store: SpokenStore) -> list[Caption]:
        lengths = sentence_lengths(store, self.sentences)
        return book_captions(self.sentences, lengths, self.rate)

    def suspects(self, store: SpokenStore) -> list[Suspect]:
        """The kept sentences whose take is still suspect, with where they are."""
        return suspects(self.book, self.sentences, store, self.rate)

    def chapter_sentences(self) -> list[tuple[int, list[Sentence]]]:
        """Each chapter that says something, with its sentences."""
        return list(self._by_chapter.items())


def _until_stopped(
    chunks: Iterable[np.ndarray], stop: threading.Event | None
) -> Iterator[np.ndarray]:
    for chunk in chunks:
        if stop is not None and stop.is_set():
            raise BookCancelled("the book was stopped")
        yield chunk


def _retaken(request: SpeechRequest, take: int, retake: int) -> SpeechRequest:
    """``request`` for a chapter's take (``--redo``) and a sentence's retake:
    its seed moved on (none stays none: sampling without a seed differs each
    time already)."""
    seed = request.sampling.get("seed")
    if seed is None:
        return request
    moved = (seed + take + RETAKE_SEED_STEP * retake) % SEED_LIMIT
    return replace(request, sampling={**request.sampling, "seed": moved})


def _told(chunks: Iterable[np.ndarray], written: Callable[[int], None]):
    for chunk in chunks:
        yield chunk
        written(len(chunk))  # once the encoder has taken it


def _tagged_voices(sentences: Sequence[Sentence]) -> set[str]:
    names = set()
    for sentence in sentences:
        names.update(m.group("voice") for m in TAG.finditer(sentence.text))
    return names - {None}


@dataclass(frozen=True)
class SpokenChapter:
    title: str
    audio: Audio
    captions: list[Caption]  # counted from the chapter's own start


@dataclass(frozen=True)
class SpokenBook:
    """What ``speak_book`` returns: the chapters' audio and captions."""

    title: str | None
    author: str | None
    chapters: list[SpokenChapter] = field(default_factory=list)
    tags: dict = field(default_factory=dict)  # narrator, details, picture
    suspects: list[Suspect] = field(default_factory=list)  # takes still suspect

    @property
    def captions(self) -> list[Caption]:
        """The whole book's, continuous across chapters."""
        captions, offset = [], 0
        for chapter in self.chapters:
            captions += [
                replace(
                    c, index=len(captions) + n, start=c.start + offset, end=c.end + offset
                )
                for n, c in enumerate(chapter.captions)
            ]
            offset += len(chapter.audio.samples)
        return captions

    def write(
        self,
        path: str | Path,
        format: str | None = None,
        loudness: float | None = TARGET_LUFS,
    ) -> Path:
        """The whole book into one file (``.m4b``, ``.mp3``, ``.opus``,
        ``.flac`` or ``.wav``), with its chapters where the format holds them,
        each brought to ``loudness`` LUFS (None: as spoken)."""
        if not self.chapters:
            raise BookError(NO_AUDIO)
        gains = [
            1.0
            if loudness is None
            else gain_to(
                measured([c.audio.samples], c.audio.sample_rate, c.audio.channels), loudness
            )
            for c in self.chapters
        ]
        marks, start = [], 0
        for chapter in self.chapters:
            end = start + len(chapter.audio.samples)
            marks.append(ChapterMark(chapter.title, start, end))
            start = end
        first = self.chapters[0].audio
        write_book_audio(
            Path(path),
            (
                c.audio.samples * np.float32(g)
                for c, g in zip(self.chapters, gains, strict=True)
            ),
            first.sample_rate,
            first.channels,
            marks,
            title=self.title,
            author=self.author,
            format=format,
            **self.tags,
        )
        return Path(path)


def speak_book(
    tts: TTS,
    source: str | Path | Book,
    voice: Any = None,
    *,
    store: str | Path | None = None,
    in_flight: int = IN_FLIGHT,
    spoken: Callable[[SentenceSpoken], None] | None = None,
    footnotes: str = "skip",
    chapters: str | None = None,
    redo: str | None = None,
    dialogue_voice: str | None = None,
    retakes: int = DEFAULT_RETAKES,
    **options: Any,
) -> SpokenBook:
    """A book (a ``.txt``, ``.md``, ``.epub`` or ``.pdf`` file, or a ``Book``) spoken
    by ``tts`` chapter by chapter, ``in_flight`` sentences at once;
    ``.write(path)`` makes an audiobook of it. ``store``: a folder that keeps
    each sentence as it is spoken, so that a call stopped at any point
    resumes (default: a temporary one); ``spoken`` is called as each
    sentence is kept, from the thread that spoke it. ``footnotes``: "skip",
    or "chapter-end" to read a chapter's notes at its end (for a path).
    ``chapters``: speak only these ("3-5,7", numbered from 1); ``redo``:
    speak these again with another seed, in ``store``, whose later calls
    keep the new takes. ``dialogue_voice``: the voice of what is quoted.
    ``retakes``: how many more times a suspect take is spoken (its best is
    kept; ``.suspects`` lists those still suspect). Takes the keywords of
    ``TTS.stream``."""
    book = source if isinstance(source, Book) else read_book(source, footnotes=footnotes)
    chosen = chosen_chapters(chapters, len(book.chapters))
    redone_now = chosen_chapters(redo, len(book.chapters)) or frozenset()
    if redone_now and store is None:
        raise ValueError("redo speaks chapters again in a store: name its folder (store=)")
    takes = redone(kept_takes(Path(store)), redone_now) if store else {}
    request = SpeechRequest.of("", voice, **options)
    speech = BookSpeech(
        tts,
        book,
        request,
        chapters=chosen,
        takes=takes,
        dialogue_voice=dialogue_voice,
        retakes=retakes,
    )
    with contextlib.ExitStack() as stack:
        folder = store or stack.enter_context(tempfile.TemporaryDirectory())
        kept = stack.enter_context(SpokenStore(Path(folder)))
        if redone_now:
            kept.keep_takes(takes)
        speech.speak(kept, in_flight=in_flight, spoken=spoken or (lambda _: None))
        return spoken_book(speech, kept)


def spoken_book(speech: BookSpeech, store: SpokenStore) -> SpokenBook:
    """The book in memory, chapter by chapter, from the store; a chapter
    whose sentences have no audio has no place in it, as in a written book."""
    chapters = []
    for index, sentences in speech.chapter_sentences():
        parts = [store.load(sentence.key) for sentence in sentences]
        lengths = [len(part) for part in parts]
        heard = [part for part in parts if len(part)]
        if not heard:
            continue
        samples = np.concatenate(heard)
        captions = book_captions(sentences, lengths, speech.rate)
        title = speech.book.chapters[index].title
        chapters.append(SpokenChapter(title, Audio(samples, speech.rate), captions))
    book = speech.book
    found = speech.suspects(store)
    return SpokenBook(book.title, book.author, chapters, speech.tags, found)
