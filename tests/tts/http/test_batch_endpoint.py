"""``POST /v1/audio/speech/batch`` as vLLM-Omni's docs send it, against a real server."""

from __future__ import annotations

import base64
import io
import json
import socket
import time

import httpx
import pytest
import soundfile

from mlx_speech.engine import shared_engine
from mlx_speech.server import ServerSettings
from tests.tts.support.decoding import decode
from tests.tts.support.idle import wait_until_idle
from tests.tts.support.server import RunningServer, assert_speaks

FRAME = 960


@pytest.fixture(scope="module")
def server(speaking_dir, nano_backend, tmp_path_factory):
    settings = ServerSettings(
        model=str(speaking_dir),
        voices_dir=tmp_path_factory.mktemp("batch-voices"),
        backend=nano_backend,
    )
    with RunningServer(settings) as running:
        yield running


def batch(server, body, timeout=120):
    return httpx.post(f"{server.url}/v1/audio/speech/batch", json=body, timeout=timeout)


def test_the_docs_example_returns_every_item_as_audio(server):
    response = batch(
        server,
        {
            "items": [
                {"input": "Hello, how are you?"},
                {"input": "Goodbye, see you later!"},
            ],
            "voice": "default",
            "language": "English",
            "max_new_tokens": 6,
        },
    )
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["id"].startswith("speech-batch-")
    assert (answer["total"], answer["succeeded"], answer["failed"]) == (2, 2, 0)
    assert [result["index"] for result in answer["results"]] == [0, 1]
    for result in answer["results"]:
        assert result["status"] == "success" and result["media_type"] == "audio/mpeg"
        samples, rate = decode(base64.b64decode(result["audio_data"]), "mp3")
        assert rate == 48000 and len(samples) >= 6 * FRAME
        assert result["usage"]["output_audio_seconds"] == 6 * FRAME / 48000


def test_items_override_the_defaults(server):
    response = batch(
        server,
        {
            "items": [
                {"input": "Hello!", "response_format": "flac"},
                {"input": "Hi!", "max_new_tokens": 2, "sample_rate": 16000},
            ],
            "response_format": "wav",
            "max_new_tokens": 4,
        },
    )
    first, second = response.json()["results"]
    assert first["media_type"] == "audio/flac" and second["media_type"] == "audio/wav"
    samples, rate = soundfile.read(io.BytesIO(base64.b64decode(first["audio_data"])))
    assert (len(samples), rate) == (4 * FRAME, 48000)
    samples, rate = soundfile.read(io.BytesIO(base64.b64decode(second["audio_data"])))
    assert (len(samples), rate) == (2 * FRAME // 3, 16000)


def test_a_bad_item_fails_alone(server):
    response = batch(
        server,
        {
            "items": [
                {"input": ""},
                {"input": "Fine."},
                {"input": "Who?", "voice": "nobody"},
                "not an object",
                {"input": "Hot.", "temperature": -1},
            ],
            "max_new_tokens": 3,
        },
    )
    assert response.status_code == 200
    answer = response.json()
    assert (answer["total"], answer["succeeded"], answer["failed"]) == (5, 1, 4)
    statuses = [result["status"] for result in answer["results"]]
    assert statuses == ["error", "success", "error", "error", "error"]
    errors = [result.get("error", "") for result in answer["results"]]
    assert "input must not be empty" in errors[0]
    assert "unknown voice 'nobody'" in errors[2]
    assert "temperature" in errors[4]
    assert "audio_data" not in answer["results"][0]


def test_an_item_gets_the_audio_it_would_get_alone(server):
    body = {
        "input": "Same words.",
        "seed": 11,
        "max_new_tokens": 8,
        "response_format": "pcm",
    }
    alone = httpx.post(
        f"{server.url}/v1/audio/speech", json={**body, "stream": False}, timeout=60
    ).content
    response = batch(
        server,
        {
            "items": [
                {"input": "Company first.", "seed": 3},
                body,
                {"input": "Company after.", "temperature": 0},
            ],
            "max_new_tokens": 8,
        },
    )
    assert base64.b64decode(response.json()["results"][1]["audio_data"]) == alone


def test_a_shared_reference_clip_clones_every_item(server, reference_clip):
    clip = base64.b64encode(reference_clip.read_bytes()).decode()
    body = {"seed": 2, "max_new_tokens": 3, "response_format": "pcm"}
    alone = httpx.post(
        f"{server.url}/v1/audio/speech",
        json={**body, "input": "One.", "ref_audio": clip, "stream": False},
        timeout=60,
    ).content
    response = batch(
        server, {"items": [{"input": "One."}, {"input": "Two."}], "ref_audio": clip, **body}
    )
    results = response.json()["results"]
    assert [result["status"] for result in results] == ["success", "success"]
    assert base64.b64decode(results[0]["audio_data"]) == alone


@pytest.mark.parametrize(
    "body, message",
    [
        ([], "the request body must be a JSON object"),
        ({"input": "no items"}, "items must be a list of 1 to 32 requests"),
        ({"items": []}, "items must be a list of 1 to 32 requests"),
        ({"items": [{"input": "x"}] * 33}, "items must be a list of 1 to 32 requests"),
    ],
)
def test_a_wrong_body_is_a_400(server, body, message):
    response = batch(server, body)
    assert response.status_code == 400
    assert response.json()["error"]["message"] == message


def test_a_client_that_leaves_frees_the_worker(server):
    body = json.dumps(
        {"items": [{"input": "Long."}] * 4, "temperature": 0, "max_new_tokens": 4000}
    )
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(
            "POST /v1/audio/speech/batch HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Content-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n{body}".encode()
        )
        wait_until_busy()
    wait_until_idle(timeout=5)  # the whole batch takes about 25 s here
    assert_speaks(server)


def wait_until_busy(timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while shared_engine().load == (0, 0):
        assert time.monotonic() < deadline, "the batch never started"
        time.sleep(0.01)
