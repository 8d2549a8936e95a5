"""Continuous batching: Nano requests running together share each frame's
forward pass, and each gets exactly what it would get alone."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import replace

import httpx
import numpy as np
import pytest

from mlx_speech.engine import Engine, shared_engine
from mlx_speech.engine import worker as worker_module
from mlx_speech.engine.batching import DeferredOutput, Pending
from mlx_speech.server import ServerSettings
from tests.tts.support.interleave import read_in_turn
from tests.tts.support.server import RunningServer

TEXTS = [
    "Hello there.",
    "The quick brown fox jumps over the lazy dog.",
    "你好，欢迎使用语音合成服务。",
    "A longer text. With two sentences, and a clause or two!",
]


@contextmanager
def observed_forwards():
    sizes: list[int] = []
    engine = shared_engine()

    def observe(jobs: int, seconds: float) -> None:
        sizes.append(jobs)

    engine.forward_observers.append(observe)
    try:
        yield sizes
    finally:
        engine.forward_observers.remove(observe)


@contextmanager
def max_batch(size: int):
    engine = shared_engine()
    before = engine.max_batch
    engine.configure(size, engine.max_parked)
    try:
        yield
    finally:
        engine.configure(before, engine.max_parked)


def _requests():
    """Greedy and seeded, with different budgets and sampling settings."""
    return [
        {
            "text": TEXTS[i % len(TEXTS)],
            "seed": 100 + i,
            "max_new_tokens": 12 + 3 * i,
            **({"temperature": 0} if i % 3 == 0 else {"top_k": 10 + i}),
        }
        for i in range(8)
    ]


def _together(tts, requests) -> list[np.ndarray]:
    """All requests started at once and read in turn, so they batch."""
    return read_in_turn([tts.stream(**request) for request in requests])


def test_eight_requests_batched_equal_each_alone(speaking_tts):
    requests = _requests()
    alone = [speaking_tts.speak(**request).samples for request in requests]
    with observed_forwards() as sizes:
        together = _together(speaking_tts, requests)
    assert max(sizes) >= 6, sizes  # they really ran together
    for expected, got in zip(alone, together, strict=True):
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, atol=1e-6)


def test_codes_of_requests_stepped_together_equal_mlx_audio(speaking_tts, speaking_dir):
    """The codes themselves, four requests stepped together (greedy and seeded,
    different budgets), against mlx-audio's own loop run alone."""
    import mlx.core as mx
    from mlx_audio.tts.utils import load_model

    from mlx_speech.families.moss_nano.loop import FrameJob
    from mlx_speech.families.moss_nano.sampling import KeySequence
    from mlx_speech.families.moss_nano.service import DEFAULTS, _frame_sampling

    cases = [(True, 1), (False, 2), (False, 3), (True, 4)]
    model = speaking_tts._service._model
    stepper = speaking_tts._service._batch._stepper  # the backend's

    def prompt(of_model, seed):
        return of_model.build_inference_input_ids(
            text=TEXTS[seed % 4], tokenizer=of_model.tokenizer, mode="continuation"
        )[0]

    def run_together():
        jobs = []
        for greedy, seed in cases:
            options = replace(DEFAULTS, max_new_tokens=20 + seed)
            if greedy:
                options = replace(options, temperature=0.0)
            jobs.append(
                FrameJob(
                    model, prompt(model, seed), _frame_sampling(options), KeySequence(seed)
                )
            )
        codes: list[list[np.ndarray]] = [[] for _ in jobs]
        while live := [job for job in jobs if not job.done]:
            stepper.step(live)
            for job in live:
                if not job.stopped:
                    codes[jobs.index(job)].append(np.asarray(job.frame))
        return codes

    together = shared_engine().call(run_together)
    reference = load_model(speaking_dir)
    for (greedy, seed), ours in zip(cases, together, strict=True):
        mx.random.seed(seed)
        theirs = reference.generate_audio_token_ids(
            prompt_input_ids=prompt(reference, seed),
            max_new_frames=20 + seed,
            do_sample=not greedy,
        )
        np.testing.assert_array_equal(np.stack(ours), np.asarray(theirs[0]))


