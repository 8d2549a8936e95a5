"""The Wyoming server (Home Assistant's protocol), through the ``wyoming``
package's own client, against a real server."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import struct
import subprocess
import time

import httpx
import pytest
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.event import Event, async_read_event
from wyoming.info import Describe, Info
from wyoming.ping import Ping
from wyoming.tts import (
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeVoice,
)

from mlx_speech.server import ServerSettings
from mlx_speech.wyoming_server.session import WyomingSession
from tests.tts.support.cli import MLX_SPEECH
from tests.tts.support.idle import wait_until_idle
from tests.tts.support.server import RunningServer, assert_speaks

pytestmark = pytest.mark.slow  # real servers

FRAME_SAMPLES = 960  # the tiny codec's samples a frame, at 48 kHz
MAX_CHARS = 300


@pytest.fixture(scope="module")
def server(speaking_dir, nano_backend, tmp_path_factory):
    settings = ServerSettings(
        model=str(speaking_dir),
        voices_dir=tmp_path_factory.mktemp("wyoming-voices"),
        max_input_chars=MAX_CHARS,
        wyoming_port=0,
        backend=nano_backend,
    )
    with RunningServer(settings) as running:
        yield running


def talk(server, conversation):
    """Runs ``conversation(client)`` on a new connection to the Wyoming port."""

    async def run():
        port = server.app.state.wyoming_port
        async with AsyncTcpClient("127.0.0.1", port) as client:
            return await asyncio.wait_for(conversation(client), 60)

    return asyncio.run(run())


async def read_until(client, *kinds: str) -> list[Event]:
    """Events up to the first of ``kinds`` (included)."""
    events = []
    while True:
        event = await client.read_event()
        assert event is not None, f"closed before {kinds}: {[e.type for e in events]}"
        events.append(event)
        if event.type in kinds:
            return events


def audio_cycles(events: list[Event]) -> list[bytes]:
    """The PCM of each audio-start … audio-stop, checking its format."""
    cycles, pcm = [], None
    for event in events:
        if AudioStart.is_type(event.type):
            start = AudioStart.from_event(event)
            assert (start.rate, start.width, start.channels) == (48000, 2, 1)
            pcm = b""
        elif AudioChunk.is_type(event.type):
            assert pcm is not None
            pcm += AudioChunk.from_event(event).audio
        elif AudioStop.is_type(event.type):
            cycles.append(pcm)
            pcm = None
    return cycles


def test_describe_lists_the_model_and_its_voices_as_they_change(server, reference_clip):
    async def describe(client) -> Info:
        await client.write_event(Describe().event())
        return Info.from_event((await read_until(client, "info"))[-1])

    info = talk(server, describe)
    assert len(info.tts) == 1
    program = info.tts[0]
    assert program.name == "mlx-speech" and program.supports_synthesize_streaming
    assert [voice.name for voice in program.voices] == ["default"]
    assert {"en", "zh"} <= set(program.voices[0].languages)

    store = server.app.state.store
    store.add("grandma", reference_clip.read_bytes())
    try:
        names = [voice.name for voice in talk(server, describe).tts[0].voices]
        assert names == ["default", "grandma"]
    finally:
        store.remove("grandma")
    assert [voice.name for voice in talk(server, describe).tts[0].voices] == ["default"]


def test_synthesize_streams_one_cycle_of_pcm_as_it_is_generated(server):
    async def synthesize(client):
        await client.write_event(Synthesize("Hello there. How are you?").event())
        return await read_until(client, "audio-stop", "error")

    events = talk(server, synthesize)
    kinds = [e.type for e in events if e.type != "audio-chunk"]
    assert kinds == ["audio-start", "audio-stop"]
    (pcm,) = audio_cycles(events)
    chunks = [AudioChunk.from_event(e) for e in events if e.type == "audio-chunk"]
    assert len(chunks[0].audio) == FRAME_SAMPLES * 2  # the first chunk is one frame
    assert len(pcm) % (FRAME_SAMPLES * 2) == 0 and len(pcm) > FRAME_SAMPLES * 4
    stop = AudioStop.from_event(events[-1])
    assert stop.timestamp == len(pcm) // 2 * 1000 // 48000  # ms of audio sent


def test_a_stream_speaks_each_sentence_before_its_text_ends(server):
    async def stream(client):
        await client.write_event(SynthesizeStart(voice=SynthesizeVoice("default")).event())
        await client.write_event(SynthesizeChunk("The first sentence is here. The").event())
        # the first sentence is complete: its audio comes before the rest is sent
        before_the_rest = await read_until(client, "audio-chunk")
        await client.write_event(SynthesizeChunk(" second one follows.").event())
        whole = "The first sentence is here. The second one follows."
        await client.write_event(Synthesize(whole).event())  # for old servers: ignored
        await client.write_event(SynthesizeStop().event())
        return before_the_rest + await read_until(client, "synthesize-stopped", "error")

    events = talk(server, stream)
    kinds = [e.type for e in events if e.type != "audio-chunk"]
    assert kinds == ["audio-start", "audio-stop"] * 2 + ["synthesize-stopped"]
    assert all(len(pcm) > 0 for pcm in audio_cycles(events))


def test_mistakes_get_error_events_and_the_connection_goes_on(server):
    async def mistakes(client):
        sent = [
            Synthesize("Hi.", voice=SynthesizeVoice("nosuch")).event(),
            Synthesize("Hi.", text_format="markdown").event(),
            Synthesize("x" * (MAX_CHARS + 1)).event(),
            Event(type="synthesize", data={"text": 7}),
            Event(type="no-such-event"),
            SynthesizeChunk("orphan").event(),
            SynthesizeStop().event(),
        ]
        errors = []
        for event in sent:
            await client.write_event(event)
            errors.append(Error.from_event((await read_until(client, "error"))[-1]))
        await client.write_event(Ping("still there?").event())
        return errors, (await read_until(client, "pong"))[-1]

    errors, pong = talk(server, mistakes)
    assert [error.code for error in errors] == [
        "unknown-voice",
        "bad-request",
        "too-long",
        "bad-request",
        "unknown-event",
        "bad-request",
        "bad-request",
    ]
    assert "nosuch" in errors[0].text and "unknown text_format" in errors[1].text
    assert f"the limit is {MAX_CHARS}" in errors[2].text
    assert pong.data == {"text": "still there?"}


def test_an_unknown_voice_in_a_texts_tags_is_refused_before_any_audio(server):
    async def tagged(client):
        text = "[voice:default] Hi. [voice:nope] there."
        await client.write_event(Synthesize(text).event())
        return await read_until(client, "audio-stop")

    events = talk(server, tagged)
    assert [event.type for event in events] == ["error", "audio-stop"]
    error = Error.from_event(events[0])
    assert error.code == "unknown-voice" and "nope" in error.text


def raw_exchange(server, data: bytes) -> tuple[list[Event], bool]:
    """Sends raw bytes; → the events answered, and whether the server closed."""

    async def run():
        port = server.app.state.wyoming_port
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(data)
        await writer.drain()
        events = []
        while (event := await asyncio.wait_for(async_read_event(reader), 10)) is not None:
            events.append(event)
        writer.close()
        return events, reader.at_eof()

    return asyncio.run(run())


@pytest.mark.parametrize(
    "data, said",
    [
        (b"not json\n", "is not JSON"),
        (b'{"data": {}}\n', "no 'type'"),
        (json.dumps({"type": "x", "payload_length": 10**9}).encode() + b"\n", "10"),
        (b"x" * 70_000, "passed 65536 bytes"),
    ],
    ids=["not-json", "no-type", "huge-payload", "endless-line"],
)
def test_bytes_that_are_no_event_get_an_error_and_the_connection_ends(server, data, said):
    events, closed = raw_exchange(server, data)
    assert [event.type for event in events] == ["error"] and closed
    assert said in events[0].data["text"] and events[0].data["code"] == "bad-framing"


def test_a_client_that_leaves_mid_synthesis_frees_the_model(server):
    async def leave(client):
        await client.write_event(Synthesize("Hello there. " * 10).event())
        await read_until(client, "audio-chunk")  # then it goes

    talk(server, leave)
    wait_until_idle()
    assert server.app.state.metrics.in_flight == 0


def test_the_wyoming_server_runs_alone_and_stops_on_sigterm(speaking_dir):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [MLX_SPEECH, "serve", "--model", str(speaking_dir), "--no-http"]
    served = subprocess.Popen(
        [*command, "--wyoming-port", str(port), "--port", str(port + 1)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "MLX_SPEECH_API_KEY": ""},
    )
    try:

        async def describe():
            async with AsyncTcpClient("127.0.0.1", port) as client:
                await client.write_event(Describe().event())
                return await asyncio.wait_for(read_until(client, "info", "error"), 10)

        deadline = time.monotonic() + 60
        while True:  # the listener opens at once; the model loads meanwhile
            try:
                if asyncio.run(describe())[-1].type == "info":
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline and served.poll() is None
            time.sleep(0.2)
        with pytest.raises(httpx.TransportError):
            httpx.get(f"http://127.0.0.1:{port + 1}/health", timeout=2)
        served.send_signal(signal.SIGTERM)
        assert served.wait(30) == 0
    finally:
        served.kill()
    assert "Wyoming (Home Assistant) listening" in served.stdout.read()


def test_no_http_without_a_wyoming_port_is_a_usage_error():
    finished = subprocess.run(
        [MLX_SPEECH, "serve", "--no-http"], capture_output=True, text=True, timeout=60
    )
    assert finished.returncode == 2 and "needs --wyoming-port" in finished.stderr


def own_server(speaking_dir, nano_backend, voices_dir, **limits) -> RunningServer:
    """A server of the test's own, Wyoming on a free port, with ``limits``."""
    settings = ServerSettings(
        model=str(speaking_dir),
        voices_dir=voices_dir,
        wyoming_port=0,
        backend=nano_backend,
        **limits,
    )
    return RunningServer(settings)


