"""``/v1/audio/speech/stream`` end to end: a real uvicorn server, a real
WebSocket client (``websockets``), vLLM-Omni's protocol."""

from __future__ import annotations

import base64
import io
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

import mlx_speech
from mlx_speech.errors import GenerationError
from mlx_speech.server import ServerSettings
from tests.tts.support.cli import start_serving
from tests.tts.support.clip_decodes import counted_decodes
from tests.tts.support.idle import wait_until_idle
from tests.tts.support.server import RunningServer

pytestmark = pytest.mark.slow  # real servers

FRAME = 960
PATH = "/v1/audio/speech/stream"


@pytest.fixture(scope="module")
def server(speaking_dir, nano_backend, tmp_path_factory):
    settings = ServerSettings(
        model=str(speaking_dir),
        voices_dir=tmp_path_factory.mktemp("socket-voices"),
        socket_idle_timeout=1.5,
        backend=nano_backend,
    )
    with RunningServer(settings) as running:
        yield running


def socket_url(server) -> str:
    return server.url.replace("http://", "ws://") + PATH


def send(ws, kind: str, **fields) -> None:
    ws.send(json.dumps({"type": kind, **fields}))


def receive_until(ws, kind: str, timeout: float = 120) -> list:
    """Messages (dicts) and binary frames (bytes) up to and including ``kind``."""
    received = []
    while True:
        frame = ws.recv(timeout=timeout)
        message = frame if isinstance(frame, bytes) else json.loads(frame)
        received.append(message)
        if isinstance(message, dict) and message["type"] == kind:
            return received


def messages(received, kind: str) -> list[dict]:
    return [m for m in received if isinstance(m, dict) and m["type"] == kind]


CONFIG = {"seed": 3, "max_new_tokens": 4, "split_granularity": "sentence"}


def test_each_sentence_is_a_wav_file_between_start_and_done(server):
    with connect(socket_url(server)) as ws:
        send(ws, "session.config", response_format="wav", **CONFIG)
        for piece in ("Hello there. How", " are you", " today?"):
            send(ws, "input.text", text=piece)
        send(ws, "input.done")
        received = receive_until(ws, "session.done")
    starts = messages(received, "audio.start")
    assert [
        (s["utterance_index"], s["sentence_index"], s["sentence_text"]) for s in starts
    ] == [
        (0, 0, "Hello there."),
        (0, 1, "How are you today?"),
    ]
    assert starts[0]["format"] == "wav" and starts[0]["sample_rate"] == 48000
    files = [frame for frame in received if isinstance(frame, bytes)]
    assert len(files) == 2
    for data, done in zip(files, messages(received, "audio.done"), strict=True):
        samples, rate = soundfile.read(io.BytesIO(data))
        assert rate == 48000 and len(samples) == 4 * FRAME
        assert done["total_bytes"] == len(data) and done["error"] is False
    assert received[-1] == {
        "type": "session.done",
        "utterance_index": 0,
        "total_sentences": 2,
    }


def test_stream_audio_pcm_equals_the_http_pcm_of_each_sentence(server):
    with connect(socket_url(server)) as ws:
        send(ws, "session.config", response_format="pcm", stream_audio=True, **CONFIG)
        send(ws, "input.text", text="Hello there. Goodbye now.")
        send(ws, "input.done")
        received = receive_until(ws, "session.done")
    assert messages(received, "audio.start")[0]["sample_rate"] == 24000
    per_sentence, current = [], b""
    for item in received:
        if isinstance(item, bytes):
            current += item
        elif item["type"] == "audio.done":
            assert item["total_bytes"] == len(current)
            per_sentence.append(current)
            current = b""
    assert len([item for item in received if isinstance(item, bytes)]) > 2  # chunks
    for text, pcm in zip(("Hello there.", "Goodbye now."), per_sentence, strict=True):
        body = {"input": text, "response_format": "pcm", "seed": 3, "max_new_tokens": 4}
        http = httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=60)
        assert pcm == http.content


def test_first_sentence_audio_arrives_before_the_rest_is_sent(server):
    with connect(socket_url(server)) as ws:
        send(ws, "session.config", **CONFIG)
        send(ws, "input.text", text="The first sentence. ")
        # Nothing more is sent until its audio is here.
        first = receive_until(ws, "audio.done")
        assert messages(first, "audio.start")[0]["sentence_text"] == "The first sentence."
        send(ws, "input.text", text="And the second.")
        send(ws, "input.done")
        rest = receive_until(ws, "session.done")
    assert rest[-1]["total_sentences"] == 2


