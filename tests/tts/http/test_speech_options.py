"""``speed``, ``normalize`` and ``channels`` on every surface: HTTP,
WebSocket, Python, CLI."""

from __future__ import annotations

import base64
import io
import json

import httpx
import numpy as np
import pytest
import soundfile
from websockets.sync.client import connect

from mlx_speech.server import ServerSettings
from tests.tts.support.cli import run
from tests.tts.support.decoding import decode, decode_channels
from tests.tts.support.server import RunningServer
from tests.tts.support.socket_client import socket_pcm

pytestmark = pytest.mark.slow  # real servers and the command

FRAME = 960  # samples per frame of the tiny codec at 48 kHz
GREEDY = {"temperature": 0, "max_new_tokens": 20}
# Sampled, so the codes depend on the text the model is given.
SAMPLED = {"temperature": 1.0, "seed": 11, "max_new_tokens": 20}
WRITTEN = "I paid $3.50 on 3/4, 25% off."
SPOKEN = "I paid three dollars and fifty cents on three quarters, twenty five percent off."


@pytest.fixture(scope="module")
def server(speaking_dir, tmp_path_factory):
    settings = ServerSettings(
        model=str(speaking_dir), voices_dir=tmp_path_factory.mktemp("options-voices")
    )
    with RunningServer(settings) as running:
        yield running


@pytest.fixture(scope="module")
def plain_server(speaking_dir, tmp_path_factory):
    """A server started with --no-normalize's setting."""
    settings = ServerSettings(
        model=str(speaking_dir),
        voices_dir=tmp_path_factory.mktemp("plain-voices"),
        normalize=False,
    )
    with RunningServer(settings) as running:
        yield running


def speech(server, **body) -> httpx.Response:
    body.setdefault("input", "Hello there.")
    body.setdefault("response_format", "pcm")
    body.setdefault("sample_rate", 48000)
    response = httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=120)
    assert response.status_code == 200, response.text
    return response


def pcm(response: httpx.Response) -> np.ndarray:
    return np.frombuffer(response.content, "<i2")


# speed


def test_speed_one_is_bit_identical_to_no_speed(server):
    assert speech(server, **GREEDY).content == speech(server, speed=1.0, **GREEDY).content


@pytest.mark.parametrize("speed", [0.5, 2.0, 4.0])
def test_speed_scales_the_duration(server, speed):
    samples = pcm(speech(server, speed=speed, **GREEDY))
    assert len(samples) == round(20 * FRAME / speed)


def test_streamed_speed_equals_buffered(server):
    streamed = speech(server, speed=1.5, **GREEDY)
    buffered = speech(server, speed=1.5, stream=False, **GREEDY)
    assert "content-length" not in streamed.headers
    assert streamed.content == buffered.content


@pytest.mark.parametrize("response_format", ["mp3", "opus", "aac", "flac", "wav", "pcm"])
def test_every_format_carries_stretched_audio(server, response_format):
    rate = 24000 if response_format == "pcm" else 48000
    body = {"response_format": response_format, "speed": 2.0, **GREEDY}
    if response_format == "pcm":
        body["sample_rate"] = 24000
    samples, found = decode(speech(server, **body).content, response_format, rate)
    assert found == rate
    expected = 20 * FRAME / 2 * rate / 48000
    slack = {"mp3": 4000, "aac": 3 * 1024}.get(response_format, 0)
    assert expected <= len(samples) <= expected + slack


def test_sse_carries_stretched_audio(server):
    response = speech(server, speed=2.0, stream=True, **GREEDY)
    events = [
        json.loads(line[6:])
        for line in response.text.splitlines()
        if line.startswith("data: ")
    ]
    total = sum(len(base64.b64decode(e["audio"])) for e in events if e.get("audio"))
    assert total == 2 * round(20 * FRAME / 2)


# normalization


def test_the_model_is_given_the_normalized_text(server):
    normalized = pcm(speech(server, input=WRITTEN, **SAMPLED))
    as_spoken = pcm(speech(server, input=SPOKEN, normalize=False, **SAMPLED))
    as_written = pcm(speech(server, input=WRITTEN, normalize=False, **SAMPLED))
    np.testing.assert_array_equal(normalized, as_spoken)
    assert not np.array_equal(normalized, as_written)


def test_kokoro_clients_turn_it_off_their_way(server):
    kokoro = speech(
        server, input=WRITTEN, normalization_options={"normalize": False}, **SAMPLED
    )
    ours = speech(server, input=WRITTEN, normalize=False, **SAMPLED)
    assert kokoro.content == ours.content
    both = speech(
        server,
        input=WRITTEN,
        normalize=True,
        normalization_options={"normalize": False},
        **SAMPLED,
    )
    assert both.content == speech(server, input=WRITTEN, **SAMPLED).content  # ours wins


