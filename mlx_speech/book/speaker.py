"""Speaking a book's missing sentences, many in flight at once.

Each sentence in flight has a thread of its own that reads its stream to
the end, so the engine always has that many jobs to step together (a job
whose reader waits is parked). Sentences start in the book's order; each
is kept in the store as it ends, so their order at the output comes from
the plan, not from when they finished. Each take is checked (``takes``);
a suspect one is spoken again, up to ``retakes`` times, and the best is
kept, marked where it is still suspect. The first failure stops the rest:
what was kept stays kept. Another thread stops a run by setting its
``stop`` event (a server cancelling a job, or stopping): the streams in
flight are closed and ``BookCancelled`` is raised.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from .plan import Sentence
from .store import SpokenStore
from .takes import Take, best_take, checked_take

IN_FLIGHT = 8  # the engine's default batch: more would only wait
# What ``mlx-speech book`` runs the engine's batch at, and as many in flight:
# more rows share each product (bench/bench_book.py, docs/performance.md).
BOOK_BATCH = 16
STOP_CHECK_SECONDS = 0.1  # how often a run looks at its ``stop`` event


class BookCancelled(Exception):
    """The run was stopped (its ``stop`` event set) before every sentence was
    kept; what was kept stays kept."""


@dataclass(frozen=True)
class SentenceSpoken:
    """What a progress report is told as each sentence is kept."""

    sentence: Sentence
    samples: int  # its audio's length
    suspect: str | None = None  # why its kept take is suspect, if it is
    takes: int = 1  # how many were spoken


class _Run:
    """The threads of one call of ``speak_missing``, and what stops them."""

    def __init__(self, waiting: Sequence[Sentence]):
        self.waiting = list(reversed(waiting))  # popped from the end: in order
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.error: BaseException | None = None
        self.streams: set = set()

    def next_sentence(self) -> Sentence | None:
        with self.lock:
            if self.stopped.is_set() or not self.waiting:
                return None
            return self.waiting.pop()

    def fail(self, error: BaseException) -> None:
        with self.lock:
            if self.error is None:
                self.error = error
        self.stop()

    def stop(self) -> None:
        self.stopped.set()
        with self.lock:
            streams = list(self.streams)
        for stream in streams:
            stream.close()  # its reader's loop then ends


def speak_missing(
    open_stream: Callable[[Sentence, int], Iterable],
    sentences: Sequence[Sentence],
    store: SpokenStore,
    rate: int,
    *,
    retakes: int = 0,
    in_flight: int = IN_FLIGHT,
    spoken: Callable[[SentenceSpoken], None] = lambda _: None,
    stop: threading.Event | None = None,
) -> None:
    """Speak each sentence the store lacks (``open_stream(sentence, retake)``
    gives a take's chunks: 0 the first, then each retake's) and keep its best
    take; ``spoken`` is called as each is kept, from the thread that spoke it.
    Raises the first failure once all threads end, or ``BookCancelled`` once
    ``stop`` is set."""
    if stop is not None and stop.is_set():
        raise BookCancelled("the book was stopped")
    seen: set[str] = set()
    waiting = []
    for sentence in sentences:
        if sentence.key not in seen and not store.has(sentence.key):
            waiting.append(sentence)
        seen.add(sentence.key)  # a sentence said twice is spoken once
    run = _Run(waiting)
    threads = [
        threading.Thread(
            target=_speak_until_done,
            args=(run, open_stream, store, rate, retakes, spoken),
            name=f"book-sentence-{number}",
            daemon=True,
        )
        for number in range(min(in_flight, len(waiting)))
    ]
    for thread in threads:
        thread.start()
    try:
        cancelled = _join(threads, run, stop)
    except BaseException:  # Ctrl-C: what is in flight is dropped, the kept stays
        run.stop()
        raise
    if run.error is not None:
        raise run.error
    if cancelled:
        raise BookCancelled("the book was stopped")


def _join(threads: list[threading.Thread], run: _Run, stop: threading.Event | None) -> bool:
    """Waits for the threads to end; whether ``stop`` stopped the run first."""
    cancelled = False
    for thread in threads:
        while thread.is_alive():
            thread.join(STOP_CHECK_SECONDS)
            if stop is not None and stop.is_set() and not cancelled:
                cancelled = True
                run.stop()
    return cancelled


def _speak_until_done(run: _Run, open_stream, store, rate, retakes, spoken) -> None:
    while (sentence := run.next_sentence()) is not None:
        try:
            takes = _takes(run, open_stream, sentence, rate, retakes)
            if takes is None:
                return  # stopped
            kept = best_take(takes)
            store.save(sentence.key, kept.samples, rate, kept.suspect)
            spoken(SentenceSpoken(sentence, len(kept.samples), kept.suspect, len(takes)))
        except BaseException as error:  # noqa: BLE001 - the caller raises it
            if not run.stopped.is_set():  # else: its stream was closed to stop it
                run.fail(error)
            return


def _takes(run: _Run, open_stream, sentence: Sentence, rate: int, retakes: int):
    """The sentence's takes, until one is not suspect or ``retakes`` more
    were spoken; None if the run stopped first."""
    takes: list[Take] = []
    for retake in range(retakes + 1):
        spoken = _spoken(run, open_stream, sentence, retake)
        if spoken is None:
            return None
        samples, ran_out = spoken
        takes.append(checked_take(sentence.shown, samples, rate, ran_out))
        if takes[-1].suspect is None:
            break
    return takes


def _spoken(
    run: _Run, open_stream, sentence: Sentence, retake: int
) -> tuple[np.ndarray, bool] | None:
    """A take's audio and whether it ran to its frame budget, or None if the
    run stopped first."""
    stream = open_stream(sentence, retake)
    with run.lock:
        run.streams.add(stream)
    try:
        chunks = []
        for chunk in stream:
            if run.stopped.is_set():
                return None
            chunks.append(chunk.samples)
    finally:
        with run.lock:
            run.streams.discard(stream)
        stream.close()
    if run.stopped.is_set():
        return None
    samples = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
    return samples, getattr(stream, "result", None) is True
