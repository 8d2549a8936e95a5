"""Inputs a hostile or careless user sends, on every surface: each gets a
clear error in the documented shape (never a 500 or a traceback), quotes
little of what was sent, and costs little memory."""

from __future__ import annotations

import base64
import io
import json
import logging
import os
import socket
import subprocess
import threading
import time
import tracemalloc

import httpx
import numpy as np
import pytest
import soundfile

import mlx_speech
from mlx_speech.cli.arguments import SAMPLING_FLAGS
from mlx_speech.families.options import SamplingOptions
from mlx_speech.http.errors import ApiError
from mlx_speech.http.speech.media import read_local_media
from mlx_speech.server import ServerSettings
from mlx_speech.voices.store import VoiceStore
from tests.tts.support.cli import MLX_SPEECH, run
from tests.tts.support.server import RunningServer, assert_speaks
from tests.tts.support.swaps import Swapping

pytestmark = pytest.mark.slow  # real servers

HUGE = "1" + "0" * 400  # an integer literal no float holds
MEDIA = '{"input": "hi", "ref_audio": "file://{media}/'  # inside the allowed directory


def _clip(seconds: float, rate: int = 16000, channels: int = 1, fmt: str = "WAV") -> bytes:
    samples = np.zeros((int(seconds * rate), channels), dtype=np.float32)  # silence
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, format=fmt)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def server(speaking_dir, nano_backend, tmp_path_factory):
    media = tmp_path_factory.mktemp("media")
    settings = ServerSettings(
        model=str(speaking_dir),
        voices_dir=tmp_path_factory.mktemp("hostile-voices"),
        allowed_local_media_path=media,
        backend=nano_backend,
    )
    with RunningServer(settings) as running:
        running.media = media
        yield running


def _post_raw(server, text: str) -> httpx.Response:
    return httpx.post(
        f"{server.url}/v1/audio/speech",
        content=text.encode(),
        headers={"content-type": "application/json"},
        timeout=60,
    )


def test_a_symlink_loop_in_ref_audio_is_a_400(server):
    loop = server.media / "loop.wav"
    loop.symlink_to(loop)
    try:
        response = _post_raw(
            server, MEDIA.replace("{media}", str(server.media)) + 'loop.wav"}'
        )
    finally:
        loop.unlink()
    _assert_error_shape(response, 400, "ref_audio")
    assert "cannot be resolved" in response.json()["error"]["message"]


def _assert_error_shape(response: httpx.Response, status: int, param: str | None) -> None:
    assert response.status_code == status, response.content[:300]
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param, error
    assert len(error["message"]) < 400, error["message"]


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ('{"input": "\\ud800"}', 400, "input"),
        ('{"input": "hi", "instructions": "\\udfff"}', 400, "instructions"),
        ('{"input": "hi", "response_format": []}', 400, "response_format"),
        ('{"input": "hi", "response_format": {}}', 400, "response_format"),
        ('{"input": "hi", "stream_format": []}', 400, "stream_format"),
        (f'{{"input": "hi", "speed": {HUGE}}}', 400, "speed"),
        (f'{{"input": "hi", "temperature": {HUGE}}}', 400, "temperature"),
        (f'{{"input": "hi", "top_p": {HUGE}}}', 400, "top_p"),
        (f'{{"input": "hi", "repetition_penalty": {HUGE}}}', 400, "repetition_penalty"),
        ('{"input": "hi", "seed": ' + "9" * 5000 + "}", 400, "body"),
        ("[" * 100_000 + "]" * 100_000, 400, "body"),
        (MEDIA + 'pass%00wd"}', 400, "ref_audio"),
        (MEDIA + "n" * 300 + '"}', 400, "ref_audio"),
        (MEDIA + "d/" * 3000 + '"}', 400, "ref_audio"),
        ('{"input": "hi", "ref_audio": "file://[::1/x.wav"}', 400, "ref_audio"),
        ('{"input": "hi", "ref_text": "' + "w" * 3000 + '"}', 400, "ref_text"),
        ('{"input": "hi", "voice": "' + "v" * 100_000 + '"}', 404, "voice"),
    ],
    ids=[
        "lone-surrogate-input",
        "lone-surrogate-instructions",
        "format-list",
        "format-object",
        "stream-format-list",
        "huge-speed",
        "huge-temperature",
        "huge-top-p",
        "huge-penalty",
        "5000-digit-integer",
        "deep-nesting",
        "file-uri-nul",
        "file-uri-long-name",
        "file-uri-long-path",
        "file-uri-bad-authority",
        "long-ref-text",
        "long-voice-name",
    ],
)
def test_hostile_bodies_get_json_errors_not_500s(server, body, status, param):
    body = body.replace("{media}", str(server.media))
    _assert_error_shape(_post_raw(server, body), status, param)


