"""Stopping a book's speaking from another thread: its ``stop`` event closes
the streams in flight and ends the run with ``BookCancelled``, what was kept
staying kept; with no ``stop`` set, the run ends as before."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from mlx_speech.audio.samples import Audio
from mlx_speech.book.plan import Sentence
from mlx_speech.book.speaker import BookCancelled, speak_missing
from mlx_speech.book.store import SpokenStore

RATE = 8000


class SlowStream:
    """A sentence's chunks, one every ``seconds``; closing it ends them."""

    def __init__(self, chunks: int, seconds: float):
        self.left = chunks
        self.seconds = seconds
        self.closed = threading.Event()

    def __iter__(self):
        return self

    def __next__(self) -> Audio:
        if self.left == 0 or self.closed.wait(self.seconds):
            raise StopIteration
        self.left -= 1
        return Audio(np.full(80, 0.1, np.float32), RATE)

    def close(self) -> None:
        self.closed.set()


def _sentences(count: int) -> list[Sentence]:
    return [
        Sentence(0, f"Sentence {n}.", f"Sentence {n}.", f"key{n}") for n in range(count)
    ]


def _opener(streams: list[SlowStream], chunks: int, seconds: float, fast: int = 0):
    """Streams of ``chunks`` chunks ``seconds`` apart, the first ``fast`` at once."""

    def open_stream(sentence, retake: int) -> SlowStream:
        streams.append(SlowStream(chunks, 0.0 if len(streams) < fast else seconds))
        return streams[-1]

    return open_stream


def test_a_stop_set_from_another_thread_closes_the_streams_and_cancels(tmp_path):
    streams: list[SlowStream] = []
    kept = []
    stop = threading.Event()

    def spoken(sentence) -> None:
        kept.append(sentence)
        if len(kept) == 3:
            threading.Timer(0.05, stop.set).start()

    with SpokenStore(tmp_path / "kept") as store:
        started = time.monotonic()
        with pytest.raises(BookCancelled):
            speak_missing(
                _opener(streams, chunks=2, seconds=30.0, fast=3),
                _sentences(40),
                store,
                RATE,
                in_flight=2,
                spoken=spoken,
                stop=stop,
            )
        # the sentences after the third wait 30 s for a chunk: closed, not waited for
        assert time.monotonic() - started < 5.0
        # two threads: the first three may end in any order
        assert sorted(s.sentence.key for s in kept) == ["key0", "key1", "key2"]
        assert sorted(path.stem for path in store.folder.glob("*.flac")) == [
            "key0",
            "key1",
            "key2",
        ]
        assert all(stream.closed.is_set() for stream in streams)
        assert [stream.left for stream in streams[3:]] == [2] * len(streams[3:]) != []


def test_a_stop_already_set_speaks_nothing(tmp_path):
    streams: list[SlowStream] = []
    stop = threading.Event()
    stop.set()
    with SpokenStore(tmp_path / "kept") as store, pytest.raises(BookCancelled):
        speak_missing(_opener(streams, 1, 0.0), _sentences(3), store, RATE, stop=stop)
    assert streams == []


def test_a_run_that_ends_before_its_stop_is_set_is_not_cancelled(tmp_path):
    streams: list[SlowStream] = []
    stop = threading.Event()
    with SpokenStore(tmp_path / "kept") as store:
        speak_missing(_opener(streams, 2, 0.0), _sentences(5), store, RATE, stop=stop)
        assert len(list(store.folder.glob("*.flac"))) == 5
