"""End to end over HTTP against a real uvicorn server on a tiny checkpoint."""

from __future__ import annotations

import base64
import io
import json
import socket
import threading
import time

import httpx
import numpy as np
import pytest
import soundfile

import mlx_speech
from mlx_speech.engine import shared_engine
from mlx_speech.server import ServerSettings
from tests.tts.support.decoding import decode as decoded
from tests.tts.support.held import HeldGeneration
from tests.tts.support.idle import wait_until_idle
from tests.tts.support.server import RunningServer

pytestmark = pytest.mark.slow  # real servers

FRAME = 960  # samples per frame of the tiny codec at 48 kHz


@pytest.fixture(scope="module")
def server(speaking_dir, nano_backend, tmp_path_factory):
    settings = ServerSettings(
        model=str(speaking_dir),
        voices_dir=tmp_path_factory.mktemp("server-voices"),
        backend=nano_backend,
    )
    with RunningServer(settings) as running:
        yield running


def speech(server, timeout=60, **body):
    """A request; WAV unless the test names a format (the server's default is mp3)."""
    body.setdefault("input", "Hello there.")
    body.setdefault("response_format", "wav")
    return httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=timeout)


def decode(data: bytes, response_format: str, rate: int) -> np.ndarray:
    samples, found_rate = decoded(data, response_format, rate)
    assert found_rate == rate
    return samples


