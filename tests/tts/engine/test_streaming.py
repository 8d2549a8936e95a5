"""Streaming through the real worker: chunking, timing, isolation, cancellation."""

from __future__ import annotations

import gc
import threading
import time

import mlx.core as mx
import numpy as np
import pytest

import mlx_speech
from mlx_speech.engine import shared_engine
from mlx_speech.host_engine.frame_step import HostStep
from tests.tts.support.held import HeldGeneration
from tests.tts.support.idle import wait_until_idle

TEXT = "A longer text. With two sentences, and a third clause."


def test_concatenated_chunks_equal_buffered_audio(speaking_tts):
    chunks = list(speaking_tts.stream(TEXT, seed=3, max_new_tokens=50))
    buffered = speaking_tts.speak(TEXT, seed=3, max_new_tokens=50)
    streamed = np.concatenate([c.samples for c in chunks])
    assert len(chunks) > 2
    assert all(c.sample_rate == 48000 and c.samples.dtype == np.float32 for c in chunks)
    np.testing.assert_array_equal(streamed, buffered.samples)


def test_a_seeded_stream_is_the_same_whatever_the_readers_pace(speaking_tts):
    """Chunks follow the request alone (1, 1, 1, 1, 2, 3, …), never the clock, so
    a reader that dawdles gets the same chunks and the same samples."""
    fast = list(speaking_tts.stream(TEXT, seed=5, max_new_tokens=40))
    slow = []
    for chunk in speaking_tts.stream(TEXT, seed=5, max_new_tokens=40):
        slow.append(chunk)
        time.sleep(0.05)
    frame = 960
    assert [len(c.samples) // frame for c in fast] == [1, 1, 1, 1, 2, 3, 4, 6, 9, 12]
    assert [len(c.samples) for c in slow] == [len(c.samples) for c in fast]
    for ours, theirs in zip(slow, fast, strict=True):
        np.testing.assert_array_equal(ours.samples, theirs.samples)


def test_output_is_48k_mono_float32(speaking_tts):
    audio = speaking_tts.speak("Hello there.", temperature=0, max_new_tokens=10)
    assert audio.sample_rate == speaking_tts.sample_rate == 48000
    assert audio.samples.ndim == 1 and audio.samples.dtype == np.float32
    assert len(audio.samples) == 10 * speaking_tts._service.samples_per_frame


class _SlowGlobalStep:
    """Makes every global step (a prompt's or a frame's, through MLX or on
    the host) take at least 50 ms more, and records when each finished.
    Through MLX it wraps the global transformer's final norm, which every
    step ends with; on the host, the host's global steps."""

    def __init__(self, service):
        self.finished: list[float] = []
        transformer = service._model.transformer
        self.inner = transformer.ln_f
        transformer.ln_f = self
        host = service._batch._stepper
        if isinstance(host, HostStep):
            for name in ("_global_prompts", "_global_rows"):
                setattr(host, name, self._slowing(getattr(host, name)))

    def _slowing(self, global_step):
        def slowed(*arguments):
            return self._slowed(global_step(*arguments))

        return slowed

    def __call__(self, x):
        out = self.inner(x)
        mx.eval(out)
        return self._slowed(out)

    def _slowed(self, out):
        time.sleep(0.05)
        self.finished.append(time.perf_counter())
        return out


def test_first_chunk_is_one_frame_and_arrives_before_the_second_frame(
    speaking_dir, nano_backend
):
    tts = mlx_speech.load(speaking_dir, backend=nano_backend)
    tts.speak("Hi.", max_new_tokens=1)  # the shared prompt prefix is now cached
    slow = _SlowGlobalStep(tts._service)
    stream = tts.stream("Hello there.", temperature=0, max_new_tokens=5)
    first = next(stream)
    received = time.perf_counter()
    rest = list(stream)
    assert len(first.samples) == tts._service.samples_per_frame
    # call 0 is the prefill that yields frame 1; call 1 starts frame 2.
    assert received < slow.finished[1]
    assert sum(len(c.samples) for c in rest) == 4 * tts._service.samples_per_frame


def test_first_chunk_arrives_early_in_a_long_utterance(speaking_tts, monkeypatch):
    held = HeldGeneration(speaking_tts._service, monkeypatch)
    stream = speaking_tts.stream("Hello there.", temperature=0, max_new_tokens=400)
    first = next(stream)  # while generation is held at its tenth step
    held.released.set()
    rest = list(stream)
    assert held.released_in_time == [True]
    assert len(first.samples) == speaking_tts._service.samples_per_frame
    assert sum(len(chunk.samples) for chunk in rest) > 300 * len(first.samples)


def test_consecutive_requests_do_not_share_state(speaking_tts, reference_clip):
    first = speaking_tts.speak(TEXT, seed=9, max_new_tokens=30).samples
    speaking_tts.speak(
        "Something else entirely.", voice=str(reference_clip), seed=1, max_new_tokens=20
    )
    again = speaking_tts.speak(TEXT, seed=9, max_new_tokens=30).samples
    np.testing.assert_array_equal(first, again)


def test_cancel_stops_generation_within_one_frame(speaking_dir, nano_backend):
    tts = mlx_speech.load(speaking_dir, backend=nano_backend)
    slow = _SlowGlobalStep(tts._service)
    stream = tts.stream("Hello there.", temperature=0, max_new_tokens=4000)
    next(stream)
    next(stream)
    stream.cancel()
    steps_at_cancel = len(slow.finished)
    wait_until_idle()
    assert len(slow.finished) <= steps_at_cancel + 1


def test_cancelled_stream_frees_the_worker_for_the_next_job(speaking_tts):
    stream = speaking_tts.stream("Hello there.", temperature=0, max_new_tokens=4000)
    next(stream)
    stream.cancel()
    wait_until_idle()
    with pytest.raises(StopIteration):
        next(stream)
    audio = speaking_tts.speak("Hello there.", temperature=0, max_new_tokens=5)
    assert len(audio.samples) == 5 * speaking_tts._service.samples_per_frame


def test_abandoned_stream_cancels_itself_when_collected(speaking_tts):
    stream = speaking_tts.stream("Hello there.", temperature=0, max_new_tokens=4000)
    next(stream)
    del stream
    gc.collect()
    wait_until_idle()


def test_unread_stream_never_starts(speaking_tts):
    stream = speaking_tts.stream("Hello there.", temperature=0, max_new_tokens=4000)
    time.sleep(0.1)
    assert shared_engine().load == (0, 0)
    del stream


def test_stalled_consumer_does_not_delay_another_job(speaking_tts):
    stalled = speaking_tts.stream("Hello there.", temperature=0, max_new_tokens=4000)
    next(stalled)  # then never read again
    result: dict = {}

    def other():
        result["audio"] = speaking_tts.speak(TEXT, temperature=0, max_new_tokens=60)

    thread = threading.Thread(target=other)
    thread.start()
    thread.join(timeout=120)
    assert not thread.is_alive(), "the second job was held up by the stalled stream"
    assert len(result["audio"].samples) > 0
    assert shared_engine().load == (1, 0)  # the stalled job keeps its state, parked
    stalled.cancel()
    wait_until_idle()


def test_requests_from_many_threads(speaking_tts):
    expected = speaking_tts.speak("Hello there.", seed=5, max_new_tokens=12).samples
    results = [None] * 4

    def speak(index):
        results[index] = speaking_tts.speak(
            "Hello there.", seed=5, max_new_tokens=12
        ).samples

    threads = [threading.Thread(target=speak, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    for samples in results:
        np.testing.assert_array_equal(samples, expected)


def test_requests_leave_the_host_random_state_alone(speaking_tts):
    mx.random.seed(123)
    expected = mx.random.uniform(shape=(4,))
    mx.random.seed(123)
    speaking_tts.speak("Hello there.", seed=7, max_new_tokens=5)
    speaking_tts.speak("Hello there.", max_new_tokens=5)
    assert mx.array_equal(mx.random.uniform(shape=(4,)), expected)


def test_a_loaded_model_has_what_its_first_request_needs(speaking_dir):
    """The text grammars load beside the model and the shared start of every
    prompt without a reference is computed while it loads: the first request
    waits for neither."""
    import mlx_speech

    tts = mlx_speech.load(speaking_dir)
    assert tts.normalizer._grammars._readers is not None
    assert tts.stats()["prompt_prefix_cache_hits"] == 0
    tts.speak("Hello there.", temperature=0, max_new_tokens=2)
    assert tts.stats()["prompt_prefix_cache_hits"] == 1