def test_the_server_still_speaks_after_hostile_bodies(server):
    assert_speaks(server)


def test_undecodable_clips_do_not_echo_python_objects(server):
    body = {"input": "hi", "ref_audio": base64.b64encode(b"not audio at all").decode()}
    response = httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=60)
    _assert_error_shape(response, 400, "voice")
    assert "object at 0x" not in response.text and "BytesIO" not in response.text


def test_a_long_clip_is_refused_by_its_header_before_it_is_decoded(speaking_tts):
    clip = _clip(300, rate=48000, channels=8, fmt="FLAC")  # 300 s of 8-channel silence
    assert len(clip) < 200_000
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="clips must be 0.5-30 s") as error:
            speaking_tts.prepare("Hi.", voice=clip)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert error.value.param == "voice"
    assert peak < 20 * 1024 * 1024, f"{peak / 2**20:.0f} MiB to refuse a 117 KB file"


def _peak_decoding(clips: list[bytes]) -> int:
    """Traced peak bytes while ``clips`` are loaded at once, one thread each."""
    from mlx_speech.families.reference_audio import load_reference

    def load(clip: bytes) -> None:
        load_reference(clip, sample_rate=48000, channels=1, samples_per_frame=3840)

    tracemalloc.start()
    try:
        threads = [threading.Thread(target=load, args=(clip,)) for clip in clips]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_clips_decoded_at_once_are_bounded_in_memory(monkeypatch):
    from mlx_speech.families import reference_audio

    monkeypatch.setattr(reference_audio, "_decoding", threading.BoundedSemaphore(2))
    clip = _clip(5, rate=384_000, channels=8, fmt="FLAC")  # 123 MB as float samples
    alone = _peak_decoding([clip])
    assert alone < 45 * 2**20, f"{alone / 2**20:.0f} MiB: mixed to mono as it is read"
    together = _peak_decoding([clip] * 5)
    assert together < 2.5 * alone, f"{together / 2**20:.0f} MiB vs {alone / 2**20:.0f}"