def test_utterances_share_the_connection_and_the_config_can_change_between(server):
    with connect(socket_url(server)) as ws:
        send(ws, "session.config", response_format="wav", **CONFIG)
        send(ws, "input.text", text="One.")
        send(ws, "input.done")
        send(ws, "input.text", text="Two.")  # before the first is answered: queued
        send(ws, "input.done")
        first = receive_until(ws, "session.done")
        second = receive_until(ws, "session.done")
        send(ws, "session.config", response_format="pcm", **CONFIG)
        send(ws, "input.text", text="Three.")
        send(ws, "input.done")
        third = receive_until(ws, "session.done")
        send(ws, "input.done")  # nothing buffered: an empty utterance
        empty = receive_until(ws, "session.done")
        send(ws, "session.close")
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=10)
    assert [r[-1]["utterance_index"] for r in (first, second, third, empty)] == [0, 1, 2, 3]
    assert messages(second, "audio.start")[0]["sentence_text"] == "Two."
    assert messages(third, "audio.start")[0]["format"] == "pcm"
    assert len(next(f for f in third if isinstance(f, bytes))) == 4 * 480 * 2
    assert empty == [{"type": "session.done", "utterance_index": 3, "total_sentences": 0}]


def test_mistakes_get_an_error_and_the_session_goes_on(server):
    with connect(socket_url(server)) as ws:
        send(ws, "session.config", **CONFIG)
        ws.send("{not json")
        ws.send(b"\x00\x01")
        ws.send("[1, 2]")
        send(ws, "input.bogus")
        send(ws, "input.text", text=7)
        send(ws, "input.text", text="x" * (200 * 1024))
        send(ws, "input.text", text="\ud800")
        send(ws, "session.config", response_format="nope")
        errors = [json.loads(ws.recv(timeout=30))["message"] for _ in range(8)]
        send(ws, "input.text", text="Still here.")
        send(ws, "session.config", response_format="pcm")  # text is buffered
        errors.append(json.loads(ws.recv(timeout=30))["message"])
        send(ws, "input.done")
        received = receive_until(ws, "session.done")
    for expected, message in zip(
        [
            "invalid JSON",
            "binary frames are not accepted",
            "JSON object",
            "unknown message type 'input.bogus'",
            "needs a string",
            "message too large",
            "not valid Unicode",
            "invalid session.config (the previous one stays)",
            "send input.done first",
        ],
        errors,
        strict=True,
    ):
        assert expected in message
    assert messages(received, "audio.start")[0]["format"] == "wav"  # the first config
    assert received[-1]["total_sentences"] == 1


@pytest.mark.parametrize(
    "first, expected",
    [
        ({"type": "input.text", "text": "Hi."}, "expected session.config first"),
        ({"type": "session.config", "response_format": "xyz"}, "invalid session.config"),
        ({"type": "session.config", "voice": "nobody-here"}, "nobody-here"),
        ({"type": "session.config", "stream_audio": True}, "needs response_format 'pcm'"),
        ({"type": "session.config", "split_granularity": "word"}, "split_granularity"),
        ("{not json", "the first message must be a session.config"),
        (b"\x00", "the first message must be a session.config"),
    ],
)
def test_a_first_message_that_is_not_a_valid_config_ends_the_session(
    server, first, expected
):
    with connect(socket_url(server)) as ws:
        ws.send(first if isinstance(first, str | bytes) else json.dumps(first))
        errors = [json.loads(ws.recv(timeout=30))["message"]]
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                errors.append(json.loads(ws.recv(timeout=10))["message"])
    assert any(expected in error for error in errors), errors
    assert closed.value.rcvd.code == 1008


def test_an_idle_session_is_closed_with_a_message(server):
    with connect(socket_url(server)) as ws:
        send(ws, "session.config", **CONFIG)
        started = time.monotonic()
        assert "idle timeout" in json.loads(ws.recv(timeout=30))["message"]
        assert time.monotonic() - started >= 1.4
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=10)


def test_a_client_that_leaves_mid_utterance_cancels_its_work(server):
    with connect(socket_url(server)) as ws:
        send(ws, "session.config", temperature=0, max_new_tokens=4000)
        send(ws, "input.text", text="A very long sentence to speak.")
        send(ws, "input.done")
        receive_until(ws, "audio.start")
    wait_until_idle(timeout=30)


def test_a_speaker_field_names_the_voice_as_in_vllm_omni(server):
    with connect(socket_url(server)) as ws:
        send(ws, "session.config", speaker="alloy", **CONFIG)
        send(ws, "input.text", text="Hello.")
        send(ws, "input.done")
        assert receive_until(ws, "session.done")[-1]["total_sentences"] == 1


