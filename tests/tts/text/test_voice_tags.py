"""Kokoro-FastAPI's voice tags ([voice:NAME]): a change of speaker, never
said, on every surface that takes pause tags; its voice mixes refused."""

from __future__ import annotations

import base64

import httpx
import numpy as np
import pytest
import soundfile
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop

import mlx_speech
from mlx_speech.audio.joins import edge_samples
from mlx_speech.server import ServerSettings
from mlx_speech.speech.opening import Opener
from mlx_speech.text.pauses import Pause
from mlx_speech.text.tags import VoiceChange, split_tags
from tests.tts.support.cli import run
from tests.tts.support.server import RunningServer
from tests.tts.support.silence import assert_joined, wyoming_pcm
from tests.tts.support.socket_client import socket_pcm

SHORT = {"max_new_tokens": 4, "seed": 3}
RATE = 48000
TAGGED = "Hello Bob. [voice:grandma] Hi Alice!"
AS_SSML = '<speak>Hello Bob. <voice name="grandma">Hi Alice!</voice></speak>'


def test_tags_cut_the_text_into_parts_pauses_and_voices():
    assert split_tags("A [voice:af_bella] b [pause:1s][VOICE : Am_Michael ]c") == [
        "A ",
        VoiceChange("af_bella"),
        " b ",
        Pause(1.0),
        VoiceChange("Am_Michael"),
        "c",
    ]
    assert split_tags("[voice:af_bella(2)+af_sky] x") == [
        VoiceChange("af_bella(2)+af_sky"),
        " x",
    ]
    assert split_tags("not [voice:] a [voice tag]") == ["not [voice:] a [voice tag]"]


@pytest.fixture(scope="module")
def voiced_tts(speaking_dir, nano_backend, reference_clip, tmp_path_factory):
    tts = mlx_speech.load(
        speaking_dir,
        voices_dir=tmp_path_factory.mktemp("tag-voices"),
        backend=nano_backend,
    )
    tts.voice_store.add("grandma", reference_clip.read_bytes())
    return tts


def test_a_voice_tag_speaks_what_follows_in_that_voice(voiced_tts):
    tagged = voiced_tts.speak(TAGGED, **SHORT).samples
    np.testing.assert_array_equal(tagged, voiced_tts.speak(AS_SSML, **SHORT).samples)
    alice = voiced_tts.speak("Hello Bob.", **SHORT).samples
    bob = voiced_tts.speak("Hi Alice!", voice="grandma", **SHORT).samples
    assert_joined(tagged, [alice, bob], edge_samples(RATE))
    wrong = voiced_tts.speak("Hi Alice!", **SHORT).samples  # the tag unheard
    with pytest.raises(AssertionError):
        assert_joined(tagged, [alice, wrong], edge_samples(RATE))


def test_a_tags_voice_holds_for_the_segments_after_it(voiced_tts):
    text = "Hello Bob. [voice:grandma] Hi Alice! How are you? [voice:default] Fine."
    stream = voiced_tts.stream_text([text[:30], text[30:]], **SHORT)
    streamed = np.concatenate([chunk.samples for chunk in stream])
    assert [c.text for c in stream.captions] == [
        "Hello Bob.",
        "Hi Alice!",
        "How are you?",
        "Fine.",
    ]
    alone = [
        voiced_tts.speak("Hello Bob.", **SHORT).samples,
        voiced_tts.speak("Hi Alice!", voice="grandma", **SHORT).samples,
        voiced_tts.speak("How are you?", voice="grandma", **SHORT).samples,
        voiced_tts.speak("Fine.", **SHORT).samples,
    ]
    np.testing.assert_array_equal(streamed, np.concatenate(alone))
    alone[2] = voiced_tts.speak("How are you?", **SHORT).samples
    assert not np.array_equal(streamed, np.concatenate(alone))


def test_python_refuses_a_mix_a_stranger_and_a_text_of_tags_alone(voiced_tts):
    with pytest.raises(ValueError, match="mixing voices .* is not supported"):
        voiced_tts.speak("Hi [voice:grandma+default] there", **SHORT)
    with pytest.raises(ValueError, match="unknown voice 'nosuch'"):
        voiced_tts.speak("Hi [voice:nosuch] there", **SHORT)
    with pytest.raises(ValueError, match="only voice tags"):
        voiced_tts.speak("[voice:grandma]", **SHORT)


@pytest.fixture(scope="module")
def server(speaking_dir, nano_backend, reference_clip, tmp_path_factory):
    settings = ServerSettings(
        model=str(speaking_dir),
        voices_dir=tmp_path_factory.mktemp("tag-server-voices"),
        voice_aliases=(
            ("af_heart", "default"),
            ("af_bella", "grandma"),
            ("am_michael", "default"),
        ),
        wyoming_port=0,
        backend=nano_backend,
    )
    with RunningServer(settings) as running:
        running.app.state.store.add("grandma", reference_clip.read_bytes())
        yield running


