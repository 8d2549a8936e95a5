"""Web pages the user visits cannot drive the local server: neither by a
cross-origin request (a voice upload needs no preflight) nor through DNS
rebinding (a ``Host`` that names the attacker's domain)."""

from __future__ import annotations

import io
import logging

import httpx
import numpy as np
import pytest
import soundfile

from mlx_speech.http.local_only import host_name
from mlx_speech.server import ServerSettings
from tests.tts.support.server import RunningServer, assert_speaks


def _clip() -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, np.zeros(16000, dtype=np.float32), 16000, format="WAV")
    return buffer.getvalue()


def _upload(server, name: str, **headers) -> httpx.Response:
    return httpx.post(
        f"{server.url}/v1/audio/voices",
        data={"name": name},
        files={"audio_sample": ("a.wav", _clip(), "audio/wav")},
        headers=headers,
    )


@pytest.fixture(scope="module")
def server(speaking_dir, tmp_path_factory):
    settings = ServerSettings(
        model=str(speaking_dir),
        voices_dir=tmp_path_factory.mktemp("local-voices"),
        allowed_hosts=("speech.lan",),
        cors_origins=("http://localhost:3000",),
    )
    with RunningServer(settings) as running:
        yield running


@pytest.mark.parametrize(
    ("host", "name"),
    [
        ("127.0.0.1:8000", "127.0.0.1"),
        ("LOCALHOST:8000", "localhost"),
        ("[::1]:8000", "::1"),
        ("speech.lan", "speech.lan"),
        ("evil.example:80", "evil.example"),
    ],
)
def test_host_names_lose_port_brackets_and_case(host, name):
    assert host_name(host) == name


@pytest.mark.parametrize(
    "host", ["evil.example", "evil.example:8000", "127.0.0.1.evil.example"]
)
def test_a_rebound_host_name_is_refused(server, host):
    response = httpx.get(f"{server.url}/v1/models", headers={"host": host})
    assert response.status_code == 400
    assert "--allowed-host" in response.json()["error"]["message"]


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "[::1]:9", "speech.lan:8000"])
def test_this_servers_own_names_are_served(server, host):
    assert httpx.get(f"{server.url}/v1/models", headers={"host": host}).status_code == 200


def test_a_cross_origin_upload_is_refused_and_saves_nothing(server):
    response = _upload(server, "intruder", origin="http://evil.example")
    assert response.status_code == 403
    assert response.json()["error"]["type"] == "permission_error"
    voices = httpx.get(f"{server.url}/v1/audio/voices").json()["voices"]
    assert "intruder" not in [voice["name"] for voice in voices]
    refused = httpx.delete(
        f"{server.url}/v1/audio/voices/anything", headers={"origin": "null"}
    )
    assert refused.status_code == 403


def test_same_origin_and_allowed_origins_may_change_things(server):
    own = f"http://127.0.0.1:{server.port}"
    assert _upload(server, "mine", origin=own).status_code == 201
    allowed = _upload(server, "theirs", origin="http://localhost:3000")
    assert allowed.status_code == 201
    assert allowed.headers["access-control-allow-origin"] == "http://localhost:3000"
    for name in ("mine", "theirs"):
        assert httpx.delete(f"{server.url}/v1/audio/voices/{name}").status_code == 200


def test_cors_headers_go_only_to_allowed_origins(server):
    preflight = {
        "origin": "http://localhost:3000",
        "access-control-request-method": "POST",
        "access-control-request-headers": "content-type",
    }
    answer = httpx.options(f"{server.url}/v1/audio/speech", headers=preflight)
    assert answer.status_code == 200
    assert answer.headers["access-control-allow-origin"] == "http://localhost:3000"
    foreign = httpx.get(
        f"{server.url}/v1/models", headers={"origin": "http://evil.example"}
    )
    assert foreign.status_code == 200  # reading is harmless: the browser withholds it
    assert "access-control-allow-origin" not in foreign.headers


def test_clients_that_are_not_browsers_are_unaffected(server):
    assert_speaks(server)


def test_a_refused_host_is_said_in_the_servers_log_once(server, caplog):
    caplog.set_level(logging.WARNING, logger="mlx_speech.server")
    for _ in range(3):
        answer = httpx.get(
            f"{server.url}/v1/models", headers={"host": "host.docker.internal:8000"}
        )
        assert answer.status_code == 400
    said = [
        r.getMessage() for r in caplog.records if "host.docker.internal" in r.getMessage()
    ]
    assert len(said) == 1
    assert "--allowed-host host.docker.internal" in said[0] and "--host 0.0.0.0" in said[0]