def test_chunks_decoded_together_equal_mlx_audio_streaming_each_alone(speaking_tts):
    """Requests at different points of their audio, with different chunk
    sizes, decoded in one pass: each gets what mlx-audio's streaming decoder
    gives it alone."""
    import mlx.core as mx

    from mlx_speech.families.moss_nano.codec import DecoderState, decode_together

    codec = speaking_tts._service._codec
    n_vq = speaking_tts._service._model.config.n_vq
    rng = np.random.default_rng(7)

    def run():
        theirs = [codec.make_streaming_decoder(num_quantizers=n_vq) for _ in range(4)]
        ours = [DecoderState(codec) for _ in range(4)]
        pairs = []
        for round_ in range(5):
            due = [r for r in range(4) if (r + round_) % 3 != 0]  # some sit out
            chunks = {
                r: list(mx.array(rng.integers(0, 64, (1 + r % 3, n_vq)), dtype=mx.int32))
                for r in due
            }
            expected = [theirs[r].decode_frames(mx.stack(chunks[r])) for r in due]
            got = decode_together(codec, n_vq, [(ours[r], chunks[r]) for r in due])
            pairs += list(zip(map(np.asarray, expected), map(np.asarray, got), strict=True))
        return pairs

    for expected, got in shared_engine().call(run):
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, atol=1e-6)


def test_requests_that_stop_by_themselves_leave_the_batch(stopping_tts):
    requests = [{"text": TEXTS[i % 4], "seed": i, "max_new_tokens": 60} for i in range(6)]
    alone = [stopping_tts.speak(**request).samples for request in requests]
    with observed_forwards() as sizes:
        together = _together(stopping_tts, requests)
    assert len({len(a) for a in alone}) > 1  # they stop at different frames
    assert max(sizes) > 1 and min(sizes) < max(sizes)
    for expected, got in zip(alone, together, strict=True):
        np.testing.assert_allclose(got, expected, atol=1e-6)


def test_a_parked_request_leaves_the_batch_and_comes_back(speaking_tts):
    parked_request = {"text": TEXTS[1], "seed": 5, "max_new_tokens": 30}
    moving_request = {"text": TEXTS[0], "seed": 6, "max_new_tokens": 30}
    expected = speaking_tts.speak(**parked_request).samples
    parked = speaking_tts.stream(**parked_request)
    first = next(parked)  # now it generates one chunk ahead, then waits for its reader
    moving = speaking_tts.speak(**moving_request).samples  # runs while the other is parked
    rest = [chunk.samples for chunk in parked]
    np.testing.assert_allclose(np.concatenate([first.samples, *rest]), expected, atol=1e-6)
    np.testing.assert_allclose(
        moving, speaking_tts.speak(**moving_request).samples, atol=1e-6
    )


def test_a_new_request_joins_at_the_next_frame(speaking_tts):
    """Its first audio does not wait for the running request to finish."""
    long = speaking_tts.stream(TEXTS[3], seed=1, max_new_tokens=200)
    next(long)
    started = time.perf_counter()
    newcomer = speaking_tts.stream(TEXTS[0], seed=2, max_new_tokens=5)
    first = next(newcomer)
    first_at = time.perf_counter() - started
    chunks_of_long = 0
    for _ in long:
        chunks_of_long += 1
    assert len(first.samples) > 0
    assert chunks_of_long > 3  # the long one was still running when the newcomer spoke
    assert first_at < 30
    list(newcomer)


def test_batching_off_still_interleaves(speaking_tts):
    requests = _requests()[:3]
    alone = [speaking_tts.speak(**request).samples for request in requests]
    with max_batch(1), observed_forwards() as sizes:
        together = _together(speaking_tts, requests)
    assert set(sizes) == {1}
    for expected, got in zip(alone, together, strict=True):
        np.testing.assert_allclose(got, expected, atol=1e-6)


