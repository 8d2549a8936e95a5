"""A model that stops before its first audio: every surface answers a file
the format's decoders read as empty (docs/speech/http.md, "Empty audio")."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import io
import json

import av
import httpx
import numpy as np
import pytest
import soundfile
from websockets.sync.client import connect
from wyoming_bench.tts.client import measure_once

import mlx_speech
from mlx_speech.audio.aac import RATES as AAC_RATES
from mlx_speech.audio.containers import StreamEncoder
from mlx_speech.audio.formats import MP3_RATES, RESPONSE_FORMATS, encode_whole
from mlx_speech.server import ServerSettings
from tests.tts.support.server import RunningServer

# The stopping checkpoint stops at its first frame on this seed and text.
STOPS_AT_ONCE = {"input": "hello there", "seed": 5, "max_new_tokens": 40}
SURFACES = ("streamed", "buffered", "sse", "batch", "websocket")
HEADERLESS = ("pcm",)


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


def _ffmpeg_decoded(data: bytes) -> np.ndarray:
    """The samples FFmpeg decodes from ``data``, unnamed: found by probing."""
    with av.open(io.BytesIO(data)) as container:
        frames = [frame.to_ndarray().reshape(-1) for frame in container.decode(audio=0)]
    return np.concatenate(frames) if frames else np.zeros(0)


def _ffmpeg_samples(data: bytes) -> int:
    with av.open(io.BytesIO(data)) as container:
        return sum(frame.samples for frame in container.decode(audio=0))


@pytest.mark.parametrize("surface", SURFACES)
def test_the_model_stops_before_any_audio(server, surface):
    samples, rate = soundfile.read(io.BytesIO(_answer(server, surface, "wav")))
    assert len(samples) == 0 and rate == 48000


# What FFmpeg reads of each format's empty answer, at 48 kHz: MP3 and AAC
# cannot hold zero samples, so theirs is the least silence it recognizes.
SILENCE_READ = {"opus": 0, "flac": 0, "mp3": 2 * 1152, "aac": 1024}


@pytest.mark.parametrize("response_format", [f for f in RESPONSE_FORMATS if f != "wav"])
@pytest.mark.parametrize("surface", SURFACES)
def test_an_empty_answer_is_a_file_its_decoders_read(server, surface, response_format):
    data = _answer(server, surface, response_format)
    if response_format in HEADERLESS:
        assert data == b""
        return
    samples = _ffmpeg_decoded(data)
    assert len(samples) == SILENCE_READ[response_format] and not samples.any()
    if response_format in ("mp3", "aac"):
        return
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


@pytest.mark.parametrize("channels", [1, 2])
@pytest.mark.parametrize("response_format", ["mp3", "aac"])
def test_empty_mp3_and_aac_are_the_least_silence_at_every_rate(response_format, channels):
    rates = MP3_RATES if response_format == "mp3" else AAC_RATES
    for rate in rates:
        nothing = np.zeros((0, channels), np.float32)
        whole = encode_whole(nothing, rate, response_format)
        streamed = StreamEncoder(response_format, rate, channels)
        assert streamed.start() + streamed.encode(nothing) + streamed.finish() == whole
        with av.open(io.BytesIO(whole)) as container:
            stream = container.streams.audio[0]
            assert (stream.channels, stream.rate) == (channels, rate)
            frames = [frame for frame in container.decode(audio=0)]
        per_frame = 1152 if rate >= 32000 else 576
        expected = 2 * per_frame if response_format == "mp3" else 1024
        assert sum(frame.samples for frame in frames) == expected, rate
        assert not any(frame.to_ndarray().any() for frame in frames)
        if response_format == "mp3":  # libsndfile reads MP3 too
            samples, found = soundfile.read(io.BytesIO(whole), always_2d=True)
            assert samples.shape == (expected, channels) and found == rate


def _seeded(model, **options):
    """The stopping model, every request given the seed on which it stops at
    once: Wyoming's events carry no sampling fields."""
    tts = mlx_speech.load(model, **options)
    opened, opened_text = tts.open, tts.open_text
    sampling = {key: STOPS_AT_ONCE[key] for key in ("seed", "max_new_tokens")}
    tts.open = lambda request: opened(dataclasses.replace(request, sampling=sampling))
    tts.open_text = lambda deltas, request, split="sentence": opened_text(
        deltas, dataclasses.replace(request, sampling=sampling), split
    )
    return tts


@pytest.mark.parametrize("mode", ["non-streaming", "streaming"])
def test_wyoming_bench_takes_an_empty_answer(stopping_dir, nano_backend, tmp_path, mode):
    """Wyoming's empty answer: its audio cycle holds one chunk of no
    samples, which wyoming-bench counts as audio (none is a failure)."""
    settings = ServerSettings(
        model=str(stopping_dir), voices_dir=tmp_path, wyoming_port=0, backend=nano_backend
    )
    with RunningServer(settings, load=_seeded) as running:
        port = running.app.state.wyoming_port
        measured = asyncio.run(
            measure_once(
                "127.0.0.1", port, mode, STOPS_AT_ONCE["input"], None, None, 10, 60
            )
        )
    assert measured.ok, measured.error
    assert (measured.n_chunks, measured.audio_bytes) == (1, 0)
