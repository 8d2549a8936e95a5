"""Qwen3-TTS (each kind) and VoxCPM2 over HTTP (streamed and buffered, the
OpenAI SDK) and the CLI, at each family's sample rate."""

from __future__ import annotations

import base64
import io

import httpx
import numpy as np
import pytest
import soundfile

from mlx_speech.server import ServerSettings
from mlx_speech.testing.qwen3_checkpoint import SAMPLES_PER_FRAME
from tests.tts.support.cli import run
from tests.tts.support.server import RunningServer

pytestmark = pytest.mark.slow  # real servers, every family

TEXT = "Hello world."
CHECKPOINTS = ["custom_voice", "voice_design", "base", "voxcpm2"]
RATES = {"custom_voice": 24000, "voice_design": 24000, "base": 24000, "voxcpm2": 48000}


def _clip_wav(rate: int, seconds: float = 1.5) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    buffer = io.BytesIO()
    soundfile.write(buffer, 0.3 * np.sin(2 * np.pi * 200 * t), rate, format="WAV")
    return buffer.getvalue()


def _voice_fields(kind: str) -> dict:
    """A request body's voice part that each checkpoint accepts."""
    if kind == "custom_voice":
        return {"voice": "Ryan", "instructions": "Cheerful."}
    if kind == "voice_design":
        return {"instructions": "A calm, low voice."}
    if kind == "base":
        clip = base64.b64encode(_clip_wav(24000)).decode()
        return {"ref_audio": clip, "ref_text": "This is my voice."}
    return {"voice": "default"}


@pytest.fixture(scope="module")
def checkpoint_dirs(qwen3_dirs, voxcpm2_dir):
    return {**qwen3_dirs, "voxcpm2": voxcpm2_dir}


@pytest.fixture(scope="module")
def servers(checkpoint_dirs, tmp_path_factory):
    running = {}
    try:
        for kind, path in checkpoint_dirs.items():
            settings = ServerSettings(
                model=str(path), voices_dir=tmp_path_factory.mktemp(f"voices-{kind}")
            )
            running[kind] = RunningServer(settings).__enter__()
        yield running
    finally:
        for server in running.values():
            server.__exit__(None, None, None)


def _speech(server, **body):
    body.setdefault("input", TEXT)
    body.setdefault("response_format", "wav")
    return httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=120)


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "buffered"])
@pytest.mark.parametrize("kind", CHECKPOINTS)
def test_http_speaks_at_the_family_rate(servers, kind, stream):
    response = _speech(
        servers[kind],
        seed=3,
        max_new_tokens=12,
        **({} if stream else {"stream": False}),
        **_voice_fields(kind),
    )
    assert response.status_code == 200, response.text
    assert response.headers["x-audio-sample-rate"] == str(RATES[kind])
    samples, rate = soundfile.read(io.BytesIO(response.content), dtype="float32")
    assert rate == RATES[kind] and len(samples) > 0
    if kind != "voxcpm2":
        assert len(samples) == 12 * SAMPLES_PER_FRAME


