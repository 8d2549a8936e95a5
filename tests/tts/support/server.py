"""A real server on 127.0.0.1 (its life, with HTTP as uvicorn serves it,
and the other listeners its settings name), run in a thread for the tests."""

from __future__ import annotations

import dataclasses
import socket
import threading
import time

import httpx

import mlx_speech
from mlx_speech.http.listener import HttpListener
from mlx_speech.server import ServerSettings, listeners
from mlx_speech.serving.lifetime import ServerLife
from mlx_speech.serving.state import server_state


class RunningServer:
    def __init__(
        self,
        settings: ServerSettings,
        load=mlx_speech.load,
        wait_until_healthy=True,
        send_buffer: int | None = None,
    ):
        """``send_buffer``: a fixed kernel send buffer for every connection,
        so a client that stops reading stalls the server's writes within
        kilobytes instead of the megabytes loopback autotuning allows."""
        self.sock = socket.socket()
        if send_buffer is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.http = HttpListener(sockets=[self.sock], log_level="warning")
        others = listeners(dataclasses.replace(settings, http=False))
        self.state = server_state(settings, load)
        self.life = ServerLife(self.state, [self.http, *others])
        self._wait_until_healthy = wait_until_healthy
        self.thread = threading.Thread(target=self.life.run, daemon=True)

    @property
    def app(self):
        return self.http.app

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.life.listening:
            assert self.thread.is_alive(), "server did not start"
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.02)
        if self._wait_until_healthy:
            self.wait_until_healthy(deadline)
        return self

    def wait_until_healthy(self, deadline: float) -> None:
        while True:
            try:
                if httpx.get(f"{self.url}/health", timeout=5).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "server did not become healthy"
            time.sleep(0.05)

    def __exit__(self, *exc) -> None:
        self.life.stop()
        self.thread.join(timeout=15)
        self.sock.close()


def assert_speaks(server: RunningServer) -> None:
    """A plain two-frame request is served whole (PCM16 at 24 kHz, OpenAI's
    pcm rate; the tiny codec makes 960 samples per frame at 48 kHz)."""
    response = httpx.post(
        f"{server.url}/v1/audio/speech",
        json={"input": "Hi.", "max_new_tokens": 2, "response_format": "pcm"},
        timeout=60,
    )
    assert response.status_code == 200 and len(response.content) == 2 * 480 * 2