def _pcm(server, text: str, **fields) -> httpx.Response:
    body = {"input": text, "response_format": "pcm", "sample_rate": RATE, **SHORT}
    return httpx.post(f"{server.url}/v1/audio/speech", json={**body, **fields}, timeout=60)


def test_kokoros_readme_dialogue_over_http(server):
    """Kokoro-FastAPI's README request, its voices aliased to ours."""
    said = _pcm(
        server,
        "The narrator opens. [voice:af_bella] Did it land? [pause:0.3s] "
        "[voice:am_michael] It did.",
        model="kokoro",
        voice="af_heart",
        allow_voice_tags=True,
    )
    assert said.status_code == 200, said.text
    document = (
        '<speak>The narrator opens. <voice name="grandma">Did it land?</voice>'
        '<break time="300ms"/><voice name="default">It did.</voice></speak>'
    )
    assert said.content == _pcm(server, document, voice="alloy").content
    unvoiced = _pcm(server, document.replace("grandma", "default"), voice="alloy")
    assert said.content != unvoiced.content


def test_every_surface_hears_the_tag(server, speaking_dir, tmp_path):
    expected = _pcm(server, AS_SSML).content
    assert _pcm(server, TAGGED).content == expected
    item = {"input": TAGGED, "response_format": "pcm", "sample_rate": RATE, **SHORT}
    batch = httpx.post(
        f"{server.url}/v1/audio/speech/batch", json={"items": [item]}, timeout=60
    ).json()
    assert base64.b64decode(batch["results"][0]["audio_data"]) == expected
    dialogue = httpx.post(
        f"{server.url}/dev/dialogue",
        json={"turns": [{"voice": "default", "text": TAGGED}], **item},
        timeout=60,
    )
    assert dialogue.content == expected
    config = {"response_format": "pcm", "sample_rate": RATE, "stream_audio": True}
    assert socket_pcm(server, {**config, **SHORT}, [TAGGED]) == expected
    out = tmp_path / "tagged.wav"
    flags = ("--max-new-tokens", "4", "--seed", "3", "--voices-dir")
    voices_dir = str(server.app.state.store.directory)
    done = run(
        "speak", TAGGED, "--model", str(speaking_dir), *flags, voices_dir, "-o", str(out)
    )
    assert done.returncode == 0, done.stderr
    samples, _ = soundfile.read(out, dtype="int16")
    # the file's own rounding to 16 bits: a step at most
    heard = np.frombuffer(expected, dtype="<i2").astype(int)
    assert np.abs(samples.astype(int) - heard).max() <= 1


@pytest.mark.parametrize("form", ["synthesize", "streamed"])
def test_wyoming_hears_the_tag(server, monkeypatch, form):
    """Wyoming has no seed, so its audio is not compared: what the model is
    asked to say, and in which voice, is."""
    asked = []
    prepared = Opener.prepare

    def recording(self, resolved, read, ref_text, voice=None, language=None):
        own = resolved.voice if voice is None else voice
        asked.append((read.strip(), own is None))
        return prepared(self, resolved, read, ref_text, voice, language)

    monkeypatch.setattr(Opener, "prepare", recording)
    if form == "synthesize":
        events = [Synthesize(TAGGED).event()]
    else:
        events = [
            SynthesizeStart().event(),
            SynthesizeChunk(TAGGED).event(),
            SynthesizeStop().event(),
        ]
    until = "audio-stop" if form == "synthesize" else "synthesize-stopped"
    assert wyoming_pcm(server.app.state.wyoming_port, *events, until=until)
    assert asked == [("Hello Bob.", True), ("Hi Alice!", False)]


@pytest.mark.parametrize(
    "fields",
    [
        {"input": "Hi.", "voice": "af_bella+af_sky"},
        {"input": "Hi.", "voice": "af_bella(2)+af_sky(1)"},
        {"input": "Hi [voice:af_bella(2)] there.", "voice": "alloy"},
    ],
    ids=["voice-field", "weighted", "tag"],
)
def test_a_voice_mix_is_a_400_saying_so(server, fields):
    answer = httpx.post(f"{server.url}/v1/audio/speech", json=fields, timeout=60)
    assert answer.status_code == 400
    assert "mixing voices" in answer.json()["error"]["message"]


def test_an_unknown_tag_voice_is_a_400(server):
    answer = httpx.post(
        f"{server.url}/v1/audio/speech", json={"input": "Hi [voice:af_sky] there."}
    )
    assert answer.status_code == 400 and "af_sky" in answer.json()["error"]["message"]


@pytest.mark.parametrize("text", ["Hello [rate:1.5] there.", "[RATE: 0.8]Slow."])
def test_kokoros_rate_tag_is_refused_never_said(voiced_tts, server, text):
    with pytest.raises(ValueError, match=r"is not read here: set the request's speed"):
        voiced_tts.speak(text, max_new_tokens=2)
    answer = httpx.post(
        f"{server.url}/v1/audio/speech", json={"input": text, "max_new_tokens": 2}
    )
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "input"
    assert len(voiced_tts.speak("Item [3] and [note: x].", max_new_tokens=2).samples)
