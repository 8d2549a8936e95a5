"""A model that stops before its first audio: every surface answers a file
the format's decoders read as empty (docs/speech.md, "Empty audio")."""

from __future__ import annotations

import base64
import io
import json

import av
import httpx
import numpy as np
import pytest
import soundfile
from websockets.sync.client import connect

from mlx_speech.audio.containers import StreamEncoder
from mlx_speech.audio.formats import RESPONSE_FORMATS, encode_whole
from mlx_speech.server import ServerSettings
from tests.tts.support.server import RunningServer

# The stopping checkpoint stops at its first frame on this seed and text.
STOPS_AT_ONCE = {"input": "hello there", "seed": 5, "max_new_tokens": 40}
SURFACES = ("streamed", "buffered", "sse", "batch", "websocket")
HEADERLESS = ("pcm", "mp3", "aac")


@pytest.fixture(scope="module")
def server(stopping_dir, nano_backend, tmp_path_factory):
    settings = ServerSettings(
        model=str(stopping_dir),
        voices_dir=tmp_path_factory.mktemp("empty-voices"),
        backend=nano_backend,
    )
    with RunningServer(settings) as running:
        yield running


def _speech(server, **fields) -> httpx.Response:
    response = httpx.post(
        f"{server.url}/v1/audio/speech", json={**STOPS_AT_ONCE, **fields}, timeout=60
    )
    assert response.status_code == 200, response.text
    return response


def _sse_audio(server, response_format: str) -> bytes:
    events = [
        json.loads(line[len("data: ") :])
        for line in _speech(server, response_format=response_format, stream_format="sse")
        .text.strip()
        .split("\n\n")
    ]
    assert events[-1]["type"] == "speech.audio.done", events[-1]
    return b"".join(
        base64.b64decode(event["audio"])
        for event in events
        if event["type"] == "speech.audio.delta"
    )


def _batch_audio(server, response_format: str) -> bytes:
    body = {"items": [STOPS_AT_ONCE], "response_format": response_format}
    response = httpx.post(f"{server.url}/v1/audio/speech/batch", json=body, timeout=60)
    [result] = response.json()["results"]
    assert result["status"] == "success", result
    return base64.b64decode(result["audio_data"])


def _socket_audio(server, response_format: str) -> bytes:
    url = server.url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    config = {k: v for k, v in STOPS_AT_ONCE.items() if k != "input"}
    with connect(url) as ws:
        ws.send(
            json.dumps(
                {"type": "session.config", "response_format": response_format, **config}
            )
        )
        ws.send(json.dumps({"type": "input.text", "text": STOPS_AT_ONCE["input"]}))
        ws.send(json.dumps({"type": "input.done"}))
        audio, done = b"", None
        while done is None:
            frame = ws.recv(timeout=60)
            if isinstance(frame, bytes):
                audio += frame
            elif (message := json.loads(frame))["type"] == "audio.done":
                done = message
    assert done["error"] is False and done["total_bytes"] == len(audio), done
    return audio


def _answer(server, surface: str, response_format: str) -> bytes:
    if surface == "sse":
        return _sse_audio(server, response_format)
    if surface == "batch":
        return _batch_audio(server, response_format)
    if surface == "websocket":
        return _socket_audio(server, response_format)
    shape = {"stream_format": "audio"} if surface == "streamed" else {"stream": False}
    return _speech(server, response_format=response_format, **shape).content


def _ffmpeg_samples(data: bytes) -> int:
    with av.open(io.BytesIO(data)) as container:
        return sum(frame.samples for frame in container.decode(audio=0))


@pytest.mark.parametrize("surface", SURFACES)
def test_the_model_stops_before_any_audio(server, surface):
    samples, rate = soundfile.read(io.BytesIO(_answer(server, surface, "wav")))
    assert len(samples) == 0 and rate == 48000


@pytest.mark.parametrize("response_format", [f for f in RESPONSE_FORMATS if f != "wav"])
@pytest.mark.parametrize("surface", SURFACES)
def test_an_empty_answer_is_a_file_its_decoders_read(server, surface, response_format):
    data = _answer(server, surface, response_format)
    if response_format in HEADERLESS:
        assert data == b""
        return
    assert _ffmpeg_samples(data) == 0
    if response_format == "opus":
        samples, rate = soundfile.read(io.BytesIO(data))
        assert len(samples) == 0 and rate == 48000
    else:  # libsndfile reads a count of 0 as "unknown" and cannot read on
        assert data[:4] == b"fLaC" and soundfile.info(io.BytesIO(data)).samplerate == 48000


@pytest.mark.parametrize("channels", [1, 2])
@pytest.mark.parametrize("rate", [24000, 48000])
def test_empty_files_keep_their_rate_and_channels(channels, rate):
    nothing = np.zeros((0, channels), np.float32)
    with av.open(io.BytesIO(encode_whole(nothing, rate, "flac"))) as container:
        stream = container.streams.audio[0]
        assert (stream.channels, stream.rate) == (channels, rate)
    streamed = StreamEncoder("opus", rate, channels)
    for opus in (encode_whole(nothing, rate, "opus"), streamed.start() + streamed.finish()):
        samples, found = soundfile.read(io.BytesIO(opus), always_2d=True)
        assert samples.shape == (0, channels) and found == rate
        assert _ffmpeg_samples(opus) == 0