def test_a_batch_that_fails_fails_each_of_its_requests(
    speaking_dir, nano_backend, monkeypatch
):
    import mlx_speech

    tts = mlx_speech.load(speaking_dir, backend=nano_backend)
    streams = [tts.stream(TEXTS[0], seed=i, max_new_tokens=20) for i in range(3)]
    for stream in streams:
        next(stream)

    def broken(jobs):
        raise RuntimeError("the frame step broke")

    # the backend's frame step, whichever it is
    monkeypatch.setattr(tts._service._batch._stepper, "step", broken)
    for stream in streams:
        with pytest.raises(RuntimeError, match="frame step broke"):
            list(stream)


class _RecordingBatch:
    """A batch that records the groups each flush steps together."""

    def __init__(self):
        self.waiting: list[str] = []
        self.flushed: list[list[str]] = []

    def submit(self, name):
        self.waiting.append(name)

    def flush(self, max_batch):
        groups = [
            self.waiting[i : i + max_batch] for i in range(0, len(self.waiting), max_batch)
        ]
        self.flushed.extend(groups)
        self.waiting = []
        return [len(group) for group in groups]


def test_engine_flushes_each_batch_once_per_round():
    engine = Engine(max_active=4, max_batch=3)
    batch = _RecordingBatch()
    flushed = batch.flushed
    lock = threading.Lock()
    started: list[str] = []

    def job(name):
        def start():
            started.append(name)
            while len(started) < 4:  # line all four up for the same round
                yield None
            for index in range(2):
                with lock:
                    batch.submit(name)
                yield Pending(batch, f"{name}{index}" if index else None)

        return start

    streams = [engine.stream(job(name)) for name in "abcd"]
    outputs: list[list[str]] = [[] for _ in streams]
    readers = [
        threading.Thread(target=lambda i=i: outputs[i].extend(streams[i]))
        for i in range(len(streams))
    ]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join(timeout=10)
    assert outputs == [[f"{name}1"] for name in "abcd"]
    assert max(len(group) for group in flushed) == 3
    assert sorted(name for group in flushed for name in group) == sorted("aabbccdd")


def test_a_job_that_arrives_during_a_round_joins_its_step():
    """A burst's late arrivals start in the round that is running (their
    prompts before its shared step), not a round later; at most
    ``max_active`` jobs start so in one round."""
    engine = Engine(max_active=3, max_batch=3)
    batch = _RecordingBatch()
    first_started = threading.Event()

    def job(name):
        def start():
            if name == "a":
                first_started.set()
                deadline = time.monotonic() + 10
                while engine.load[1] < 3 and time.monotonic() < deadline:
                    time.sleep(0.01)  # a prompt, while the others arrive
            batch.submit(name)
            yield Pending(batch, None)
            yield name

        return start

    streams = {name: engine.stream(job(name)) for name in "abcd"}
    outputs: dict[str, list[str]] = {name: [] for name in streams}

    def read(name):
        outputs[name].extend(streams[name])

    first = threading.Thread(target=read, args=("a",))
    first.start()
    assert first_started.wait(10)
    others = [threading.Thread(target=read, args=(name,)) for name in "bcd"]
    for waiting, reader in enumerate(others, start=1):
        reader.start()
        while engine.load[1] < waiting:  # queued in this order
            time.sleep(0.001)
    for reader in [first, *others]:
        reader.join(timeout=10)
    assert outputs == {name: [name] for name in "abcd"}
    assert batch.flushed == [["a", "b", "c"], ["d"]]  # d waited: the worker holds three


def _named_job(batch: _RecordingBatch, started: threading.Event | None = None):
    def job(name):
        def start():
            if started is not None:
                started.set()
            batch.submit(name)
            yield Pending(batch, None)
            yield name

        return start

    return job


def test_streams_opened_together_start_together_though_read_apart(monkeypatch):
    """A round waits for the jobs whose streams are open but not yet read
    (a burst's requests, read a few ms apart), and for no others."""
    monkeypatch.setattr(worker_module, "GATHER_SECONDS", 60.0)
    engine = Engine(max_active=4, max_batch=4)
    batch = _RecordingBatch()
    first_started = threading.Event()
    job = _named_job(batch, first_started)
    streams = {name: engine.stream(job(name)) for name in "abc"}
    dropped = engine.stream(job("dropped"))
    dropped.cancel()  # never read: nothing waits for it
    outputs: dict[str, list[str]] = {}
    readers = {
        name: threading.Thread(target=lambda n=name: outputs.update({n: list(streams[n])}))
        for name in streams
    }
    readers["a"].start()
    assert first_started.wait(10)
    readers["b"].start()
    readers["c"].start()
    for reader in readers.values():
        reader.join(timeout=10)
        assert not reader.is_alive()  # nothing waited a minute for the dropped stream
    assert outputs == {name: [name] for name in "abc"}
    assert batch.flushed == [["a", "b", "c"]]