def test_no_more_clips_are_decoded_at_once_than_the_bound(monkeypatch):
    from mlx_speech.families import reference_audio

    at_once, most = 0, 0
    counting = threading.Lock()

    def slow_decode(source, channels):
        nonlocal at_once, most
        with counting:
            at_once += 1
            most = max(most, at_once)
        time.sleep(0.1)
        with counting:
            at_once -= 1
        return np.zeros((48000, 1), np.float32), 48000

    monkeypatch.setattr(reference_audio, "_decode", slow_decode)
    load = reference_audio.load_reference
    threads = [
        threading.Thread(
            target=load,
            args=(b"clip",),
            kwargs={"sample_rate": 48000, "channels": 1, "samples_per_frame": 3840},
        )
        for _ in range(reference_audio.DECODES_AT_ONCE + 2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert most == reference_audio.DECODES_AT_ONCE == max(2, os.cpu_count() or 2)


def test_many_channels_are_refused_by_the_header(speaking_tts):
    with pytest.raises(ValueError, match="up to 8 channels"):
        speaking_tts.prepare("Hi.", voice=_clip(1, channels=12))


def test_upload_ref_text_is_bounded(server):
    response = httpx.post(
        f"{server.url}/v1/audio/voices",
        data={"name": "talker", "ref_text": "w" * 15_000},
        files={"audio_sample": ("a.wav", _clip(1), "audio/wav")},
    )
    _assert_error_shape(response, 400, "ref_text")


def test_upload_fields_that_are_not_utf8_are_refused(server):
    fields = {"name": "latin", "ref_text": "caf\xe9".encode("latin-1")}
    response = httpx.post(
        f"{server.url}/v1/audio/voices",
        files={
            "audio_sample": ("a.wav", _clip(1), "audio/wav"),
            **{name: (None, value) for name, value in fields.items()},
        },
    )
    _assert_error_shape(response, 400, "ref_text")
    assert "not UTF-8 text (byte 3)" in response.json()["error"]["message"]
    listed = httpx.get(f"{server.url}/v1/audio/voices").json()["voices"]
    assert "latin" not in [voice["name"] for voice in listed]


def test_every_status_is_counted(server):
    voice = {"audio_sample": ("a.wav", _clip(1), "audio/wav")}
    created = httpx.post(
        f"{server.url}/v1/audio/voices", data={"name": "counted"}, files=voice
    )
    assert created.status_code == 201
    assert httpx.delete(f"{server.url}/v1/audio/voices/counted").status_code == 200
    assert httpx.get(f"{server.url}/nowhere").status_code == 404
    assert httpx.get(f"{server.url}/v1/audio/speech").status_code == 405
    text = httpx.get(f"{server.url}/metrics").text
    for status in (201, 200, 404, 405):
        assert f'mlx_speech_requests_total{{status="{status}"}}' in text, status


def test_an_upload_deleted_at_once_still_answers_with_what_was_written(
    tmp_path, monkeypatch
):
    import mlx_speech.voices.store as voice_store

    store = VoiceStore(tmp_path)
    real_fsync = voice_store._fsync_dir

    def delete_right_after_the_rename(path):
        if path == tmp_path and (tmp_path / "racer").exists():
            store.remove("racer")  # another request's DELETE wins the race
        real_fsync(path)

    monkeypatch.setattr(voice_store, "_fsync_dir", delete_right_after_the_rename)
    voice = store.add("racer", _clip(1), "Hello.")
    assert voice.name == "racer" and voice.ref_text == "Hello."
    assert store.find("racer") is None


def test_a_voice_deleted_mid_request_does_not_leak_the_voices_path(speaking_dir, tmp_path):
    tts = mlx_speech.load(speaking_dir, voices_dir=tmp_path / "voices")
    voice = tts.voice_store.add("gone", _clip(1))
    tts.voice_store.remove("gone")
    with pytest.raises(ValueError) as error:
        tts.prepare("Hi.", voice=voice)
    assert error.value.param == "voice" and "'gone'" in str(error.value)
    assert str(tmp_path) not in str(error.value)


@pytest.mark.parametrize("name", ["temperature", "top_p", "repetition_penalty"])
def test_python_api_huge_numbers_are_value_errors(speaking_tts, name):
    with pytest.raises(ValueError, match=f"{name} must be a finite number") as error:
        speaking_tts.prepare("Hi.", **{name: 10**400})
    assert error.value.param == name and len(str(error.value)) < 200


def test_python_api_max_text_chars_counts_the_text_as_read(speaking_tts, monkeypatch):
    monkeypatch.setattr(speaking_tts, "max_text_chars", 100)
    read_out = "19 characters and more than 100 as it is read out"
    with pytest.raises(ValueError, match=read_out) as error:
        speaking_tts.prepare("1234567 " * 2 + "ok.")
    assert error.value.param == "text"
    speaking_tts.prepare("1234567 " * 2 + "ok.", normalize=False)  # 19 as written
    stream = speaking_tts.stream_text(["1234567. " * 2], max_new_tokens=1)
    with pytest.raises(ValueError, match="passed 100 characters as it is read out"):
        list(stream)


def test_python_api_lone_surrogates_are_value_errors(speaking_tts):
    for field in ("text", "ref_text", "instructions"):
        request = {"text": "Hi.", field: "a\ud800b"}
        with pytest.raises(ValueError, match="not valid Unicode") as error:
            speaking_tts.prepare(request.pop("text"), **request)
        assert error.value.param == field


def test_health_says_why_the_model_failed(tmp_path):
    settings = ServerSettings(model=str(tmp_path / "missing"), voices_dir=tmp_path / "v")
    with RunningServer(settings, wait_until_healthy=False) as running:
        deadline = time.monotonic() + 30
        while (health := httpx.get(f"{running.url}/health").json())["status"] == "loading":
            assert time.monotonic() < deadline
            time.sleep(0.05)
    assert health["status"] == "failed" and "not found" in health["error"]


def _cli_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 1, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_cli_voices_add_reads_no_more_than_a_clip(tmp_path):
    line = _cli_error(
        run("voices", "add", "zeros", "/dev/zero", "--voices-dir", str(tmp_path))
    )
    assert "is not an audio file" in line


def test_cli_refuses_undecodable_text(speaking_dir, tmp_path):
    out = str(tmp_path / "x.wav")
    command = [MLX_SPEECH, "speak", "--model", str(speaking_dir), "-o", out]
    argv = subprocess.run(
        [part.encode() for part in command] + [b"caf\xff"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "text is not valid Unicode" in _cli_error(argv)
    stdin = subprocess.run(
        [*command, "-"], input=b"caf\xff", capture_output=True, timeout=300
    )
    stdin.stderr = stdin.stderr.decode()
    assert "standard input is not UTF-8" in _cli_error(stdin)


def test_cli_speaking_endless_input_whole_stops_at_the_bound(speaking_dir, tmp_path):
    command = [MLX_SPEECH, "speak", "-", "--split", "none", "--model", str(speaking_dir)]
    with open("/dev/zero", "rb") as zeros:
        result = subprocess.run(
            [*command, "-o", str(tmp_path / "x.wav")],
            stdin=zeros,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert "passed 12800 characters before its end" in _cli_error(result)


def test_a_fifo_named_as_a_clip_is_refused_not_waited_on(speaking_dir, tmp_path):
    fifo = tmp_path / "clip.wav"
    os.mkfifo(fifo)  # no writer ever opens it
    out = str(tmp_path / "x.wav")
    result = run(
        "speak", "Hi.", "--model", str(speaking_dir), "--ref-audio", str(fifo), "-o", out
    )
    assert "is not a regular file" in _cli_error(result)


def test_cli_checks_the_output_directory_before_any_work(tmp_path):
    started = time.monotonic()
    line = _cli_error(
        run("speak", "Hi.", "--model", "/nowhere", "-o", str(tmp_path / "no" / "x.wav"))
    )
    assert "its directory does not exist" in line  # not the model's error: checked first
    assert time.monotonic() - started < 60


def test_cli_usage_errors_are_one_line(tmp_path):
    result = run("speak", "Hi.", "--temperature", "warm")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "invalid float value: 'warm'" in result.stderr


def test_cli_has_a_flag_for_every_sampling_keyword(speaking_dir, tmp_path):
    flags = {name for name, _, _ in SAMPLING_FLAGS}
    assert flags == set(SamplingOptions.__dataclass_fields__)
    out = tmp_path / "sampled.wav"
    result = run(
        "speak",
        "Hi.",
        "--model",
        str(speaking_dir),
        "-o",
        str(out),
        "--seed",
        "3",
        "--top-p",
        "0.9",
        "--top-k",
        "5",
        "--repetition-penalty",
        "1.1",
        "--max-new-tokens",
        "3",
    )
    assert result.returncode == 0, result.stderr
    assert len(soundfile.read(out)[0]) == 3 * 960


def test_serve_exits_non_zero_when_the_model_cannot_load(tmp_path):
    result = subprocess.run(
        [
            MLX_SPEECH,
            "serve",
            "--model",
            str(tmp_path / "missing"),
            "--port",
            "0",
            "--voices-dir",
            str(tmp_path / "v"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert "could not load the model" in result.stderr.strip().splitlines()[-1]


def test_a_directory_swapped_for_a_link_between_check_and_open_is_never_followed(
    tmp_path,
):
    """The file:// race: a directory inside the allowed one is exchanged, in a
    loop, with a link to a directory outside it, while its clip is read:
    the outside file is never read (it was, in 94 of 400 requests)."""
    media, outside = tmp_path / "media", tmp_path / "outside"
    (media / "d").mkdir(parents=True)
    outside.mkdir()
    (media / "d" / "clip.wav").write_bytes(b"inside")
    (outside / "clip.wav").write_bytes(b"outside")
    (media / "s").symlink_to(outside)
    read = []
    with Swapping(media / "d", media / "s"):
        for _ in range(3000):
            try:
                read.append(
                    read_local_media(f"{media}/d/clip.wav", media, 100, "ref_audio")
                )
            except ApiError as error:
                assert error.status == 400
    assert b"outside" not in read
    assert b"inside" in read  # the race ran: the inside clip was read too


def test_a_clip_swapped_for_a_fifo_never_blocks_its_reader(tmp_path):
    """A clip exchanged with a FIFO in a loop while it is read: every read
    ends (opened by name after its check, a FIFO blocked the reading thread
    until a writer came; 40 of them held every request's thread)."""
    media = tmp_path / "media"
    media.mkdir()
    clip, pipe = media / "clip.wav", media / "pipe"
    clip.write_bytes(b"clip")
    os.mkfifo(pipe)
    done = threading.Event()

    def reads() -> None:
        for _ in range(3000):
            try:
                read_local_media(str(clip), media, 100, "ref_audio")
            except ApiError as error:
                assert error.status == 400
        done.set()

    with Swapping(clip, pipe):
        threading.Thread(target=reads, daemon=True).start()
        assert done.wait(60), "a read is blocked opening the FIFO"


def test_a_model_name_cannot_forge_or_flood_the_log(server, caplog):
    """``model`` is logged as sent: quoted, its newlines escaped and cut
    short (a newline forged a log line; 5 MB of name wrote 5 MB of log)."""
    forged = "tts-1\n2026-01-01 00:00:00 mlx_speech.server saved voice admin"
    with caplog.at_level(logging.DEBUG, logger="mlx_speech.server"):
        for model in (forged, "m" * 5_000_000):
            body = {"input": "Hi.", "model": model, "max_new_tokens": 1}
            response = httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=60)
            assert response.status_code == 200
    lines = [
        record.getMessage()
        for record in caplog.records
        if record.getMessage().startswith("speech: model=")
    ]
    assert len(lines) == 2
    assert all("\n" not in line and len(line) < 300 for line in lines)
    assert "saved voice admin" in lines[0]  # shown, escaped, on the request's own line


def test_a_wrong_method_is_told_the_allowed_ones(server):
    response = httpx.get(f"{server.url}/v1/audio/speech")
    assert response.status_code == 405 and response.headers["allow"] == "POST"
    assert response.json()["error"]["type"] == "invalid_request_error"


def test_the_socket_route_asked_over_http_says_how_to_connect(server):
    response = httpx.get(f"{server.url}/v1/audio/speech/stream")
    _assert_error_shape(response, 426, None)
    assert "connect with ws://" in response.json()["error"]["message"]
    assert response.headers["upgrade"] == "websocket"


def _raw_answer(server, request: bytes) -> tuple[str, dict]:
    """(status line, JSON body) of the server's answer to raw ``request`` bytes."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(request)
        received = b""
        while part := sock.recv(4096):
            received += part
    head, _, body = received.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in head.lower(), head
    return head.split(b"\r\n")[0].decode(), json.loads(body)


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"NOT HTTP AT ALL\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header\r\n\r\n", 400),
        (  # an upgrade without Sec-WebSocket-Key
            b"GET /v1/audio/speech/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Upgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
            400,
        ),
    ],
    ids=["request-line", "header", "websocket-handshake"],
)
def test_protocol_errors_are_json(server, request_bytes, status):
    status_line, body = _raw_answer(server, request_bytes)
    assert status_line.startswith(f"HTTP/1.1 {status} "), status_line
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert len(body["error"]["message"]) < 200


def test_no_other_site_may_frame_the_page(server):
    """Clickjacking: the page refuses to be framed by other origins."""
    for path in ("/", "/page/page.js"):
        headers = httpx.get(f"{server.url}{path}").headers
        assert "frame-ancestors 'self'" in headers["content-security-policy"]
        assert headers["x-frame-options"] == "SAMEORIGIN"


def test_the_input_limit_counts_characters_as_the_model_reads_them(server):
    digits = ("1234567 " * 500)[:4000]  # within the limit as written, 37,000 read out
    body = {"input": digits, "max_new_tokens": 1, "response_format": "pcm"}
    response = httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=60)
    _assert_error_shape(response, 400, "input")
    message = response.json()["error"]["message"]
    assert "4000 characters and more than 4096 as it is read out" in message
    as_written = httpx.post(
        f"{server.url}/v1/audio/speech", json={**body, "normalize": False}, timeout=120
    )
    assert as_written.status_code == 200 and as_written.content