def test_a_quiet_connection_is_closed_and_a_stopping_server_says_so(
    speaking_dir, nano_backend, tmp_path
):
    with own_server(
        speaking_dir, nano_backend, tmp_path, socket_idle_timeout=1.0
    ) as running:

        async def quiet(client):
            started = time.monotonic()
            assert await client.read_event() is None  # closed by the server
            return time.monotonic() - started

        assert 0.9 <= talk(running, quiet) < 5

        async def stopped_mid_speech(client):
            await client.write_event(Synthesize("Hello there. " * 20).event())
            await read_until(client, "audio-chunk")
            running.app.state.shutdown.begin(0.2)
            events = await read_until(client, "error")
            assert await client.read_event() is None
            return Error.from_event(events[-1])

        error = talk(running, stopped_mid_speech)
        assert (error.code, error.text) == ("stopping", "the server is shutting down")


@pytest.mark.parametrize(
    "text", [None, "Hello there. And then"], ids=["no-text", "a-sentence-and-more"]
)
def test_a_stream_whose_text_stops_coming_is_closed_when_idle(
    speaking_dir, nano_backend, tmp_path, text
):
    with own_server(
        speaking_dir, nano_backend, tmp_path, socket_idle_timeout=1.0
    ) as running:

        async def abandoned(client):
            await client.write_event(SynthesizeStart().event())
            if text is not None:
                await client.write_event(SynthesizeChunk(text).event())
            events, started = [], time.monotonic()
            while (event := await client.read_event()) is not None:
                events.append(event.type)
            return events, time.monotonic() - started

        events, waited = talk(running, abandoned)
        assert 0.9 <= waited < 10
        if text is not None:  # its sentence was spoken first
            assert events[0] == "audio-start" and "audio-stop" in events
        wait_until_idle()
        assert running.app.state.metrics.in_flight == 0