def test_a_stream_left_unread_holds_up_rounds_only_for_a_moment(monkeypatch):
    monkeypatch.setattr(worker_module, "GATHER_SECONDS", 0.05)
    engine = Engine(max_active=4, max_batch=4)
    batch = _RecordingBatch()
    job = _named_job(batch)
    first, unread = engine.stream(job("a")), engine.stream(job("b"))
    reader = threading.Thread(target=lambda: list(first))
    reader.start()
    reader.join(timeout=10)
    assert not reader.is_alive()
    assert batch.flushed == [["a"]]
    assert list(unread) == ["b"]
    assert batch.flushed == [["a"], ["b"]]


def test_jobs_that_end_at_once_do_not_hold_up_a_rounds_step():
    """However many jobs that end at their first turn (say, requests that
    fail at once) arrive during a round, at most ``max_active`` of them
    start in it before its step."""
    engine = Engine(max_active=2, max_batch=2)
    events: list[str] = []

    class Recorder:
        def submit(self, name):
            pass

        def flush(self, max_batch):
            events.append("step")
            return [1]

    def stepping():
        deadline = time.monotonic() + 10
        while engine.load[1] < 5 and time.monotonic() < deadline:
            time.sleep(0.01)  # five short jobs arrive meanwhile
        yield Pending(Recorder(), None)

    def short(index):
        def start():
            events.append(f"short{index}")
            yield from ()

        return start

    streams = [engine.stream(stepping), *(engine.stream(short(i)) for i in range(5))]
    readers = [threading.Thread(target=list, args=(stream,)) for stream in streams]
    readers[0].start()
    while not engine.load[0]:
        time.sleep(0.01)
    for waiting, reader in enumerate(readers[1:], start=1):
        reader.start()
        while engine.load[1] < waiting:  # queued in this order
            time.sleep(0.001)
    for reader in readers:
        reader.join(timeout=10)
    assert events[:3] == ["short0", "short1", "step"]
    assert sorted(events[3:]) == ["short2", "short3", "short4"]


def test_a_request_still_being_checked_starts_with_one_already_reading(
    speaking_dir, monkeypatch
):
    """Over HTTP a request is expected from the moment its body is read: a
    request whose stream is already read waits for it, and both take their
    first step together; a request refused meanwhile holds nothing up."""
    from mlx_speech.http.speech import endpoints as http_app

    monkeypatch.setattr(worker_module, "GATHER_SECONDS", 60.0)
    checking, release = threading.Event(), threading.Event()
    parse = http_app.parse_speech_request

    def slow_parse(body, rules):
        if body["input"] == "Checked slowly.":
            checking.set()
            assert release.wait(30)
        return parse(body, rules)

    monkeypatch.setattr(http_app, "parse_speech_request", slow_parse)
    with RunningServer(ServerSettings(model=str(speaking_dir), max_batch=4)) as server:

        def speak(text, results):
            results.append(
                httpx.post(
                    f"{server.url}/v1/audio/speech",
                    json={"input": text, "seed": 1, "max_new_tokens": 3},
                    timeout=60,
                ).status_code
            )

        codes: list[int] = []
        with observed_forwards() as sizes:
            slow = threading.Thread(target=speak, args=("Checked slowly.", codes))
            slow.start()
            assert checking.wait(30)
            fast = threading.Thread(target=speak, args=("Read at once.", codes))
            fast.start()
            deadline = time.monotonic() + 30
            while not shared_engine().load[0] and time.monotonic() < deadline:
                time.sleep(0.005)  # the fast one's job started its round, and waits
            refused = httpx.post(f"{server.url}/v1/audio/speech", json={"input": ""})
            time.sleep(0.2)
            release.set()
            for thread in (slow, fast):
                thread.join(timeout=60)
                assert not thread.is_alive()
        assert refused.status_code == 400
        assert codes == [200, 200]
        assert sizes[0] == 2  # their first step, together


