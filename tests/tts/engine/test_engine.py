"""The worker on its own, with plain generator jobs."""

from __future__ import annotations

import threading
import time

import pytest

from mlx_speech.engine import Engine


def _counting(name, log, steps=3):
    def start():
        log.append(f"{name} start")
        for index in range(steps):
            yield f"{name}{index}"
        log.append(f"{name} end")

    return start


def test_jobs_run_on_the_worker_thread():
    engine = Engine()
    assert engine.call(lambda: threading.current_thread().name) == "mlx-speech-worker"


def test_jobs_beyond_the_bound_wait_in_fifo_order():
    engine = Engine(max_active=2, max_parked=0)
    log: list[str] = []
    streams = [engine.stream(_counting(name, log)) for name in "abc"]
    assert next(streams[0]) == "a0" and next(streams[1]) == "b0"
    with pytest.raises(TimeoutError):
        streams[2].get(timeout=0.1)  # c waits for a slot
    assert "c start" not in log and engine.load == (2, 1)
    assert list(streams[0]) == ["a1", "a2"]
    assert next(streams[2]) == "c0"
    assert list(streams[1]) == ["b1", "b2"] and list(streams[2]) == ["c1", "c2"]


def test_a_parked_job_keeps_its_state_but_not_its_place():
    engine = Engine(max_active=1, max_parked=1)
    log: list[str] = []
    streams = [engine.stream(_counting(name, log)) for name in "abc"]
    assert next(streams[0]) == "a0"  # a's next chunk then waits: a is parked
    assert next(streams[1]) == "b0"  # so b starts, though only one job computes
    with pytest.raises(TimeoutError):
        streams[2].get(timeout=0.1)  # a and b parked: the parked bound is full
    assert engine.load == (2, 1) and engine.parked == 2
    assert list(streams[0]) == ["a1", "a2"]  # a resumes where it stopped
    assert list(streams[2]) == ["c0", "c1", "c2"]
    assert list(streams[1]) == ["b1", "b2"]


def test_a_job_never_runs_more_than_one_chunk_ahead_of_its_reader():
    engine = Engine()
    produced: list[int] = []

    def start():
        for index in range(100):
            produced.append(index)
            yield index

    stream = engine.stream(start)
    assert next(stream) == 0
    time.sleep(0.1)
    assert len(produced) <= 3  # one taken, one queued, one waiting to be queued
    stream.cancel()


def test_errors_reach_the_consumer():
    engine = Engine()

    def start():
        yield "fine"
        raise ValueError("broken on the worker")

    stream = engine.stream(start)
    assert next(stream) == "fine"
    with pytest.raises(ValueError, match="broken on the worker"):
        next(stream)
    with pytest.raises(StopIteration):
        next(stream)


def test_a_timed_out_read_loses_nothing():
    engine = Engine()
    release = threading.Event()

    def start():
        release.wait()
        yield "final"

    stream = engine.stream(start)
    with pytest.raises(TimeoutError):
        stream.get(timeout=0.05)
    release.set()
    assert stream.get(timeout=5) == "final"
    with pytest.raises(StopIteration):
        stream.get(timeout=5)


def test_cancel_runs_the_jobs_cleanup_on_the_worker():
    engine = Engine()
    cleaned: list[str] = []

    def start():
        try:
            while True:
                yield None  # working, nothing to publish yet
        finally:
            cleaned.append(threading.current_thread().name)

    stream = engine.stream(start)
    with pytest.raises(TimeoutError):
        stream.get(timeout=0.05)
    stream.cancel()
    deadline = time.monotonic() + 5
    while not cleaned and time.monotonic() < deadline:
        time.sleep(0.01)
    assert cleaned == ["mlx-speech-worker"]
    assert engine.load == (0, 0)


def test_shutdown_ends_the_streams_of_running_and_waiting_jobs():
    engine = Engine(max_active=1)

    def endless():
        while True:
            yield None

    running, waiting = engine.stream(endless), engine.stream(endless)
    for stream in (running, waiting):
        with pytest.raises(TimeoutError):
            stream.get(timeout=0.05)
    engine.shutdown()
    for stream in (running, waiting):
        with pytest.raises(StopIteration):
            stream.get(timeout=5)
    with pytest.raises(RuntimeError, match="shut down"):
        next(engine.stream(endless))


def test_a_cleanup_that_fails_does_not_stop_the_worker():
    engine = Engine()

    def start():
        try:
            while True:
                yield "x"
        finally:
            raise RuntimeError("cleanup exploded")

    stream = engine.stream(start)
    assert next(stream) == "x"
    stream.cancel()
    assert engine.call(lambda: "still serving") == "still serving"


def test_freed_buffers_are_kept_a_while_then_given_back(monkeypatch):
    import mlx.core as mx

    from mlx_speech.engine import worker

    monkeypatch.setattr(worker, "IDLE_SECONDS_BEFORE_CLEARING", 0.5)
    engine = Engine()
    engine.call(lambda: mx.eval(mx.ones((1 << 20,)) * 2))  # 4 MiB, freed at once
    assert mx.get_cache_memory() >= 4 << 20  # kept for the next request
    deadline = time.monotonic() + 10
    while mx.get_cache_memory():
        assert time.monotonic() < deadline, "the idle worker kept its buffers"
        time.sleep(0.05)
    engine.shutdown()
