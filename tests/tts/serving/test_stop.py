"""One stop for every protocol: ``mlx-speech serve`` with Wyoming alone
(``--no-http``) and beside HTTP runs through the same life, so a first
signal lets a Wyoming session speak until the grace and then ends it with
a word, a second stops at once, and neither leaves a traceback."""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import threading
import time

import httpx
import pytest
from wyoming.error import Error
from wyoming.event import read_event, write_event
from wyoming.tts import Synthesize

from tests.tts.support.cli import MLX_SPEECH

pytestmark = pytest.mark.slow  # real servers

LONG_TEXT = "Hello there. " * 20  # the tiny model speaks each to its frame budget
BESIDE = {"wyoming alone": ["--no-http"], "wyoming beside http": []}


class Serving:
    """``mlx-speech serve`` with Wyoming on a free port, its output read
    line by line as it comes."""

    def __init__(self, speaking_dir, flags: list[str], grace: float):
        self.wyoming_port, self.http_port = _free_port(), _free_port()
        command = [MLX_SPEECH, "serve", "--model", str(speaking_dir)]
        command += ["--wyoming-port", str(self.wyoming_port), "--port", str(self.http_port)]
        self.process = subprocess.Popen(
            [*command, "--shutdown-timeout", str(grace), *flags],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "MLX_SPEECH_API_KEY": ""},
        )
        self.said: list[str] = []
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read_output, daemon=True).start()
        self.wait_for("loaded ")

    def _read_output(self) -> None:
        for line in self.process.stdout:
            self.said.append(line)
            self._lines.put(line)

    def wait_for(self, words: str) -> str:
        while True:
            line = self._lines.get(timeout=60)
            if words in line:
                return line

    def output(self) -> str:
        self.process.wait(timeout=30)
        time.sleep(0.2)  # the reader's last lines
        return "".join(self.said)

    def speak(self, text: str, receive_buffer: int | None = None) -> socket.socket:
        connection = socket.socket()
        if receive_buffer is not None:
            connection.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        connection.settimeout(30)
        connection.connect(("127.0.0.1", self.wyoming_port))
        with connection.makefile("wb") as writer:
            write_event(Synthesize(text).event(), writer)
        return connection

    def stop(self, sig=signal.SIGTERM) -> None:
        self.process.send_signal(sig)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()


@pytest.mark.parametrize("flags", BESIDE.values(), ids=BESIDE.keys())
def test_one_signal_lets_a_session_speak_until_the_grace_then_ends_it(speaking_dir, flags):
    serving = Serving(speaking_dir, flags, grace=1.5)
    try:
        http_served = _http_answers(serving.http_port)
        assert http_served == (flags == [])
        connection = serving.speak(LONG_TEXT)
        with connection, connection.makefile("rb") as reader:
            assert _read_until(reader, "audio-chunk")[-1].type == "audio-chunk"
            serving.stop()
            ended = _read_until(reader, "error")
            assert read_event(reader) is None  # then the server closes it
        error = Error.from_event(ended[-1])
        assert (error.code, error.text) == ("stopping", "the server is shutting down")
        assert sum(event.type == "audio-chunk" for event in ended) > 1  # spoke meanwhile
        assert serving.process.wait(timeout=30) == 0
        if http_served:
            assert not _http_answers(serving.http_port)
    finally:
        serving.close()
    output = serving.output()
    assert "Traceback" not in output and "Exception in ASGI" not in output, output


@pytest.mark.parametrize("flags", BESIDE.values(), ids=BESIDE.keys())
def test_a_second_signal_stops_at_once_and_quietly(speaking_dir, flags):
    serving = Serving(speaking_dir, flags, grace=600)
    try:
        # A session that reads nothing more: it could never finish by itself.
        with serving.speak(LONG_TEXT, receive_buffer=4096) as connection:
            assert connection.recv(1)
            serving.stop(signal.SIGINT)
            line = serving.wait_for("stopping")
            assert "(1 request(s), 1 WebSocket or Wyoming session(s))" in line
            assert "up to 600 s" in line
            serving.stop(signal.SIGINT)
            assert serving.process.wait(timeout=30) == 0  # not the 600 s grace
    finally:
        serving.close()
    output = serving.output()
    assert "stopping now" in output
    assert "Traceback" not in output and "CancelledError" not in output, output


def _read_until(reader, kind: str) -> list:
    events = []
    while not events or events[-1].type != kind:
        event = read_event(reader)
        assert event is not None, f"closed before {kind}: {[e.type for e in events]}"
        events.append(event)
    return events


def _http_answers(port: int) -> bool:
    try:
        health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)
    except httpx.TransportError:
        return False
    assert json.loads(health.text)["listeners"] == {"http": "serving", "wyoming": "serving"}
    return True


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