def test_api_key_and_origin_guard_the_socket(speaking_dir, tmp_path):
    settings = ServerSettings(model=str(speaking_dir), voices_dir=tmp_path, api_key="k3y")
    with RunningServer(settings) as running:
        url = socket_url(running)
        with pytest.raises(InvalidStatus) as refused:
            connect(url)
        assert refused.value.response.status_code == 401
        good = {"Authorization": "Bearer k3y"}
        with pytest.raises(InvalidStatus) as refused:
            connect(url, additional_headers=good, origin="http://evil.example")
        assert refused.value.response.status_code == 403
        assert b"--cors-origin" in refused.value.response.body
        own_page = f"http://127.0.0.1:{running.port}"
        with connect(url, additional_headers=good, origin=own_page) as ws:
            send(ws, "session.config", **CONFIG)
            send(ws, "input.done")
            assert receive_until(ws, "session.done")[-1]["total_sentences"] == 0


def test_a_stopping_server_ends_the_session_with_a_message(speaking_dir):
    serving, url = start_serving(speaking_dir, "--shutdown-timeout", "1")
    try:
        with connect(url.replace("http://", "ws://") + PATH) as ws:
            send(ws, "session.config", temperature=0, max_new_tokens=4000)
            send(ws, "input.text", text="Speak for a long time.")
            send(ws, "input.done")
            receive_until(ws, "audio.start")
            serving.send_signal(signal.SIGTERM)
            time.sleep(0.3)
            with pytest.raises(InvalidStatus) as refused:  # new sessions: 503
                connect(url.replace("http://", "ws://") + PATH)
            assert refused.value.response.status_code == 503
            received = receive_until(ws, "error", timeout=30)
            assert received[-1]["message"] == "the server is shutting down"
            cut = messages(received, "audio.done")  # the sentence begun is ended
            assert [(d["sentence_index"], d["error"]) for d in cut] == [(0, True)]
            with pytest.raises(ConnectionClosed) as closed:
                while True:
                    ws.recv(timeout=10)
            assert closed.value.rcvd.code == 1001
        assert serving.wait(timeout=30) == 0
    finally:
        serving.kill()
    assert "Traceback" not in serving.stdout.read()


def test_audio_equals_the_same_text_spoken_alone(server, speaking_tts):
    with connect(socket_url(server)) as ws:
        send(ws, "session.config", response_format="wav", **CONFIG)
        send(ws, "input.text", text="Hello there.")
        send(ws, "input.done")
        data = next(f for f in receive_until(ws, "session.done") if isinstance(f, bytes))
    samples, _ = soundfile.read(io.BytesIO(data), dtype="int16")
    alone = speaking_tts.speak("Hello there.", seed=3, max_new_tokens=4).samples
    expected = np.clip(np.round(alone * 32767), -32768, 32767).astype(np.int16)
    np.testing.assert_allclose(samples, expected, atol=1)