def test_the_server_default_can_be_off(plain_server, server):
    off = speech(plain_server, input=WRITTEN, **SAMPLED)
    on_request = speech(plain_server, input=WRITTEN, normalize=True, **SAMPLED)
    assert off.content == speech(server, input=WRITTEN, normalize=False, **SAMPLED).content
    assert on_request.content == speech(server, input=WRITTEN, **SAMPLED).content


def test_normalization_cost_is_in_metrics(server):
    def counters():
        text = httpx.get(f"{server.url}/metrics").text
        values = dict(
            line.split(" ") for line in text.splitlines() if not line.startswith("#")
        )
        return (
            float(values["mlx_speech_text_normalizations_total"]),
            float(values["mlx_speech_text_normalization_seconds_total"]),
        )

    count, seconds = counters()
    speech(server, input=WRITTEN, max_new_tokens=2)
    later_count, later_seconds = counters()
    assert later_count == count + 1
    assert later_seconds > seconds


# WebSocket


def _socket_audio(server, text: str = "Hello there.", **config) -> bytes:
    config = {"response_format": "pcm", **config}
    return socket_pcm(server, config, [text], timeout=120)


def test_socket_config_takes_speed(server):
    normal = _socket_audio(server, sample_rate=48000, **GREEDY)
    fast = _socket_audio(server, sample_rate=48000, speed=2.0, **GREEDY)
    assert len(normal) == 2 * 20 * FRAME
    assert len(fast) == 2 * round(20 * FRAME / 2)
    assert fast == speech(server, speed=2.0, **GREEDY).content


def test_socket_config_takes_normalize(server):
    as_written = speech(server, input=WRITTEN, normalize=False, **SAMPLED).content
    assert (
        _socket_audio(server, text=WRITTEN, normalize=False, sample_rate=48000, **SAMPLED)
        == as_written
    )


# Python


def test_python_speed_and_normalize(speaking_tts):
    normal = speaking_tts.speak("Hello there.", **GREEDY)
    slow = speaking_tts.speak("Hello there.", speed=0.5, **GREEDY)
    assert len(slow.samples) == 2 * len(normal.samples)
    chunks = list(speaking_tts.stream("Hello there.", speed=0.5, **GREEDY))
    np.testing.assert_array_equal(np.concatenate([c.samples for c in chunks]), slow.samples)
    spoken = speaking_tts.speak(SPOKEN, normalize=False, **SAMPLED)
    np.testing.assert_array_equal(
        speaking_tts.speak(WRITTEN, **SAMPLED).samples, spoken.samples
    )
    assert speaking_tts.normalized("25% off") == "twenty five percent off."


def test_python_text_stream_takes_speed(speaking_tts):
    stream = speaking_tts.stream_text(
        iter(["Hello there. ", "Bye now."]), speed=2.0, **GREEDY
    )
    total = sum(len(chunk.samples) for chunk in stream)
    assert total == 2 * round(20 * FRAME / 2)


def test_python_refuses_bad_values(speaking_tts):
    with pytest.raises(ValueError, match="speed must be in"):
        speaking_tts.stream("Hi.", speed=5)
    with pytest.raises(ValueError, match="speed must be in"):
        speaking_tts.stream_text(iter(["Hi."]), speed=0.1)
    with pytest.raises(ValueError, match="normalize must be true or false"):
        speaking_tts.speak("Hi.", normalize="no")


# CLI


def test_cli_normalize_prints_what_the_model_is_given():
    done = run("normalize", WRITTEN)
    assert done.returncode == 0, done.stderr
    assert done.stdout == SPOKEN + "\n"
    chinese = run("normalize", "-", "--language", "zh", stdin="2024年3月5日")
    assert chinese.stdout == "二零二四年三月五日。\n"
    kept = run("normalize", "It costs $5", "--language", "de")
    assert kept.stdout == "It costs $5.\n"
    empty = run("normalize", "  ")
    assert empty.returncode == 1 and "text must be a non-empty string" in empty.stderr


def test_cli_speak_takes_speed_and_no_normalize(speaking_dir, tmp_path):
    out = tmp_path / "fast.wav"
    done = run(
        "speak",
        "Hello there.",
        "--model",
        str(speaking_dir),
        "-o",
        str(out),
        "--speed",
        "2",
        "--temperature",
        "0",
        "--max-new-tokens",
        "20",
    )
    assert done.returncode == 0, done.stderr
    assert soundfile.info(str(out)).frames == round(20 * FRAME / 2)
    plain = tmp_path / "plain.wav"
    written = tmp_path / "written.wav"
    flags = [
        "--model",
        str(speaking_dir),
        "--temperature",
        "1",
        "--seed",
        "11",
        "--max-new-tokens",
        "20",
    ]
    assert run("speak", SPOKEN, "-o", str(plain), "--no-normalize", *flags).returncode == 0
    assert run("speak", WRITTEN, "-o", str(written), *flags).returncode == 0
    np.testing.assert_array_equal(
        soundfile.read(str(plain))[0], soundfile.read(str(written))[0]
    )
    bad = run("speak", "Hi.", "--model", str(speaking_dir), "--speed", "9")
    assert bad.returncode == 1 and "speed must be in 0.25..4.0" in bad.stderr