def test_a_stream_refused_as_busy_still_ends_with_synthesize_stopped(
    speaking_dir, nano_backend, tmp_path
):
    with own_server(speaking_dir, nano_backend, tmp_path, max_queue=-(10**6)) as running:

        async def refused(client):
            await client.write_event(SynthesizeStart().event())
            await client.write_event(SynthesizeChunk("Hello there.").event())
            await client.write_event(SynthesizeStop().event())
            return await read_until(client, "synthesize-stopped")

        events = talk(running, refused)
        assert [event.type for event in events] == ["error", "synthesize-stopped"]
        assert Error.from_event(events[0]).code == "busy"

        async def refused_whole(client):
            await client.write_event(Synthesize("Hello there.").event())
            return await read_until(client, "audio-stop")

        events = talk(running, refused_whole)  # ends as a synthesize's answer ends
        assert [event.type for event in events] == ["error", "audio-stop"]
        assert Error.from_event(events[0]).code == "busy"


def test_a_client_that_reads_nothing_is_cut_and_frees_the_model(
    speaking_dir, nano_backend, tmp_path
):
    with own_server(
        speaking_dir, nano_backend, tmp_path, stream_idle_timeout=1.0
    ) as running:
        state = running.app.state
        reader = socket.socket()
        reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window
        reader.connect(("127.0.0.1", state.wyoming_port))
        asked = Synthesize("Hello there. " * 20).event().to_dict()  # minutes of audio
        reader.sendall(json.dumps(asked).encode() + b"\n")  # and none of it read
        deadline = time.monotonic() + 30
        while not state.sockets.active:  # the server took it
            assert time.monotonic() < deadline
            time.sleep(0.05)
        while state.sockets.active:  # then it gave up on it
            assert time.monotonic() < deadline, "the stalled client was never cut"
            time.sleep(0.1)
        wait_until_idle()
        assert state.metrics.in_flight == 0
        reader.settimeout(10)
        received = 0
        while chunk := reader.recv(1 << 16):
            received += len(chunk)
        reader.close()
    whole = 20 * 375 * FRAME_SAMPLES * 2  # what all of it would have been
    assert received < whole / 4


