"""A model loaded on one thread, used from others, on both backends.

Since MLX 0.31.2 streams belong to the thread that made them: an array
built on one thread and evaluated on another fails ("There is no Stream(cpu,
0) in current thread"), which broke mlx-lm's and mlx-vlm's servers. Here
every MLX call runs on the engine's one worker, so whichever thread loads
the model and whichever asks for speech, the audio is the same: from an
asyncio loop's thread, a thread pool, a text stream fed by another thread,
the server's HTTP and Wyoming listeners, and beside an mlx-lm chat model
generating on its own thread.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import mlx.core as mx
import numpy as np
import pytest
from wyoming.tts import Synthesize

import mlx_speech
from mlx_speech.audio.pcm import to_pcm16
from mlx_speech.server import ServerSettings
from mlx_speech.testing.lm_checkpoint import build_lm_checkpoint
from tests.tts.support.server import RunningServer
from tests.tts.support.silence import wyoming_pcm

TEXT = "Threads share one worker."
SHORT = {"max_new_tokens": 4, "seed": 11}


def _on_a_thread(work):
    """``work()``'s result, computed on a thread of its own."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(work).result(timeout=120)


def test_mlx_refuses_an_array_from_another_thread():
    """What the engine's one worker guards against, on this MLX."""
    lazy = _on_a_thread(lambda: mx.arange(4) * 2)
    with pytest.raises(RuntimeError, match="no Stream"):
        mx.eval(lazy)


@pytest.fixture(scope="module")
def loaded_elsewhere(speaking_dir, nano_backend) -> mlx_speech.TTS:
    """A model loaded on a thread that has ended before it is used."""
    return _on_a_thread(lambda: mlx_speech.load(speaking_dir, backend=nano_backend))


@pytest.fixture(scope="module")
def expected(loaded_elsewhere) -> np.ndarray:
    return loaded_elsewhere.speak(TEXT, **SHORT).samples


def test_the_audio_tells_its_seed(loaded_elsewhere, expected):
    other = loaded_elsewhere.speak(TEXT, max_new_tokens=4, seed=12).samples
    assert not np.array_equal(other, expected)  # so the equalities below hear


def test_an_asyncio_loop_thread_speaks(loaded_elsewhere, expected):
    async def speak_in_the_loop():
        audio = loaded_elsewhere.speak(TEXT, **SHORT)  # on the loop's own thread
        chunks = [
            c.samples async for c in loaded_elsewhere.astream_text(_deltas(), **SHORT)
        ]
        return audio.samples, np.concatenate(chunks)

    async def _deltas():
        for word in TEXT.split(" "):
            yield word + " "

    whole, streamed = _on_a_thread(lambda: asyncio.run(speak_in_the_loop()))
    np.testing.assert_array_equal(whole, expected)
    np.testing.assert_array_equal(streamed, expected)


def test_a_thread_pool_speaks_at_once(loaded_elsewhere, expected):
    with ThreadPoolExecutor(4) as pool:
        calls = [pool.submit(loaded_elsewhere.speak, TEXT, **SHORT) for _ in range(4)]
        for call in calls:
            np.testing.assert_array_equal(call.result(timeout=120).samples, expected)


def test_a_text_stream_fed_by_another_thread(loaded_elsewhere, expected):
    deltas: queue.Queue[str | None] = queue.Queue()

    def write():
        for word in TEXT.split(" "):
            deltas.put(word + " ")
        deltas.put(None)

    writer = threading.Thread(target=write)
    writer.start()
    stream = loaded_elsewhere.stream_text(iter(deltas.get, None), **SHORT)
    audio = _on_a_thread(lambda: np.concatenate([c.samples for c in stream]))
    writer.join()
    np.testing.assert_array_equal(audio, expected)


def test_the_servers_listeners_speak(speaking_dir, nano_backend, loaded_elsewhere):
    """The server loads on its slot's thread; HTTP and Wyoming answer on the
    event loop's; the worker computes."""
    settings = ServerSettings(model=str(speaking_dir), backend=nano_backend, wyoming_port=0)
    with RunningServer(settings) as server:
        body = {"input": TEXT, "response_format": "pcm", "sample_rate": 48000, **SHORT}
        http = httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=60)
        assert http.status_code == 200
        port = server.app.state.wyoming_port
        heard = wyoming_pcm(port, Synthesize(text=TEXT).event())
    alone = loaded_elsewhere.speak(TEXT, **SHORT).samples
    assert http.content == to_pcm16(alone).tobytes()
    assert len(heard) > 0


def test_a_chat_model_generates_beside_speech(loaded_elsewhere, expected, tmp_path):
    from mlx_lm import generate, load

    model, tokenizer = load(str(build_lm_checkpoint(tmp_path / "chat")))
    said: dict[str, object] = {}

    def speak_meanwhile():
        said["audio"] = [loaded_elsewhere.speak(TEXT, **SHORT).samples for _ in range(3)]

    speaker = threading.Thread(target=speak_meanwhile)
    speaker.start()
    written = generate(model, tokenizer, "Once upon a time", max_tokens=24)
    speaker.join(timeout=120)
    assert isinstance(written, str)
    for audio in said["audio"]:
        np.testing.assert_array_equal(audio, expected)
