"""The ASGI audio adapter against ASGI peers that misbehave."""

from __future__ import annotations

import json
import time

import anyio
import numpy as np
import pytest

from mlx_speech.audio.samples import Audio
from mlx_speech.engine import Engine
from mlx_speech.http.speech.delivery import DeliveryMode
from mlx_speech.http.speech.response import AudioResponse, Delivery
from mlx_speech.serving.metrics import Metrics
from mlx_speech.serving.shutdown import STOPPING, Shutdown
from tests.tts.support.idle import wait_until_idle


def _endless_job(progress: list[int]):
    def start():
        index = 0
        while True:
            progress.append(index)
            index += 1
            yield Audio(np.zeros(960, dtype=np.float32), 48000)

    return start


def _delivery(
    idle_timeout: float, closed: list[bool], mode: DeliveryMode = DeliveryMode.AUDIO
) -> Delivery:
    return Delivery(
        response_format="pcm",
        native_rate=48000,
        output_rate=48000,
        mode=mode,
        idle_timeout=idle_timeout,
        metrics=Metrics(),
        accepted_at=time.perf_counter(),
        on_close=lambda: closed.append(True),
        shutdown=Shutdown(),
    )


async def _never_disconnects():
    await anyio.sleep_forever()


def _run(response: AudioResponse, send, receive=_never_disconnects) -> None:
    async def main():
        with anyio.fail_after(10):
            await response({"type": "http"}, receive, send)

    anyio.run(main)


def _recorded(response: AudioResponse) -> list[dict]:
    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    _run(response, send)
    return sent


def test_a_client_that_stops_reading_is_cancelled_after_the_idle_timeout():
    engine = Engine()
    progress: list[int] = []
    closed: list[bool] = []
    response = AudioResponse(engine.stream(_endless_job(progress)), _delivery(0.3, closed))
    sent: list[dict] = []

    async def send(message):
        sent.append(message)
        if len(sent) > 3:
            await anyio.sleep_forever()  # the client's window never opens again

    started = time.perf_counter()
    _run(response, send)
    assert 0.3 <= time.perf_counter() - started < 5
    assert closed == [True]
    wait_until_idle(engine, timeout=5)
    frames = len(progress)
    time.sleep(0.2)
    assert len(progress) == frames


def test_disconnect_before_the_first_chunk_cancels_the_job():
    engine = Engine()
    closed: list[bool] = []

    def start():
        while True:
            yield None  # working on the first chunk

    async def disconnects():
        await anyio.sleep(0.2)
        return {"type": "http.disconnect"}

    async def send(message):
        raise AssertionError("nothing should be sent")

    _run(AudioResponse(engine.stream(start), _delivery(30, closed)), send, disconnects)
    assert closed == [True]
    wait_until_idle(engine, timeout=5)


def test_a_failing_send_cancels_the_job():
    engine = Engine()
    closed: list[bool] = []
    response = AudioResponse(engine.stream(_endless_job([])), _delivery(30, closed))

    async def send(message):
        if message["type"] == "http.response.body":
            raise OSError("connection reset")

    with pytest.raises(Exception, match="connection reset|unhandled errors"):
        _run(response, send)
    assert closed == [True]
    wait_until_idle(engine, timeout=5)


def test_a_failure_mid_stream_becomes_an_sse_error_event():
    engine = Engine()

    def start():
        yield Audio(np.zeros(960, dtype=np.float32), 48000)
        raise RuntimeError("codec exploded")

    sent = _recorded(
        AudioResponse(engine.stream(start), _delivery(30, [], mode=DeliveryMode.SSE))
    )
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    events = [
        json.loads(line[6:])
        for line in body.decode().splitlines()
        if line.startswith("data: ")
    ]
    assert [e["type"] for e in events] == ["speech.audio.delta", "speech.audio.error"]
    assert events[1]["error"]["message"] == "codec exploded"
    assert sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}


def test_a_failure_before_any_audio_is_a_json_500():
    engine = Engine()

    def start():
        raise RuntimeError("the codec produced non-finite audio")
        yield

    sent = _recorded(AudioResponse(engine.stream(start), _delivery(30, [])))
    assert sent[0]["status"] == 500
    assert b'"type":"server_error"' in sent[1]["body"]


@pytest.mark.parametrize("mode", [DeliveryMode.AUDIO, DeliveryMode.SSE])
def test_a_stream_running_at_the_shutdown_deadline_ends_cleanly(mode):
    engine = Engine()
    closed: list[bool] = []
    delivery = _delivery(idle_timeout=30, closed=closed, mode=mode)
    response = AudioResponse(engine.stream(_endless_job([])), delivery)
    sent: list[dict] = []

    async def send(message):
        sent.append(message)
        if len(sent) == 5:
            delivery.shutdown.begin(0.0)  # the server stops, with no grace left

    _run(response, send)
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200
    assert sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}
    if mode == "sse":
        last_event = json.loads(sent[-2]["body"].decode().removeprefix("data: "))
        assert last_event["type"] == "speech.audio.error"
        assert "shutting down" in last_event["error"]["message"]
    assert closed == [True]
    wait_until_idle(engine)


def test_a_request_not_started_at_the_shutdown_deadline_gets_a_503():
    engine = Engine()
    closed: list[bool] = []
    delivery = _delivery(idle_timeout=30, closed=closed, mode="buffered")
    delivery.shutdown.begin(0.0)
    sent = _recorded(AudioResponse(engine.stream(_endless_job([])), delivery))
    assert sent[0]["status"] == 503
    assert json.loads(sent[1]["body"])["error"]["message"] == "the server is shutting down"
    wait_until_idle(engine)


def test_a_captioned_stream_that_fails_or_is_stopped_ends_with_an_error_line():
    engine = Engine()

    def start():
        yield Audio(np.zeros(960, dtype=np.float32), 48000)
        raise RuntimeError("codec exploded")

    delivery = _delivery(30, [], mode=DeliveryMode.CAPTIONED)
    sent = _recorded(AudioResponse(engine.stream(start), delivery))
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    lines = [json.loads(line) for line in body.decode().splitlines()]
    assert lines[-1] == {"error": {"message": "codec exploded", "type": "server_error"}}

    delivery = _delivery(idle_timeout=30, closed=[], mode=DeliveryMode.CAPTIONED)
    response = AudioResponse(engine.stream(_endless_job([])), delivery)
    sent: list[dict] = []

    async def send(message):
        sent.append(message)
        delivery.shutdown.begin(0.0)  # once it began, the server stops: no grace left

    _run(response, send)
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    assert json.loads(body.decode().splitlines()[-1])["error"]["message"] == STOPPING
    wait_until_idle(engine)
