"""The request patterns of the clients people already run, unmodified, against
a real server: the OpenAI SDK, vLLM-Omni's documented bodies, Open WebUI's
discovery and speech calls, Kokoro-FastAPI's README calls. Every answer is
read by a real decoder."""

from __future__ import annotations

import asyncio
import base64
import json

import httpx
import pytest

from mlx_speech.server import ServerSettings
from tests.tts.support.decoding import decode
from tests.tts.support.server import RunningServer

pytestmark = pytest.mark.slow  # real servers and real clients

openai = pytest.importorskip("openai")

FRAME = 960  # samples per frame of the tiny codec at 48 kHz
BUDGET = {"max_new_tokens": 6}  # keeps each call short; not something clients send


@pytest.fixture(scope="module")
def server(speaking_dir, nano_backend, tmp_path_factory):
    settings = ServerSettings(
        model=str(speaking_dir),
        voices_dir=tmp_path_factory.mktemp("client-voices"),
        voice_aliases=(("af_bella", "default"),),  # a Kokoro user's mapping
        backend=nano_backend,
    )
    with RunningServer(settings) as running:
        yield running


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="local")


def test_openai_sdk_plain_create_gets_mp3_with_alloy(client):
    response = client.audio.speech.create(
        model="tts-1", voice="alloy", input="Hello!", extra_body=BUDGET
    )
    samples, rate = decode(response.content, "mp3")
    assert rate == 48000 and len(samples) >= 6 * FRAME


def test_openai_sdk_instructions_for_gpt_4o_mini_tts_are_ignored_and_said(client):
    with client.audio.speech.with_streaming_response.create(
        model="gpt-4o-mini-tts",
        voice="coral",
        input="Hello!",
        instructions="Speak in a cheerful tone.",
        response_format="wav",
        extra_body=BUDGET,
    ) as response:
        assert response.headers["x-mlx-speech-ignored"] == "instructions"
        data = response.read()
    assert len(decode(data, "wav")[0]) == 6 * FRAME


def test_openai_sdk_sse_events(client):
    with client.audio.speech.with_streaming_response.create(
        model="tts-1",
        voice="alloy",
        input="Hello!",
        response_format="pcm",
        stream_format="sse",
        extra_body=BUDGET,
    ) as response:
        events = [
            json.loads(line.removeprefix("data: "))
            for line in response.iter_lines()
            if line.startswith("data: ")
        ]
    assert events[-1]["type"] == "speech.audio.done"
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    assert len(pcm) == 6 * (FRAME // 2) * 2  # 24 kHz, as the SDK's player expects


def test_openai_async_sdk_streams_bytes(server):
    async def speak() -> bytes:
        client = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="local")
        async with client.audio.speech.with_streaming_response.create(
            model="tts-1",
            voice="nova",
            input="Hi!",
            response_format="opus",
            extra_body=BUDGET,
        ) as response:
            return b"".join([chunk async for chunk in response.iter_bytes()])

    samples, rate = decode(asyncio.run(speak()), "opus")
    assert rate == 48000 and len(samples) == 6 * FRAME


def test_openai_sdk_custom_voices_create_use_and_delete(client, reference_clip):
    with open(reference_clip, "rb") as clip:
        voice = client.audio.voices.create(name="zoe", audio_sample=clip, consent="cons_1")
    assert (voice.id, voice.name, voice.object, voice.type) == (
        "zoe",
        "zoe",
        "audio.voice",
        "audio_sample",
    )
    response = client.audio.speech.create(
        model="tts-1", voice="zoe", input="Hi!", response_format="flac", extra_body=BUDGET
    )
    assert len(decode(response.content, "flac")[0]) == 6 * FRAME
    deleted = client.audio.voices.delete("zoe")
    assert (deleted.id, deleted.deleted, deleted.object) == (
        "zoe",
        True,
        "audio.voice.deleted",
    )


def test_vllm_omni_docs_bodies(server, reference_clip):
    clip = base64.b64encode(reference_clip.read_bytes()).decode()
    speech = f"{server.url}/v1/audio/speech"
    plain = httpx.post(
        speech,
        json={
            "input": "Hello, how are you?",
            "voice": "default",
            "language": "English",
            "response_format": "wav",
            **BUDGET,
        },
        timeout=60,
    )
    assert len(decode(plain.content, "wav")[0]) == 6 * FRAME
    cloned = httpx.post(
        speech,
        json={
            "input": "Hello, this is a cloned voice",
            "task_type": "Base",
            "ref_audio": f"data:audio/wav;base64,{clip}",
            "ref_text": "Original transcript of the reference audio",
            "response_format": "pcm",
            "stream": False,
            "language": "Auto",
            **BUDGET,
        },
        timeout=60,
    )
    assert cloned.headers["x-audio-sample-rate"] == "24000"
    assert len(cloned.content) == 6 * (FRAME // 2) * 2
    with httpx.stream(
        "POST",
        speech,
        json={
            "input": "Streaming, please.",
            "response_format": "pcm",
            "stream": True,
            **BUDGET,
        },
        timeout=60,
    ) as events:
        assert events.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in events.iter_lines() if line.startswith("data: ")]
    assert json.loads(lines[-1][6:])["type"] == "speech.audio.done"


