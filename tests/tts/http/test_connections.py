"""Connection limits: a client that never finishes its headers is dropped,
one that never finishes its body gets 408 and is dropped, and connections
past the cap are closed unread, so neither slow nor idle sockets can fill
the server."""

from __future__ import annotations

import json
import signal
import socket
import time

import httpx
import pytest
from websockets.sync.client import connect

from mlx_speech.server import ServerSettings
from tests.tts.support.cli import start_serving
from tests.tts.support.server import RunningServer, assert_speaks

pytestmark = pytest.mark.slow  # real servers


@pytest.fixture(scope="module")
def server(speaking_dir, tmp_path_factory):
    settings = ServerSettings(
        model=str(speaking_dir),
        voices_dir=tmp_path_factory.mktemp("connection-voices"),
        header_timeout=0.5,
        body_timeout=1.0,
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
    # the closed ones are released, and the server serves again
    server.wait_until_healthy(time.monotonic() + 10)


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


_BOUNDARY = "stall"
# (route, content type, the start of a body that would be 100 bytes)
_STALLED_BODIES = {
    "speech": ("/v1/audio/speech", "application/json", b'{"input":'),
    "batch": ("/v1/audio/speech/batch", "application/json", b'{"items":'),
    "voice upload": (
        "/v1/audio/voices",
        f"multipart/form-data; boundary={_BOUNDARY}",
        f'--{_BOUNDARY}\r\nContent-Disposition: form-data; name="name"\r\n\r\n'.encode(),
    ),
}


def _stalled_body(server, route: str) -> socket.socket:
    return _stalled_body_to(server.port, route)


def _stalled_body_to(port: int, route: str) -> socket.socket:
    path, content_type, start = _STALLED_BODIES[route]
    headers = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: 100\r\n\r\n"
    )
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(headers.encode() + start)
    return sock


def _answer_then_close(sock: socket.socket, within: float) -> tuple[bytes, bool]:
    """What the server sends, and whether it then closes the connection."""
    sock.settimeout(within)
    received = b""
    try:
        while part := sock.recv(4096):
            received += part
    except TimeoutError:
        return received, False
    except ConnectionResetError:
        pass
    return received, True


@pytest.mark.parametrize("route", list(_STALLED_BODIES))
def test_a_body_that_stalls_gets_408_and_its_connection_closed(server, route):
    started = time.monotonic()
    sock = _stalled_body(server, route)
    try:
        received, closed = _answer_then_close(sock, within=10)
    finally:
        sock.close()
    waited = time.monotonic() - started
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), received[:200]
    assert json.loads(body)["error"]["param"] == "body"
    assert closed and 1.0 <= waited < 5


def test_a_body_sent_a_byte_at_a_time_is_cut_off_too(server):
    """The bound is on the whole body, not the gap between its bytes."""
    sock = _stalled_body(server, "speech")
    started = time.monotonic()
    try:
        sock.settimeout(0.2)
        answer = b""
        while not answer and time.monotonic() - started < 10:
            sock.sendall(b" ")
            try:
                answer = sock.recv(4096)
            except TimeoutError:
                continue
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 408 ") and time.monotonic() - started < 5


def test_stalled_bodies_on_every_connection_keep_no_one_out(server):
    """The attack: every connection slot held by a body that never comes.
    Within the body timeout they are answered and closed, and another
    client is served."""
    stalled = [_stalled_body(server, "speech") for _ in range(4)]
    try:
        time.sleep(0.2)  # the four hold every slot
        refused = _open(server, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert _closed_by_server(refused, within=5)
        refused.close()
        server.wait_until_healthy(time.monotonic() + 5)  # within the body timeout
    finally:
        for sock in stalled:
            sock.close()


def _responses(server, status: int) -> int:
    text = httpx.get(f"{server.url}/metrics").text
    line = f'mlx_speech_requests_total{{status="{status}"}} '
    return next(
        (int(row[len(line) :]) for row in text.splitlines() if row.startswith(line)), 0
    )


@pytest.mark.parametrize("route", list(_STALLED_BODIES))
def test_a_client_that_leaves_mid_body_is_no_server_error(server, route):
    """Counted as 499 (client closed request), not as a 500 with a traceback."""
    errors, left = _responses(server, 500), _responses(server, 499)
    _stalled_body(server, route).close()
    deadline = time.monotonic() + 5
    while _responses(server, 499) == left:
        assert time.monotonic() < deadline, "the departure was not counted"
        time.sleep(0.05)
    assert _responses(server, 500) == errors


def test_bodies_still_arriving_when_the_server_stops_get_503(speaking_dir):
    serving, url = start_serving(
        speaking_dir, "--body-timeout", "60", "--shutdown-timeout", "1"
    )
    port = int(url.rsplit(":", 1)[1])
    try:
        stalled = {route: _stalled_body_to(port, route) for route in _STALLED_BODIES}
        time.sleep(0.3)
        serving.send_signal(signal.SIGTERM)
        for route, sock in stalled.items():
            received, closed = _answer_then_close(sock, within=15)
            sock.close()
            head, _, body = received.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 503 "), (route, received[:300])
            assert json.loads(body)["error"]["message"] == "the server is shutting down"
            assert closed, route
        assert serving.wait(timeout=30) == 0
    finally:
        if serving.poll() is None:
            serving.kill()
    output = serving.stdout.read()
    assert "Traceback" not in output and "Exception in ASGI application" not in output