def test_connections_past_the_bound_are_closed_unread(speaking_dir, nano_backend, tmp_path):
    with own_server(speaking_dir, nano_backend, tmp_path, max_connections=1) as running:
        port = running.app.state.wyoming_port
        with socket.create_connection(("127.0.0.1", port)) as first:
            deadline = time.monotonic() + 10
            while not running.app.state.sockets.active:  # the first holds the place
                assert time.monotonic() < deadline
                time.sleep(0.05)
            with socket.create_connection(("127.0.0.1", port)) as second:
                second.settimeout(10)
                assert second.recv(1) == b""  # closed at once, nothing said
            first.sendall(json.dumps(Ping("here").event().to_dict()).encode() + b"\n")
            first.settimeout(10)
            assert b"pong" in first.recv(4096)


def ping_answered(port: int) -> bool:
    """Whether a new connection to ``port`` gets its ``pong``."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
        client.sendall(json.dumps(Ping("here").event().to_dict()).encode() + b"\n")
        return b"pong" in client.recv(4096)


def hang_up(port: int, data: bytes, reset: bool, after_audio: bool) -> None:
    """Sends ``data`` and goes: a close, or a reset (RST), at once or after
    the first bytes of the answer."""
    client = socket.create_connection(("127.0.0.1", port), timeout=10)
    if reset:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.sendall(data)
    if after_audio:
        client.recv(1)
    client.close()


@pytest.mark.parametrize("after_audio", [False, True], ids=["at-once", "mid-audio"])
@pytest.mark.parametrize("reset", [False, True], ids=["close", "reset"])
def test_clients_that_hang_up_leave_the_port_serving(server, reset, after_audio):
    port = server.app.state.wyoming_port
    asked = Synthesize("Hello there. " * 5) if after_audio else Ping("bye")
    data = json.dumps(asked.event().to_dict()).encode() + b"\n"
    for _ in range(100 if not after_audio else 20):
        hang_up(port, data, reset, after_audio)
    assert ping_answered(port)
    assert httpx.get(f"{server.url}/health", timeout=5).json()["listeners"]["wyoming"] == (
        "serving"
    )
    wait_until_idle()
    assert server.app.state.metrics.in_flight == 0


def test_the_wyoming_clients_hang_ups_leave_the_port_serving(server):
    async def cancel(client):  # as Home Assistant does when a user cancels
        await client.write_event(Synthesize("Hello there. " * 5).event())
        await read_until(client, "audio-chunk")

    async def ping_and_go(client):
        await client.write_event(Ping("bye").event())

    for _ in range(10):
        talk(server, cancel)
        talk(server, ping_and_go)
    assert ping_answered(server.app.state.wyoming_port)
    wait_until_idle()
    assert server.app.state.metrics.in_flight == 0


def test_a_header_nested_past_the_parser_is_bad_framing(server):
    nested = b'{"type": "ping", "x": ' + b"[" * 50_000 + b"\n"
    events, closed = raw_exchange(server, nested)
    assert [event.type for event in events] == ["error"] and closed
    assert events[0].data["code"] == "bad-framing"
    assert ping_answered(server.app.state.wyoming_port)


def test_a_failing_connection_ends_alone(server, monkeypatch):
    real = WyomingSession._handle

    async def failing(self, event):
        if event.type == "boom":
            raise RuntimeError("a bug met by one connection")
        await real(self, event)

    monkeypatch.setattr(WyomingSession, "_handle", failing)
    port = server.app.state.wyoming_port
    events, closed = raw_exchange(server, b'{"type": "boom"}\n')
    assert events == [] and closed
    assert ping_answered(port)


def listening_socket_shut(port: int) -> None:
    """Shuts this process's socket listening on ``port``: its accept fails."""
    for fd in os.listdir("/proc/self/fd"):
        try:
            candidate = socket.socket(fileno=os.dup(int(fd)))
        except OSError:
            continue
        with candidate:
            if (
                candidate.family in (socket.AF_INET, socket.AF_INET6)
                and candidate.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
                and candidate.getsockname()[1] == port
            ):
                candidate.shutdown(socket.SHUT_RDWR)
                return
    raise AssertionError(f"nothing listens on {port}")


def test_health_says_when_the_wyoming_listener_is_down(
    speaking_dir, nano_backend, tmp_path
):
    with own_server(speaking_dir, nano_backend, tmp_path) as running:
        health = httpx.get(f"{running.url}/health", timeout=5)
        assert health.status_code == 200
        assert health.json()["listeners"] == {"http": "serving", "wyoming": "serving"}
        listening_socket_shut(running.app.state.wyoming_port)
        deadline = time.monotonic() + 10
        while (health := httpx.get(f"{running.url}/health", timeout=5)).status_code == 200:
            assert time.monotonic() < deadline, "the listener's end was never seen"
            time.sleep(0.05)
        assert health.status_code == 503
        answer = health.json()
        assert answer["status"] == "failed" and "wyoming" in answer["error"]
        assert answer["listeners"]["wyoming"].startswith("failed: OSError("), answer
        assert_speaks(running)  # HTTP goes on
