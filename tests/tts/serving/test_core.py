"""The serving core without any protocol: admission and its refusals, the
model slot, the graceful stop and the server's life with a listener, and
book jobs created, spoken, downloaded, cancelled and deleted."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

import mlx_speech
from mlx_speech.engine import shared_engine
from mlx_speech.request import SpeechRequest
from mlx_speech.server import ServerSettings
from mlx_speech.serving.admission import admit
from mlx_speech.serving.books import BookJobs, BookNotDone, BookOrder, UnknownBookJob
from mlx_speech.serving.lifetime import ServerLife
from mlx_speech.serving.refusal import Refusal
from mlx_speech.serving.shutdown import Shutdown
from mlx_speech.serving.slot import ModelSlot
from mlx_speech.serving.state import server_state
from mlx_speech.text.lexicon import Lexicon
from mlx_speech.voices.store import VoiceStore
from mlx_speech.wyoming_server import serve_wyoming


def _settings(speaking_dir, tmp_path, **changes) -> ServerSettings:
    return ServerSettings(
        model=str(speaking_dir),
        voices_dir=tmp_path / "voices",
        books_dir=tmp_path / "books",
        **changes,
    )


def test_admission_bounds_the_waiting_and_refuses_once_stopping(speaking_dir, tmp_path):
    state = server_state(_settings(speaking_dir, tmp_path, max_queue=2), mlx_speech.load)
    room = state.engine.capacity + 2  # those the model takes at once, and the queue
    for _ in range(room):
        admit(state)
    with pytest.raises(Refusal) as busy:
        admit(state)
    assert busy.value.reason == "busy" and busy.value.retry_after == 2
    assert "2 requests are already waiting" in busy.value.message
    state.metrics.request_closed()
    admit(state)  # a place came free
    state.shutdown.begin(30)
    with pytest.raises(Refusal) as stopping:
        admit(state)
    assert (stopping.value.reason, stopping.value.message) == (
        "stopping",
        "the server is shutting down",
    )
    assert state.metrics.in_flight == room


def test_the_slot_refuses_while_loading_and_says_why_it_failed(speaking_dir, tmp_path):
    store = VoiceStore(tmp_path)
    release = threading.Event()

    def slow_load(model, **options):
        release.wait(30)
        return mlx_speech.load(model, **options)

    lexicon = Lexicon([("mlx", "M L X")])
    slot = ModelSlot(
        str(speaking_dir), slow_load, store, {}, max_text_chars=99, lexicon=lexicon
    )
    loaded = threading.Event()
    slot.on_loaded = loaded.set
    slot.start()
    with pytest.raises(Refusal, match="the model is still loading") as loading:
        slot.ready()
    assert loading.value.reason == "not-ready"
    release.set()
    assert loaded.wait(60)
    tts = slot.ready()
    assert (tts.max_text_chars, tts.lexicon) == (99, lexicon)  # the server's settings

    failures = []

    def broken_load(model, **options):
        raise ValueError("no weights")

    failed = ModelSlot("nowhere", broken_load, store, {})
    failed.on_failure = failures.append
    failed.start()
    failed._thread.join(30)
    assert [str(error) for error in failures] == ["no weights"]
    with pytest.raises(Refusal, match="the model is failed to load: no weights"):
        failed.ready()


def test_a_stop_has_a_deadline_and_a_second_one_makes_it_now():
    shutdown = Shutdown()
    assert not shutdown.started and not shutdown.overdue
    shutdown.begin(60)
    assert shutdown.started and not shutdown.overdue
    shutdown.begin(0)  # a second begin keeps the first deadline
    assert not shutdown.overdue
    shutdown.cut_short()
    assert shutdown.overdue and shutdown.cut


def test_the_life_serves_its_listeners_until_stopped(speaking_dir, tmp_path):
    settings = _settings(speaking_dir, tmp_path, wyoming_port=0, http=False)
    state = server_state(settings, mlx_speech.load)
    life = ServerLife(state, [serve_wyoming])
    running = threading.Thread(target=life.run)
    running.start()
    deadline = time.monotonic() + 60
    while not life.listening:
        assert time.monotonic() < deadline and running.is_alive()
        time.sleep(0.02)
    assert state.listeners == {"wyoming": "serving"}
    with socket.create_connection(("127.0.0.1", state.wyoming_port), timeout=5):
        pass  # it listens
    life.stop()
    running.join(30)
    assert not running.is_alive()
    assert state.listeners == {"wyoming": "stopped"}
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", state.wyoming_port), timeout=5)


def test_a_listener_that_cannot_start_ends_the_life_with_its_error(speaking_dir, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        settings = _settings(speaking_dir, tmp_path, wyoming_port=port, http=False)
        state = server_state(settings, mlx_speech.load)
        with pytest.raises(OSError):
            ServerLife(state, [serve_wyoming]).run()
    assert not state.books._runner.is_alive()  # the core stopped with it


def test_a_book_job_is_spoken_downloaded_and_deleted(speaking_tts, tmp_path):
    slot = ModelSlot("unused", mlx_speech.load, speaking_tts.voice_store, {})
    slot.tts = speaking_tts
    books = BookJobs(tmp_path / "books", 4, slot, shared_engine())
    books.start()
    try:
        order = BookOrder(
            source=b"# One\n\nHello there.\n\n# Two\n\nGood night.\n",
            source_name="tale.md",
            title=None,
            response_format="flac",
            request=SpeechRequest("", sampling={"max_new_tokens": 2, "seed": 1}),
            loudness=None,
        )
        job = books.create(speaking_tts, order)
        assert (job.status, job.chapters, job.sentences) == ("queued", 2, 4)  # titles too
        with pytest.raises(BookNotDone):
            books.download(job.id)
        done = _until_finished(books, job.id)
        assert (done.status, done.spoken) == ("done", 4)
        assert done.audio_seconds > 0
        kept, link = books.download(job.id)
        assert link.read_bytes()[:4] == b"fLaC"
        books.downloaded(link)
        books.delete(job.id)
        assert not (tmp_path / "books" / job.id).exists()
        with pytest.raises(UnknownBookJob):
            books.get(job.id)
    finally:
        books.stop()


def test_a_queued_book_job_is_cancelled_at_once(speaking_tts, tmp_path):
    slot = ModelSlot("unused", mlx_speech.load, speaking_tts.voice_store, {})
    books = BookJobs(tmp_path / "books", 4, slot, shared_engine())
    books.start()  # no model yet: jobs wait in the queue
    try:
        order = BookOrder(
            source=b"Hello there.",
            source_name="note.txt",
            title="A note",
            response_format="mp3",
            request=SpeechRequest(""),
        )
        job = books.create(speaking_tts, order)
        cancelled = books.cancel(job.id)
        assert cancelled.status == "cancelled" and cancelled.finished is not None
        assert [kept.id for kept in books.list()] == [job.id]
    finally:
        books.stop()
    assert (Path(tmp_path / "books" / job.id) / "job.json").exists()


def _until_finished(books: BookJobs, job_id: str):
    deadline = time.monotonic() + 120
    while True:
        job = books.get(job_id)
        if job.status in ("done", "failed", "cancelled"):
            return job
        assert time.monotonic() < deadline, job
        time.sleep(0.05)