def test_open_webui_discovers_models_and_voices_then_speaks(server):
    models = httpx.get(f"{server.url}/v1/audio/models").json()["models"]
    voices = httpx.get(f"{server.url}/v1/audio/voices").json()["voices"]
    assert models[0]["id"] and all(voice["id"] and voice["name"] for voice in voices)
    response = httpx.post(
        f"{server.url}/v1/audio/speech",
        json={"model": models[0]["id"], "input": "Hello!", "voice": "alloy", **BUDGET},
        timeout=60,
    )
    assert response.headers["content-type"] == "audio/mpeg"  # stored as .mp3
    assert decode(response.content, "mp3")[1] == 48000


def test_kokoro_readme_calls(client, server):
    response = client.audio.speech.create(
        model="kokoro",
        voice="af_bella",
        input="Hello world!",
        response_format="mp3",
        speed=1.0,
        extra_body=BUDGET,
    )
    assert decode(response.content, "mp3")[1] == 48000
    with httpx.stream(
        "POST",
        f"{server.url}/v1/audio/speech",
        json={
            "input": "Hello world!",
            "voice": "af_bella",
            "response_format": "pcm",
            **BUDGET,
        },
        timeout=60,
    ) as streamed:
        pcm = b"".join(streamed.iter_bytes())
    assert len(pcm) == 6 * (FRAME // 2) * 2
    unknown = httpx.post(
        f"{server.url}/v1/audio/speech", json={"input": "Hi", "voice": "af_sky"}, timeout=60
    )
    assert unknown.status_code == 404
    assert "GET /v1/audio/voices" in unknown.json()["error"]["message"]


def _open_webui_voices(base_url: str) -> dict[str, str]:
    """Open WebUI's listing of a custom OpenAI endpoint's voices: a GET with no
    key, and OpenAI's six voices when that fails."""
    try:
        response = httpx.get(f"{base_url}/audio/voices")
        response.raise_for_status()
        return {voice["id"]: voice["name"] for voice in response.json()["voices"]}
    except httpx.HTTPError:
        openai_voices = ("alloy", "echo", "fable", "onyx", "nova", "shimmer")
        return {name: name for name in openai_voices}


@pytest.mark.parametrize("public_listings", [False, True], ids=["guarded", "public"])
def test_open_webui_lists_saved_voices_behind_a_key(
    speaking_dir, nano_backend, tmp_path, reference_clip, public_listings
):
    settings = ServerSettings(
        model=str(speaking_dir),
        voices_dir=tmp_path,
        api_key="s3cret",
        public_listings=public_listings,
        backend=nano_backend,
    )
    with RunningServer(settings) as running:
        base_url = f"{running.url}/v1"
        keyed = openai.OpenAI(base_url=base_url, api_key="s3cret")
        with open(reference_clip, "rb") as clip:
            keyed.audio.voices.create(name="zoe", audio_sample=clip, consent="cons_1")
        voices = _open_webui_voices(base_url)
        assert ("zoe" in voices) == public_listings
        assert (httpx.get(f"{base_url}/audio/models").status_code == 200) == public_listings
        assert (httpx.get(f"{base_url}/models").status_code == 200) == public_listings
        # Everything but reading the listings still needs the key.
        without_key = openai.OpenAI(base_url=base_url, api_key="wrong")
        with pytest.raises(openai.AuthenticationError):
            without_key.audio.speech.create(model="tts-1", voice="zoe", input="Hi!")
        with open(reference_clip, "rb") as clip:
            with pytest.raises(openai.AuthenticationError):
                without_key.audio.voices.create(name="eve", audio_sample=clip, consent="c")
        assert httpx.delete(f"{base_url}/audio/voices/zoe").status_code == 401
        response = keyed.audio.speech.create(
            model="tts-1",
            voice="zoe",
            input="Hi!",
            response_format="wav",
            extra_body=BUDGET,
        )
        assert len(decode(response.content, "wav")[0]) == 6 * FRAME
