"""One book job run to its end, on the jobs' runner thread (``books``): its
book read again from its folder and planned, the sentences its store lacks
spoken (those kept by an earlier run are reused), then its audio and
captions written, each whole or not at all. Where it stands goes to
``update`` as it changes: the status, and the sentences kept with their
audio, from the threads that speak them."""

from __future__ import annotations

import errno
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..book.contents import chosen_chapters
from ..book.files import write_whole
from ..book.source import Book, book_of
from ..book.speaker import SentenceSpoken
from ..book.speech import BookSpeech
from ..book.store import SpokenStore
from ..text.captions import webvtt
from ..tts import TTS
from .book_job import BookJob, source_path

# ``update(**changes)``: the job's fields that changed (``BookJob``'s names)
Update = Callable[..., None]

AUDIO_NAME = "book"  # book.<format>
CAPTIONS_NAME = "captions.vtt"


def run_book_job(
    tts: TTS,
    folder: Path,
    job: BookJob,
    update: Update,
    *,
    book: Book | None,
    in_flight: int,
    stop: threading.Event,
) -> None:
    """Speak and write ``job``; setting ``stop`` ends it with
    ``BookCancelled``, leaving what was kept. ``book``: as read when the job
    was made, else None to read it again from its folder (after a restart)."""
    if book is None:
        source = source_path(folder, job).read_bytes()
        book = titled(book_of(source, job.source, footnotes=job.footnotes), job.title)
    chosen = chosen_chapters(job.chapters_asked, len(book.chapters))
    speech = BookSpeech(
        tts,
        book,
        job.request,
        chapters=chosen,
        dialogue_voice=job.dialogue_voice,
        retakes=job.retakes,
    )
    with SpokenStore(folder / "spoken") as store:
        progress = _Progress(speech, store, update)
        started = job.started or time.time()
        update(status="speaking", started=started, **progress.numbers())
        speech.speak(store, in_flight=in_flight, spoken=progress.add, stop=stop)
        suspects = [suspect.as_dict() for suspect in speech.suspects(store)]
        update(status="writing", suspects=suspects)
        audio_format = job.response_format
        audio = folder / f"{AUDIO_NAME}.{audio_format}"
        write_whole(
            audio,
            lambda path: speech.write(
                store, path, audio_format, stop, loudness=job.loudness
            ),
        )
        captions = webvtt(speech.captions(store))
        write_whole(
            folder / CAPTIONS_NAME, lambda path: path.write_text(captions, encoding="utf-8")
        )
        update(status="done", finished=time.time(), **progress.numbers())


def titled(book: Book, title: str | None) -> Book:
    """``book`` with the title a client gave, if any."""
    return replace(book, title=title) if title else book


def failure(error: BaseException, job: BookJob, folder: Path) -> str:
    """Why a job failed, in one line that names no path of the server's
    (``folder`` is the books folder)."""
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return (
            f"no space left on the server's disk ({error.strerror}); the "
            f"{job.spoken} sentences spoken so far stay in this job until it is "
            "deleted: free some space and create the job again"
        )
    if isinstance(error, OSError) and error.strerror:
        return f"the server's disk failed: {error.strerror}"
    said = " ".join(str(error).split()) or type(error).__name__
    return said.replace(str(folder / job.id), "the job's folder").replace(
        str(folder), "the books folder"
    )


class _Progress:
    """The sentences kept and their audio, counted as each is kept (a
    sentence said twice is spoken once and counts twice)."""

    def __init__(self, speech: BookSpeech, store: SpokenStore, update: Update):
        self._uses = Counter(sentence.key for sentence in speech.sentences)
        kept = [key for key in self._uses if store.has(key)]
        self._spoken = sum(self._uses[key] for key in kept)
        self._samples = sum(self._uses[key] * store.frames(key) for key in kept)
        self._rate = speech.rate
        self._update = update
        self._lock = threading.Lock()

    def numbers(self) -> dict[str, Any]:
        return {"spoken": self._spoken, "audio_seconds": self._samples / self._rate}

    def add(self, kept: SentenceSpoken) -> None:
        with self._lock:
            uses = self._uses[kept.sentence.key]
            self._spoken += uses
            self._samples += uses * kept.samples
            self._update(**self.numbers())