def test_the_websocket_example_client_saves_what_it_heard(server, tmp_path):
    example = Path(__file__).parents[3] / "examples" / "speak_over_websocket.py"
    out = tmp_path / "heard.wav"
    command = [sys.executable, str(example), "Hello there. How are you?", "-o", str(out)]
    command += ["--url", socket_url(server), "--delay", "0.01"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "speaking: Hello there." in result.stdout
    assert "speaking: How are you?" in result.stdout
    samples, rate = soundfile.read(out)
    assert rate == 24000 and len(samples) > 0


def test_handshakes_get_503_while_the_model_loads(speaking_dir, tmp_path):
    release = threading.Event()

    def slow_load(model, **options):
        release.wait(30)
        return mlx_speech.load(model, **options)

    settings = ServerSettings(model=str(speaking_dir), voices_dir=tmp_path)
    with RunningServer(settings, load=slow_load, wait_until_healthy=False) as running:
        try:
            with pytest.raises(InvalidStatus) as refused:
                connect(socket_url(running))
            assert refused.value.response.status_code == 503
            assert b"still loading" in refused.value.response.body
        finally:
            release.set()
        running.wait_until_healthy(time.monotonic() + 30)
        with connect(socket_url(running)) as ws:
            send(ws, "session.config", **CONFIG)
            send(ws, "input.done")
            assert receive_until(ws, "session.done")[-1]["total_sentences"] == 0


def test_an_utterance_past_max_input_chars_drops_the_piece(server):
    with connect(socket_url(server)) as ws:
        send(ws, "session.config", **CONFIG)
        send(ws, "input.text", text="a " * 2000)
        send(ws, "input.text", text="b" * 200)  # 4200 characters in all
        assert "would pass 4096 characters" in json.loads(ws.recv(timeout=30))["message"]
        send(ws, "input.done")
        assert receive_until(ws, "session.done")[-1]["total_sentences"] >= 1


def test_a_refused_utterance_is_said_and_answered_with_no_sentences(speaking_dir, tmp_path):
    # A negative bound refuses every request, as a full queue would.
    settings = ServerSettings(
        model=str(speaking_dir), voices_dir=tmp_path, max_queue=-(10**6)
    )
    with RunningServer(settings) as running, connect(socket_url(running)) as ws:
        send(ws, "session.config", **CONFIG)
        send(ws, "input.text", text="Hello.")
        assert "this utterance is dropped" in json.loads(ws.recv(timeout=30))["message"]
        send(ws, "input.done")
        assert receive_until(ws, "session.done")[-1] == {
            "type": "session.done",
            "utterance_index": 0,
            "total_sentences": 0,
        }


class _FailingAfterOneChunk:
    """A segment whose generation fails after its first chunk."""

    def __init__(self, stream):
        self._stream = stream
        self._sent = False

    def __iter__(self):
        return self

    def __next__(self):
        if self._sent:
            raise GenerationError("the codec produced non-finite audio")
        self._sent = True
        return next(self._stream)

    def cancel(self):
        self._stream.cancel()


def test_a_failing_segment_gets_an_error_and_its_audio_done(speaking_dir, tmp_path):
    def load_failing_on_explode(model, **options):
        tts = mlx_speech.load(model, **options)
        opener = tts._opener
        opened = opener.started  # each segment's job, from its family request

        def failing(request, speed):
            chunks = opened(request, speed)
            explodes = any("Explode" in segment for segment in request.segments)
            return _FailingAfterOneChunk(chunks) if explodes else chunks

        opener.started = failing
        return tts

    settings = ServerSettings(model=str(speaking_dir), voices_dir=tmp_path)
    with RunningServer(settings, load=load_failing_on_explode) as running:
        with connect(socket_url(running)) as ws:
            send(ws, "session.config", **CONFIG)
            send(ws, "input.text", text="Fine first. Explode here. Never said.")
            send(ws, "input.done")
            received = receive_until(ws, "session.done")
    errors = messages(received, "error")
    assert len(errors) == 1 and "non-finite audio" in errors[0]["message"]
    assert [d["error"] for d in messages(received, "audio.done")] == [False, True]
    assert received[-1]["total_sentences"] == 2


def test_a_sessions_clip_is_decoded_once_however_many_sentences(
    server, reference_clip, monkeypatch
):
    """Each sentence of an utterance decoded the session's clip again (ten
    sentences of a costly clip: 28.9 s against 0.12 s without it)."""
    decodes = counted_decodes(monkeypatch)
    clip = base64.b64encode(reference_clip.read_bytes()).decode()
    counts = []
    for sentences in (1, 6):
        decodes.clear()
        with connect(socket_url(server)) as ws:
            send(
                ws,
                "session.config",
                ref_audio=clip,
                split_granularity="sentence",
                seed=3,
                max_new_tokens=2,
            )
            text = " ".join(
                f"This is sentence {n}, said on its own." for n in range(sentences)
            )
            send(ws, "input.text", text=text)
            send(ws, "input.done")
            received = receive_until(ws, "session.done")
        assert received[-1]["total_sentences"] == sentences
        counts.append(len(decodes))
    assert counts[0] == counts[1] <= 2  # the config's check, and the utterance's


def test_an_utterance_is_limited_as_it_is_read_out(server):
    sentence = "1234567 " * 50 + ". "  # 402 characters, about 3,700 read out
    with connect(socket_url(server)) as ws:
        send(ws, "session.config", **CONFIG)
        send(ws, "input.text", text=sentence * 2)
        send(ws, "input.done")
        received = receive_until(ws, "session.done")
    errors = messages(received, "error")
    assert len(errors) == 1, errors
    assert "passed 4096 characters as it is read out" in errors[0]["message"]
    assert [d["error"] for d in messages(received, "audio.done")] == [False]
    assert received[-1]["total_sentences"] == 1


def test_a_session_may_have_eight_utterances_waiting(server):
    with connect(socket_url(server)) as ws:
        send(ws, "session.config", **{**CONFIG, "max_new_tokens": 20})
        for _ in range(10):  # sent long before the first is spoken
            send(ws, "input.text", text="Hello.")
            send(ws, "input.done")
        received = []
        while len(messages(received, "session.done")) < 10:
            received += receive_until(ws, "session.done")
    errors = messages(received, "error")
    assert len(errors) == 2, errors
    assert all("may have 8 utterances waiting" in e["message"] for e in errors)
    answered = [d["total_sentences"] for d in messages(received, "session.done")]
    assert answered == [1] * 8 + [0] * 2


def _in_flight(server) -> int:
    """Speech requests and utterances counted toward --max-queue."""
    gauges = {}
    for line in httpx.get(f"{server.url}/metrics").text.splitlines():
        name, _, value = line.partition(" ")
        gauges[name] = value
    return int(gauges["mlx_speech_active_streams"]) + int(gauges["mlx_speech_queue_depth"])


def _stall(ws, utterances: int) -> None:
    """Send ``utterances``, then read nothing more."""
    send(ws, "session.config", response_format="wav", max_new_tokens=40, seed=1)
    for _ in range(utterances):
        send(ws, "input.text", text="Hello there. How are you today?")
        send(ws, "input.done")


def test_a_session_that_stops_reading_holds_one_place_and_then_none(speaking_dir, tmp_path):
    settings = ServerSettings(
        model=str(speaking_dir), voices_dir=tmp_path, max_queue=2, stream_idle_timeout=2
    )
    with RunningServer(settings, send_buffer=16384) as running:
        sock = socket.create_connection(("127.0.0.1", running.port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        with connect(socket_url(running), sock=sock, max_queue=1, close_timeout=1) as ws:
            _stall(ws, utterances=12)
            time.sleep(1)
            assert _in_flight(running) == 1  # the utterance speaking, not the 11 waiting
            response = httpx.post(
                f"{running.url}/v1/audio/speech",
                json={"input": "Hi.", "max_new_tokens": 2, "response_format": "pcm"},
                timeout=60,
            )
            assert response.status_code == 200, response.text
            deadline = time.monotonic() + 20  # the stall ends the session after 2 s
            while _in_flight(running):
                assert time.monotonic() < deadline, "the stalled session kept its place"
                time.sleep(0.1)


def test_an_utterance_of_whitespace_alone_is_not_spoken(server):
    with connect(socket_url(server)) as ws:
        send(ws, "session.config", **CONFIG)
        send(ws, "input.text", text="   \n ")
        send(ws, "input.done")
        received = receive_until(ws, "session.done")
    assert [m["message"] for m in messages(received, "error")] == [
        "not spoken: the text was empty: nothing to speak"
    ]
    assert received[-1]["total_sentences"] == 0


def test_each_sentence_says_where_it_lies_in_the_utterance(server):
    """Captions: start and end samples at the output rate, exact to the
    sample after resampling, each sentence starting where the last ended."""
    with connect(socket_url(server)) as ws:
        config = {**CONFIG, "sample_rate": 16000}
        send(ws, "session.config", response_format="pcm", stream_audio=True, **config)
        send(ws, "input.text", text="Hello there. How are you? Fine.")
        send(ws, "input.done")
        received = receive_until(ws, "session.done")
    starts, dones = messages(received, "audio.start"), messages(received, "audio.done")
    assert len(dones) == 3
    end = 0
    for start, done in zip(starts, dones, strict=True):
        assert start["start_sample"] == done["start_sample"] == end
        assert done["end_sample"] - done["start_sample"] == done["total_bytes"] // 2
        end = done["end_sample"]
    audio = b"".join(frame for frame in received if isinstance(frame, bytes))
    assert end == len(audio) // 2


def test_a_long_sentence_sent_whole_needs_the_clients_max_size_raised(server):
    """A sentence's file in one binary message: past 1 MiB (about 11 s of
    48 kHz WAV) the websockets client refuses it by default (1009), as the
    docs say, and takes it with max_size raised."""
    config = {"response_format": "wav", "seed": 3, "max_new_tokens": 600}
    with pytest.raises(ConnectionClosed) as refused:
        with connect(socket_url(server)) as ws:
            send(ws, "session.config", sample_rate=48000, **config)
            send(ws, "input.text", text="A long sentence.")
            send(ws, "input.done")
            receive_until(ws, "session.done")
    assert refused.value.sent.code == 1009  # the client closes: message too big
    with connect(socket_url(server), max_size=None) as ws:
        send(ws, "session.config", sample_rate=48000, **config)
        send(ws, "input.text", text="A long sentence.")
        send(ws, "input.done")
        [audio] = [f for f in receive_until(ws, "session.done") if isinstance(f, bytes)]
    assert len(audio) > 2**20
