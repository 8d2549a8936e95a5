"""Connection limits: a client that never finishes its headers is dropped,
and connections past the cap are closed unread, so neither slow nor idle
sockets can fill the server."""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest
from websockets.sync.client import connect

from mlx_speech.server import ServerSettings
from tests.tts.support.server import RunningServer, assert_speaks


@pytest.fixture(scope="module")
def server(speaking_dir, tmp_path_factory):
    settings = ServerSettings(
        model=str(speaking_dir),
        voices_dir=tmp_path_factory.mktemp("connection-voices"),
        header_timeout=0.5,
        max_connections=4,
    )
    with RunningServer(settings) as running:
        yield running


def _closed_by_server(sock: socket.socket, within: float) -> bool:
    sock.settimeout(within)
    try:
        return sock.recv(1024) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def _open(server, first_bytes: bytes = b"") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port))
    if first_bytes:
        sock.sendall(first_bytes)
    return sock


def test_a_client_that_never_finishes_its_headers_is_dropped(server):
    slow = [_open(server, b"POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1\r\n")]
    silent = [_open(server)]
    try:
        for sock in slow + silent:
            assert _closed_by_server(sock, within=5)
    finally:
        for sock in slow + silent:
            sock.close()


def test_connections_past_the_cap_are_closed_unread(server):
    idle = [_open(server) for _ in range(4)]
    try:
        extra = _open(server, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert _closed_by_server(extra, within=5)
        extra.close()
    finally:
        for sock in idle:
            sock.close()
    deadline = time.monotonic() + 10
    while True:  # the closed ones are released, and the server serves again
        try:
            if httpx.get(f"{server.url}/health", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_a_client_that_keeps_sending_its_request_is_served(server):
    assert_speaks(server)


def test_a_websocket_session_outlives_the_header_timeout(server):
    """The upgrade request's headers are complete: the session is not
    dropped when the header timer would have fired (it was, with no close
    frame, after --header-timeout from the connection)."""
    url = f"ws://127.0.0.1:{server.port}/v1/audio/speech/stream"
    with connect(url) as ws:
        ws.send(json.dumps({"type": "session.config", "max_new_tokens": 2}))
        time.sleep(1.5)  # three header timeouts
        ws.send(json.dumps({"type": "input.text", "text": "Hi."}))
        ws.send(json.dumps({"type": "input.done"}))
        kinds = []
        while not kinds or kinds[-1] != "session.done":
            message = ws.recv(timeout=60)
            if isinstance(message, str):
                kinds.append(json.loads(message)["type"])
        assert kinds == ["audio.start", "audio.done", "session.done"]