CONTENT_TYPES = {
    "wav": "audio/wav",
    "pcm": "audio/pcm",
    "flac": "audio/flac",
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
    "aac": "audio/aac",
}
# Lossy encoders add a delay and pad to whole frames.
SLACK = {"mp3": 4000, "aac": 3 * 1024, "opus": 0}


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "buffered"])
@pytest.mark.parametrize("response_format", list(CONTENT_TYPES))
def test_every_format_decodes_to_the_expected_duration(server, response_format, stream):
    response = speech(
        server,
        response_format=response_format,
        **({} if stream else {"stream": False}),
        temperature=0,
        max_new_tokens=25,
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == CONTENT_TYPES[response_format]
    rate = 24000 if response_format == "pcm" else 48000  # pcm: OpenAI's 24 kHz
    assert response.headers["x-audio-sample-rate"] == str(rate)
    assert response.headers["x-audio-channels"] == "1"
    assert response.headers["cache-control"] == "no-cache"
    assert ("content-length" in response.headers) == (not stream)
    if response_format == "pcm":
        assert response.headers["x-audio-bits"] == "16"
    samples = decode(response.content, response_format, rate)
    expected = 25 * FRAME * rate // 48000
    assert expected <= len(samples) <= expected + SLACK.get(response_format, 0)


def test_a_request_without_a_format_gets_mp3_as_openai_documents(server):
    response = httpx.post(
        f"{server.url}/v1/audio/speech",
        json={"input": "Hello there.", "temperature": 0, "max_new_tokens": 10},
        timeout=60,
    )
    assert response.headers["content-type"] == "audio/mpeg"
    samples = decode(response.content, "mp3", 48000)
    assert 10 * FRAME <= len(samples) <= 10 * FRAME + SLACK["mp3"]


def test_default_format_is_the_servers_choice(speaking_dir, tmp_path):
    settings = ServerSettings(
        model=str(speaking_dir), voices_dir=tmp_path, default_format="flac"
    )
    with RunningServer(settings) as flac_server:
        response = httpx.post(
            f"{flac_server.url}/v1/audio/speech",
            json={"input": "Hello there.", "max_new_tokens": 4},
            timeout=60,
        )
    assert response.headers["content-type"] == "audio/flac"
    assert len(decode(response.content, "flac", 48000)) == 4 * FRAME


def test_streamed_wav_has_unknown_sizes(server):
    data = speech(server, temperature=0, max_new_tokens=5).content
    assert data[4:8] == b"\xff\xff\xff\xff" and data[40:44] == b"\xff\xff\xff\xff"


@pytest.mark.parametrize("rate", [24000, 16000, 44100])
def test_sample_rate_resamples_the_output(server, rate):
    response = speech(server, sample_rate=rate, temperature=0, max_new_tokens=25)
    assert response.headers["x-audio-sample-rate"] == str(rate)
    samples = decode(response.content, "wav", rate)
    assert len(samples) == round(25 * FRAME * rate / 48000)


def test_sse_audio_concatenates_to_the_buffered_pcm(server):
    body = {"input": "A longer text. With two sentences.", "seed": 5, "max_new_tokens": 30}
    buffered = speech(server, response_format="pcm", stream=False, **body).content
    events = []
    with httpx.stream(
        "POST",
        f"{server.url}/v1/audio/speech",
        timeout=60,
        json={**body, "response_format": "pcm", "stream_format": "sse"},
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    assert [e["type"] for e in events[:-1]] == ["speech.audio.delta"] * (len(events) - 1)
    assert events[-1]["type"] == "speech.audio.done"
    assert events[-1]["usage"]["output_audio_seconds"] > 0
    streamed = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    a = np.frombuffer(streamed, "<i2").astype(int)
    b = np.frombuffer(buffered, "<i2").astype(int)
    assert a.shape == b.shape and np.abs(a - b).max() <= 4


def test_first_bytes_arrive_before_generation_ends(server, monkeypatch):
    held = HeldGeneration(server.app.state.slot.tts._service, monkeypatch)
    with httpx.stream(
        "POST",
        f"{server.url}/v1/audio/speech",
        timeout=60,
        json={
            "input": "Hello there.",
            "temperature": 0,
            "max_new_tokens": 1000,
            "response_format": "wav",
        },
    ) as response:
        chunks = response.iter_raw()
        next(chunks)  # while generation is held at its tenth step
        held.released.set()
        total_bytes = sum(len(c) for c in chunks)
    assert held.released_in_time == [True]
    assert total_bytes > 100 * FRAME


def test_disconnect_mid_stream_frees_the_worker(server):
    with httpx.stream(
        "POST",
        f"{server.url}/v1/audio/speech",
        timeout=60,
        json={"input": "Hello there.", "temperature": 0, "max_new_tokens": 4000},
    ) as response:
        next(response.iter_raw())
    wait_until_idle()
    started = time.perf_counter()
    response = speech(server, temperature=0, max_new_tokens=3)
    assert response.status_code == 200
    assert time.perf_counter() - started < 10


def _stalled_request(server) -> socket.socket:
    """Sends a streaming request and never reads the response."""
    request = {"input": "Hi.", "temperature": 0, "max_new_tokens": 4000}
    body = json.dumps({**request, "response_format": "wav"})
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", server.port))
    sock.sendall(
        "POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n{body}".encode()
    )
    return sock


def _parked_streams(server) -> int:
    for line in httpx.get(f"{server.url}/metrics").text.splitlines():
        if line.startswith("mlx_speech_parked_streams "):
            return int(line.split()[1])
    raise AssertionError("no mlx_speech_parked_streams gauge")


@pytest.mark.parametrize("stalled", [8, 24])
def test_readers_that_stop_hold_no_place_of_other_clients(speaking_dir, stalled):
    """More stalled clients than requests computing at once: each keeps its
    stream, parked, and a new client is served at once, long before the
    stalled ones time out."""
    settings = ServerSettings(model=str(speaking_dir), stream_idle_timeout=300)
    with RunningServer(settings, send_buffer=16384) as running:
        sockets = [_stalled_request(running) for _ in range(stalled)]
        try:
            deadline = time.monotonic() + 120
            while _parked_streams(running) < stalled:
                assert time.monotonic() < deadline, _parked_streams(running)
                time.sleep(0.1)
            response = speech(running, temperature=0, max_new_tokens=8, timeout=60)
            assert response.status_code == 200
            assert len(decode(response.content, "wav", 48000)) == 8 * FRAME
        finally:
            for sock in sockets:
                sock.close()
        wait_until_idle(timeout=60)


def test_a_reader_that_stops_does_not_delay_a_second_client(server):
    stalled = _stalled_request(server)
    try:
        time.sleep(0.2)
        response = speech(server, temperature=0, max_new_tokens=30, timeout=120)
        assert response.status_code == 200
        assert len(decode(response.content, "wav", 48000)) == 30 * FRAME
    finally:
        stalled.close()
    wait_until_idle(timeout=30)


@pytest.mark.parametrize(
    "body, status, param",
    [
        ({"input": 5}, 400, "input"),
        ({"input": ""}, 400, "input"),
        ({"input": "x" * 4097}, 400, "input"),
        ({"response_format": "ogg"}, 400, "response_format"),
        ({"sample_rate": 7999}, 400, "sample_rate"),
        ({"sample_rate": "24000"}, 400, "sample_rate"),
        ({"sample_rate": 44100, "response_format": "opus"}, 400, "sample_rate"),
        ({"speed": 0.2}, 400, "speed"),
        ({"speed": True}, 400, "speed"),
        ({"normalize": "no"}, 400, "normalize"),
        ({"normalization_options": []}, 400, "normalization_options"),
        (
            {"normalization_options": {"normalize": 0}},
            400,
            "normalization_options.normalize",
        ),
        ({"speed": 9}, 400, "speed"),
        ({"speed": "fast"}, 400, "speed"),
        ({"language": "klingon"}, 400, "language"),
        ({"stream": "yes"}, 400, "stream"),
        ({"captions": 1, "stream_format": "sse"}, 400, "captions"),
        ({"stream_format": "ws"}, 400, "stream_format"),
        ({"temperature": -1}, 400, "temperature"),
        ({"top_k": "many"}, 400, "top_k"),
        ({"max_new_tokens": 0}, 400, "max_new_tokens"),
        ({"seed": 1.5}, 400, "seed"),
        ({"voice": "nobody"}, 404, "voice"),
        ({"voice": {"id": "nobody"}}, 404, "voice"),
        ({"voice": 7}, 400, "voice"),
        ({"ref_audio": "http://example.com/a.wav"}, 400, "ref_audio"),
        ({"ref_audio": "file:///etc/passwd"}, 400, "ref_audio"),
        ({"ref_audio": "%%%not base64"}, 400, "ref_audio"),
        ({"ref_audio": base64.b64encode(b"not audio").decode()}, 400, "voice"),
        ({"model": 3}, 400, "model"),
    ],
)
def test_bad_requests_get_their_4xx_and_the_server_still_serves(
    server, body, status, param
):
    response = speech(server, **body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["param"] == param and error["message"] and error["type"]
    assert speech(server, temperature=0, max_new_tokens=2).status_code == 200


def test_non_json_and_oversize_bodies(server, speaking_dir):
    response = httpx.post(
        f"{server.url}/v1/audio/speech",
        content=b"input=hi",
        headers={"content-type": "text/plain"},
    )
    assert response.status_code == 415
    response = httpx.post(
        f"{server.url}/v1/audio/speech",
        content=b"{not json",
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 400 and response.json()["error"]["param"] == "body"
    response = httpx.post(f"{server.url}/v1/audio/speech", json=[1, 2])
    assert response.status_code == 400
    huge = {"input": "hi", "padding": "x" * (31 * 1024 * 1024)}
    response = httpx.post(f"{server.url}/v1/audio/speech", json=huge, timeout=60)
    assert response.status_code == 413
    assert httpx.get(f"{server.url}/nowhere").status_code == 404
    assert httpx.get(f"{server.url}/v1/audio/speech").status_code == 405
    assert speech(server, temperature=0, max_new_tokens=2).status_code == 200


def test_clone_from_base64_and_data_uri(server, reference_clip):
    clip = base64.b64encode(reference_clip.read_bytes()).decode()
    for voice in (
        {"ref_audio": clip},
        {"voice": {"ref_audio": f"data:audio/wav;base64,{clip}"}},
    ):
        response = speech(server, seed=1, max_new_tokens=4, **voice)
        assert response.status_code == 200, response.text
        assert len(decode(response.content, "wav", 48000)) == 4 * FRAME


def test_info_routes(server, speaking_dir):
    assert httpx.get(f"{server.url}/health").json()["status"] == "ok"
    models = httpx.get(f"{server.url}/v1/models").json()
    assert models["object"] == "list"
    assert models["data"][0]["id"] == speaking_dir.name  # not the server's path
    assert models["data"][0]["family"] == "moss_tts_nano"
    assert isinstance(models["data"][0]["created"], int)
    audio_models = httpx.get(f"{server.url}/v1/audio/models").json()  # Open WebUI's
    assert [model["id"] for model in audio_models["models"]] == [speaking_dir.name]
    assert httpx.get(f"{server.url}/health").json()["model"] == speaking_dir.name
    assert httpx.get(f"{server.url}/v1/audio/voices").json() == {
        "voices": [{"id": "default", "name": "default", "kind": "default"}],
        "uploaded_voices": [],
    }
    metrics = httpx.get(f"{server.url}/metrics").text
    for name in (
        'mlx_speech_requests_total{status="200"}',
        "mlx_speech_queue_depth",
        "mlx_speech_active_streams",
        "mlx_speech_time_to_first_audio_seconds_bucket",
        "mlx_speech_real_time_factor_count",
    ):
        assert name in metrics


def test_api_key(speaking_dir):
    with RunningServer(
        ServerSettings(model=str(speaking_dir), api_key="s3cret")
    ) as running:
        url = f"{running.url}/v1/models"
        assert httpx.get(f"{running.url}/health").status_code == 200
        denied = httpx.get(url)
        assert (
            denied.status_code == 401
            and denied.json()["error"]["type"] == "authentication_error"
        )
        assert httpx.get(url, headers={"authorization": "Bearer wrong"}).status_code == 401
        assert httpx.get(url, headers={"authorization": "Bearer s3cret"}).status_code == 200
        assert httpx.get(url, headers={"x-api-key": "s3cret"}).status_code == 200


def test_requests_beyond_the_queue_get_429(speaking_dir):
    settings = ServerSettings(model=str(speaking_dir), max_queue=0, max_parked=0)
    with RunningServer(settings) as running:
        holders = []
        try:
            for _ in range(shared_engine().max_active):
                holders.append(_stalled_request(running))
            time.sleep(0.3)
            response = speech(running, max_new_tokens=2)
            assert response.status_code == 429
            assert response.headers["retry-after"].isdigit()
            assert response.json()["error"]["type"] == "rate_limit_error"
        finally:
            for holder in holders:
                holder.close()
        wait_until_idle(timeout=30)
        assert speech(running, max_new_tokens=2).status_code == 200


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "buffered"])
@pytest.mark.parametrize("response_format", list(CONTENT_TYPES))
def test_openai_sdk_gets_every_format(server, tmp_path, response_format, stream):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="local")
    target = tmp_path / f"hello.{response_format}"
    extra = {
        "max_new_tokens": 10,
        "temperature": 0,
        **({} if stream else {"stream": False}),
    }
    with client.audio.speech.with_streaming_response.create(
        model="tts-1",
        voice="default",
        input="Hello!",
        response_format=response_format,
        extra_body=extra,
    ) as response:
        response.stream_to_file(target)
    rate = 24000 if response_format == "pcm" else 48000
    samples = decode(target.read_bytes(), response_format, rate)
    expected = 10 * FRAME * rate // 48000
    assert expected <= len(samples) <= expected + SLACK.get(response_format, 0)


def test_concurrent_clients_get_identical_seeded_audio(server):
    results = [None] * 3

    def fetch(index):
        results[index] = speech(
            server, seed=21, max_new_tokens=15, response_format="pcm"
        ).content

    threads = [threading.Thread(target=fetch, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert results[0] and results[0] == results[1] == results[2]


def test_health_and_speech_answer_503_while_loading(speaking_dir):
    release = threading.Event()

    def slow_load(model, **options):
        release.wait(30)
        return mlx_speech.load(model, **options)

    settings = ServerSettings(model=str(speaking_dir))
    with RunningServer(settings, load=slow_load, wait_until_healthy=False) as running:
        try:
            assert httpx.get(f"{running.url}/health").json() == {
                "status": "loading",
                "listeners": {"http": "serving"},
            }
            busy = speech(running)
            assert (
                busy.status_code == 503
                and "still loading" in busy.json()["error"]["message"]
            )
        finally:
            release.set()
        running.wait_until_healthy(time.monotonic() + 30)
        assert speech(running, max_new_tokens=2).status_code == 200


def test_openai_voice_names_speak_and_aliases_pick_a_saved_voice(speaking_dir, tmp_path):
    settings = ServerSettings(
        model=str(speaking_dir),
        voices_dir=tmp_path / "voices",
        voice_aliases=(("alloy", "narrator"),),
    )
    with RunningServer(settings) as running:
        clip = io.BytesIO()
        soundfile.write(clip, 0.3 * np.sin(np.arange(24000) / 9), 24000, format="WAV")
        created = httpx.post(
            f"{running.url}/v1/audio/voices",
            data={"name": "narrator"},
            files={"audio_sample": ("n.wav", clip.getvalue(), "audio/wav")},
        )
        assert created.status_code == 201
        body = {"seed": 3, "max_new_tokens": 3, "response_format": "pcm"}
        aliased = speech(running, voice="alloy", **body)
        named = speech(running, voice="narrator", **body)
        plain = speech(running, voice="shimmer", **body)
        default = speech(running, **body)
        assert aliased.status_code == named.status_code == plain.status_code == 200
        assert aliased.content == named.content and plain.content == default.content


def test_instructions_the_model_cannot_use_are_ignored_and_said_so(server):
    body = {"seed": 4, "max_new_tokens": 3, "response_format": "pcm"}
    styled = speech(server, instructions="Speak like a pirate.", **body)
    plain = speech(server, **body)
    assert styled.status_code == 200 and styled.content == plain.content
    assert styled.headers["x-mlx-speech-ignored"] == "instructions"
    assert "x-mlx-speech-ignored" not in plain.headers


def test_a_clip_wins_over_a_voice_name(server, reference_clip):
    body = {"seed": 4, "max_new_tokens": 3, "response_format": "pcm"}
    clip = base64.b64encode(reference_clip.read_bytes()).decode()
    named = speech(server, voice="alloy", ref_audio=clip, **body)
    alone = speech(server, ref_audio=clip, **body)
    assert named.status_code == 200 and named.content == alone.content
    assert named.content != speech(server, **body).content  # the clip was used


@pytest.mark.parametrize(
    "fields, shape",
    [
        ({}, "streamed file"),  # OpenAI's clients send neither field
        ({"stream": True}, "events"),  # vLLM-Omni's SSE
        ({"stream": False}, "buffered file"),
        ({"stream_format": "audio"}, "streamed file"),
        ({"stream": False, "stream_format": "audio"}, "streamed file"),
        ({"stream_format": "sse"}, "events"),
        ({"stream": False, "stream_format": "sse"}, "events"),
    ],
)
def test_stream_fields_mean_what_openai_and_vllm_omni_clients_expect(server, fields, shape):
    response = speech(server, response_format="pcm", max_new_tokens=3, **fields)
    assert response.status_code == 200, response.text
    content_type = response.headers["content-type"]
    if shape == "events":
        assert content_type.startswith("text/event-stream")
        return
    assert content_type == "audio/pcm"
    assert ("content-length" in response.headers) == (shape == "buffered file")
    assert len(response.content) == 3 * (FRAME // 2) * 2


def test_streamed_aac_arrives_while_it_is_generated(server):
    with httpx.stream(
        "POST",
        f"{server.url}/v1/audio/speech",
        timeout=60,
        json={"input": "Hi.", "response_format": "aac", "max_new_tokens": 300},
    ) as response:
        pieces = list(response.iter_raw())
    assert response.headers["content-type"] == "audio/aac"
    assert len(pieces) > 3 and pieces[0][:2] == b"\xff\xf1"
    samples, rate = decoded(b"".join(pieces), "aac")
    assert rate == 48000 and 300 * FRAME <= len(samples) <= 300 * FRAME + SLACK["aac"]