@pytest.mark.parametrize("kind", CHECKPOINTS)
def test_every_family_takes_a_pace(servers, kind):
    """``speed`` time-stretches any family's audio: 1/speed of its length."""
    lengths = []
    for speed in (1.0, 2.0):
        response = _speech(
            servers[kind],
            seed=3,
            max_new_tokens=12,
            speed=speed,
            response_format="pcm",
            **_voice_fields(kind),
        )
        assert response.status_code == 200, response.text
        lengths.append(len(response.content) // 2)
    assert lengths[1] == round(lengths[0] / 2.0) and lengths[0] > 0


def test_streamed_and_buffered_bodies_carry_the_same_audio(servers):
    bodies = [
        _speech(
            servers["custom_voice"],
            seed=4,
            max_new_tokens=12,
            response_format="pcm",
            voice="vivian",
            **delivery,
        ).content
        for delivery in ({}, {"stream": False})
    ]
    assert bodies[0] == bodies[1]


def test_presets_and_metadata(servers, checkpoint_dirs):
    voices = httpx.get(f"{servers['custom_voice'].url}/v1/audio/voices").json()["voices"]
    assert [voice["id"] for voice in voices] == ["default", "vivian", "ryan", "dylan"]
    assert [voice["kind"] for voice in voices] == ["default", "preset", "preset", "preset"]
    for kind, server in servers.items():
        model = httpx.get(f"{server.url}/v1/models").json()["data"][0]
        assert model["family"] == ("voxcpm2" if kind == "voxcpm2" else "qwen3_tts")
        assert model["sample_rate"] == RATES[kind]
        assert model["streaming"] == "incremental"


@pytest.mark.parametrize(
    ("kind", "body", "param"),
    [
        ("custom_voice", {"voice": "nobody"}, "voice"),
        ("custom_voice", {"voice": "ryan", "language": "klingon"}, "language"),
        ("voice_design", {}, "instructions"),
        ("base", {"instructions": "Happy."}, "instructions"),
        ("voxcpm2", {"temperature": 0.7}, "temperature"),
        ("voxcpm2", {"language": "klingon"}, "language"),
        ("voxcpm2", {"speed": 4.5}, "speed"),
    ],
)
def test_refusals_name_the_field(servers, kind, body, param):
    response = _speech(servers[kind], **body)
    assert response.status_code in (400, 404), response.text
    assert response.json()["error"]["param"] == param
    assert (
        _speech(servers[kind], max_new_tokens=2, **_voice_fields(kind)).status_code == 200
    )


def test_base_clone_without_a_transcript_is_a_400(servers):
    clip = base64.b64encode(_clip_wav(24000)).decode()
    response = _speech(servers["base"], ref_audio=clip)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "ref_text"


def test_a_preset_name_cannot_be_saved_over(servers):
    added = httpx.post(
        f"{servers['custom_voice'].url}/v1/audio/voices",
        data={"name": "Vivian"},
        files={"audio_sample": ("clip.wav", _clip_wav(44100), "audio/wav")},
    )
    assert added.status_code == 409
    assert added.json()["error"]["message"] == "'Vivian' is a preset voice of this model"


def test_saved_voice_clones_with_its_transcript_over_http(servers):
    server = servers["base"]
    added = httpx.post(
        f"{server.url}/v1/audio/voices",
        data={"name": "narrator", "ref_text": "This is my voice."},
        files={"audio_sample": ("clip.wav", _clip_wav(44100), "audio/wav")},
    )
    assert added.status_code == 201, added.text
    response = _speech(server, voice="narrator", max_new_tokens=5, seed=1)
    assert response.status_code == 200, response.text
    samples, _ = soundfile.read(io.BytesIO(response.content))
    assert len(samples) == 5 * SAMPLES_PER_FRAME


@pytest.mark.parametrize("kind", ["custom_voice", "voice_design", "base", "voxcpm2"])
def test_openai_sdk_streams_each_kind(servers, kind, tmp_path):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=f"{servers[kind].url}/v1", api_key="local")
    fields = _voice_fields(kind)
    extra = {"max_new_tokens": 8, "seed": 2}
    extra.update({k: v for k, v in fields.items() if k in ("ref_audio", "ref_text")})
    target = tmp_path / "speech.wav"
    with client.audio.speech.with_streaming_response.create(
        model="tts-1",
        voice=fields.get("voice", "default"),
        input=TEXT,
        response_format="wav",
        **({"instructions": fields["instructions"]} if "instructions" in fields else {}),
        extra_body=extra,
    ) as response:
        response.stream_to_file(target)
    samples, rate = soundfile.read(target)
    assert rate == RATES[kind] and len(samples) > 0


@pytest.mark.parametrize("kind", CHECKPOINTS)
def test_cli_speaks_each_kind(checkpoint_dirs, kind, tmp_path):
    out = tmp_path / "out.wav"
    args = ["speak", TEXT, "--model", str(checkpoint_dirs[kind]), "-o", str(out)]
    args += ["--max-new-tokens", "6", "--seed", "1"]
    if kind == "custom_voice":
        args += ["--voice", "dylan", "--language", "english"]
    if kind == "voice_design":
        args += ["--instructions", "A bright voice."]
    if kind == "base":
        clip = tmp_path / "me.wav"
        clip.write_bytes(_clip_wav(24000))
        args += ["--ref-audio", str(clip), "--ref-text", "This is my voice."]
    result = run(*args)
    assert result.returncode == 0, result.stderr
    samples, rate = soundfile.read(out)
    assert rate == RATES[kind] and len(samples) > 0


def test_cli_refusal_is_one_line(checkpoint_dirs, tmp_path):
    result = run(
        "speak",
        TEXT,
        "--model",
        str(checkpoint_dirs["voice_design"]),
        "-o",
        str(tmp_path / "x.wav"),
    )
    assert result.returncode != 0
    assert "instructions" in result.stderr and len(result.stderr.strip().splitlines()) == 1