# channels


def test_python_gives_the_codec_channels(speaking_tts):
    assert speaking_tts.channels == 2
    mono = speaking_tts.speak("Hello there.", **GREEDY)
    stereo = speaking_tts.speak("Hello there.", channels=2, **GREEDY)
    assert stereo.samples.shape == (len(mono.samples), 2) and stereo.channels == 2
    np.testing.assert_array_equal(
        stereo.samples.mean(axis=1, dtype=np.float32), mono.samples
    )
    assert not np.array_equal(stereo.samples[:, 0], stereo.samples[:, 1])
    chunks = list(speaking_tts.stream("Hello there.", channels=2, **GREEDY))
    np.testing.assert_array_equal(
        np.concatenate([c.samples for c in chunks]), stereo.samples
    )
    fast = speaking_tts.speak("Hello there.", channels=2, speed=2.0, **GREEDY)
    assert fast.samples.shape == (round(len(mono.samples) / 2), 2)
    with pytest.raises(ValueError, match=r"channels 1 \(mono\) or 2"):
        speaking_tts.speak("Hello there.", channels=3)
    with pytest.raises(ValueError, match="channels"):
        speaking_tts.speak("Hello there.", channels=True)


def test_mono_families_refuse_stereo(qwen3_tts, voxcpm2_tts):
    assert qwen3_tts["custom_voice"].channels == 1
    with pytest.raises(ValueError, match=r"Qwen3-TTS gives channels 1 \(mono\); got 2"):
        qwen3_tts["custom_voice"].stream("Hi.", voice="ryan", channels=2)
    with pytest.raises(ValueError, match=r"VoxCPM2 gives channels 1 \(mono\); got 2"):
        voxcpm2_tts.stream("Hi.", channels=2)


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "buffered"])
@pytest.mark.parametrize("response_format", ["mp3", "opus", "aac", "flac", "wav", "pcm"])
def test_every_format_carries_two_channels(server, response_format, stream):
    body = {"response_format": response_format, "channels": 2, **GREEDY}
    if not stream:
        body["stream"] = False
    response = speech(server, **body)
    assert response.headers["x-audio-channels"] == "2"
    samples, rate = decode_channels(response.content, response_format, 2, 48000)
    assert rate == 48000
    slack = {"mp3": 4000, "aac": 3 * 1024}.get(response_format, 0)
    assert 20 * FRAME <= len(samples) <= 20 * FRAME + slack
    if response_format in ("wav", "flac", "pcm"):
        mono = decode(
            speech(server, response_format=response_format, **GREEDY).content,
            response_format,
            48000,
        )[0]
        unclipped = np.all(np.abs(samples) < 0.999, axis=1)  # 16 bits clip each channel
        np.testing.assert_allclose(
            samples.mean(axis=1)[unclipped], mono[unclipped], atol=1 / 32768
        )


def test_resampled_stereo_pcm(server):
    response = speech(server, channels=2, sample_rate=24000, speed=1.5, **GREEDY)
    assert len(response.content) == 2 * 2 * round(round(20 * FRAME / 1.5) / 2)


def test_socket_config_takes_channels(server):
    url = server.url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    with connect(url) as ws:
        config = {
            "type": "session.config",
            "response_format": "wav",
            "channels": 2,
            **GREEDY,
        }
        ws.send(json.dumps(config))
        ws.send(json.dumps({"type": "input.text", "text": "Hello there."}))
        ws.send(json.dumps({"type": "input.done"}))
        start = json.loads(ws.recv(timeout=120))
        body = ws.recv(timeout=120)
    assert start["type"] == "audio.start" and start["channels"] == 2
    assert soundfile.info(io.BytesIO(body)).channels == 2


def test_cli_speak_takes_channels(speaking_dir, tmp_path):
    out = tmp_path / "stereo.flac"
    flags = ["--model", str(speaking_dir), "--temperature", "0", "--max-new-tokens", "20"]
    done = run("speak", "Hello there.", "-o", str(out), "--channels", "2", *flags)
    assert done.returncode == 0, done.stderr
    assert soundfile.info(str(out)).channels == 2


def test_every_family_takes_speed(qwen3_tts, voxcpm2_tts):
    speakers = [
        (qwen3_tts["custom_voice"], {"voice": "ryan", "max_new_tokens": 8}),
        (voxcpm2_tts, {"max_new_tokens": 4}),
    ]
    for tts, options in speakers:
        normal = tts.speak("Hello there.", seed=2, **options)
        fast = tts.speak("Hello there.", seed=2, speed=2.0, **options)
        assert len(fast.samples) == round(len(normal.samples) / 2)
        normalized = tts.speak("It costs $5.", seed=2, **options)
        spoken = tts.speak("It costs five dollars.", seed=2, normalize=False, **options)
        np.testing.assert_array_equal(normalized.samples, spoken.samples)