def test_metrics_show_batch_sizes_and_step_times(speaking_dir, nano_backend):
    settings = ServerSettings(model=str(speaking_dir), max_batch=4, backend=nano_backend)
    with RunningServer(settings) as server:

        def speak(seed):
            httpx.post(
                f"{server.url}/v1/audio/speech",
                json={"input": "Hello there.", "seed": seed, "max_new_tokens": 10},
                timeout=60,
            )

        threads = [threading.Thread(target=speak, args=(seed,)) for seed in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        text = httpx.get(f"{server.url}/metrics").text
        assert shared_engine().max_batch == 4
    assert "mlx_speech_batch_size_bucket" in text
    assert "mlx_speech_batch_step_seconds_count" in text
    count = [
        line for line in text.splitlines() if line.startswith("mlx_speech_batch_size_count")
    ]
    assert int(count[0].split()[-1]) > 0


class _Producing:
    """A batch whose flush produces the outputs handed to it."""

    def __init__(self, fail: bool = False):
        self.waiting: list[DeferredOutput] = []
        self.fail = fail

    def make(self) -> DeferredOutput:
        later = DeferredOutput(self)
        self.waiting.append(later)
        return later

    def flush(self, max_batch):
        for index, later in enumerate(self.waiting):
            if self.fail:
                later.fail(RuntimeError("the decode broke"))
            else:
                later.resolve(f"chunk{index}")
        self.waiting = []
        return []


def test_an_output_made_by_a_flush_reaches_its_reader_before_the_next_step():
    engine = Engine()
    producing = _Producing()
    received = threading.Event()
    step_saw_the_chunk: list[bool] = []

    class Stepping:
        def flush(self, max_batch):
            step_saw_the_chunk.append(received.wait(timeout=5))
            return [1]

    stepping = Stepping()

    def start():
        yield Pending(stepping, producing.make())  # joins the step batch first

    items = []

    def read():
        for item in engine.stream(start):
            items.append(item)
            received.set()

    reader = threading.Thread(target=read)
    reader.start()
    reader.join(timeout=10)
    assert items == ["chunk0"]
    assert step_saw_the_chunk == [True]


def test_an_output_whose_work_failed_fails_its_reader_only():
    engine = Engine()
    broken, working = _Producing(fail=True), _Producing()

    def start(batch):
        def steps():
            yield Pending(batch, batch.make())
            yield "after"

        return steps

    failing = engine.stream(start(broken))
    fine = engine.stream(start(working))
    with pytest.raises(RuntimeError, match="the decode broke"):
        list(failing)
    assert list(fine) == ["chunk0", "after"]


def test_each_output_is_published_as_soon_as_it_is_produced():
    engine = Engine()
    one_arrived = threading.Event()
    arrived_before_the_other: list[bool] = []

    class TwoDecodes:
        def __init__(self):
            self.waiting: list[tuple[DeferredOutput, str]] = []

        def flush(self, max_batch):
            (first, first_value), (second, second_value) = self.waiting
            self.waiting = []
            first.resolve(first_value)
            arrived_before_the_other.append(one_arrived.wait(timeout=5))
            second.resolve(second_value)
            return []

    producing = TwoDecodes()
    started: list[str] = []

    def start(name):
        def steps():
            started.append(name)
            while len(started) < 2:  # both hand over their work in the same round
                yield None
            later = DeferredOutput(producing)
            producing.waiting.append((later, name))
            yield Pending(producing, later)

        return steps

    results: dict[str, list[str]] = {}

    def read(name):
        results[name] = []
        for item in engine.stream(start(name)):
            results[name].append(item)
            one_arrived.set()

    readers = [threading.Thread(target=read, args=(name,)) for name in ("a", "b")]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join(timeout=10)
    assert results == {"a": ["a"], "b": ["b"]}
    assert arrived_before_the_other == [True]
