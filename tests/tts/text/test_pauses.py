"""Pause tags ([pause:1.5s], [pause:300ms]): exact silence in place, on
the Python API, text spoken as it is written, and HTTP."""

from __future__ import annotations

import base64

import httpx
import numpy as np
import pytest
import soundfile
from wyoming.tts import Synthesize

from mlx_speech.audio.joins import edge_samples
from mlx_speech.server import ServerSettings
from mlx_speech.text.pauses import Pause
from mlx_speech.text.script import script_of
from mlx_speech.text.tags import split_tags
from tests.tts.support.cli import run
from tests.tts.support.server import RunningServer
from tests.tts.support.silence import assert_joined, longest_zero_run, wyoming_pcm
from tests.tts.support.socket_client import socket_pcm

SHORT = {"max_new_tokens": 4, "seed": 3}
RATE = 48000


def test_tags_cut_the_text_into_parts_and_pauses():
    assert split_tags("Hi [pause:1.5s] there [PAUSE: 300 ms][pause:2s]  ") == [
        "Hi ",
        Pause(1.5),
        " there ",
        Pause(0.3),
        Pause(2.0),
    ]
    assert split_tags("[ pause:2s] a [pause :2s] b [ Pause : 2 s ]") == [
        Pause(2.0),
        " a ",
        Pause(2.0),
        " b ",
        Pause(2.0),
    ]
    assert split_tags("[pause:1s] not [pause:1 minute]") == [
        Pause(1.0),
        " not [pause:1 minute]",
    ]
    with pytest.raises(ValueError, match="the pauses add up to 61 s"):
        split_tags("[pause:30s] a [pause:31s]")


@pytest.mark.parametrize("speed", [1.0, 1.5])
def test_a_pause_is_exact_silence_between_the_parts_spoken_alone(speaking_tts, speed):
    said = speaking_tts.speak("Hello [pause:700ms] world.", speed=speed, **SHORT).samples
    before = speaking_tts.speak("Hello", speed=speed, **SHORT).samples
    after = speaking_tts.speak("world.", speed=speed, **SHORT).samples
    # the pace does not stretch a pause; the parts fade into it, without a click
    assert_joined(said, [before, round(0.7 * RATE), after], edge_samples(RATE))
    with pytest.raises(AssertionError):  # the parts in the other order
        assert_joined(said, [after, round(0.7 * RATE), before], edge_samples(RATE))


def test_text_spoken_as_written_pauses_in_place_and_captions_without_tags(speaking_tts):
    stream = speaking_tts.stream_text(["One. Two [pause:1s] three. [pause:0.5s]"], **SHORT)
    samples = np.concatenate([chunk.samples for chunk in stream])
    captions = stream.captions
    assert [c.text for c in captions] == ["One.", "Two three.", ""]
    assert captions[-1].end - captions[-1].start == RATE // 2  # a pause alone
    two = speaking_tts.speak("Two", **SHORT).samples
    silence = samples[captions[1].start + len(two) :][:RATE]
    assert len(silence) == RATE and not silence.any()
    assert captions[-1].end == len(samples)


def test_a_text_streams_pauses_share_the_cap(speaking_tts):
    """The cap is the stream's, as for one request: the segment that passes
    it is refused, and what came before it was spoken."""
    text = "First [pause:40s] one. Second [pause:30s] two."
    stream = speaking_tts.stream_text([text], max_new_tokens=2, seed=1)
    spoken = 0
    with pytest.raises(ValueError, match="the pauses add up to 70 s"):
        for chunk in stream:
            spoken += len(chunk.samples)
    assert spoken >= 40 * RATE


@pytest.fixture(scope="module")
def server(speaking_dir, nano_backend, tmp_path_factory):
    settings = ServerSettings(
        model=str(speaking_dir),
        voices_dir=tmp_path_factory.mktemp("pause-voices"),
        backend=nano_backend,
    )
    with RunningServer(settings) as running:
        yield running


@pytest.mark.parametrize("rate", [48000, 24000])
def test_a_served_pause_is_silence_to_within_a_millisecond(server, rate):
    body = {
        "input": "Hello [pause:700ms] world.",
        "response_format": "pcm",
        "sample_rate": rate,
    }
    response = httpx.post(
        f"{server.url}/v1/audio/speech", json={**body, **SHORT}, timeout=60
    )
    assert response.status_code == 200
    longest = longest_zero_run(response.content)
    assert abs(longest - 0.7 * rate) <= rate / 1000


@pytest.mark.parametrize(
    "text",
    [
        '<speak>Hi <break time="3600s"/> there.</speak>',
        "<speak>" + 'Hi <break time="10s"/>' * 7 + "</speak>",
    ],
    ids=["one-break", "breaks-together"],
)
def test_ssml_breaks_share_the_cap(text):
    with pytest.raises(ValueError, match="the pauses add up to .* at most 60 s"):
        script_of(text)


def test_a_dialogue_past_the_cap_is_a_400(server):
    turns = [{"voice": "default", "text": "Hi."}] * 8  # seven 10 s gaps
    body = {"turns": turns, "pause_between_turns": 10}
    response = httpx.post(f"{server.url}/dev/dialogue", json=body, timeout=60)
    assert response.status_code == 400 and "the pauses add up to 70 s" in response.text
    body["turns"] = turns[:7]  # six: 60 s
    assert (
        httpx.post(f"{server.url}/dev/dialogue", json=body, timeout=60).status_code == 200
    )


def test_pauses_past_the_bound_are_a_400(server):
    body = {"input": "Wait [pause:61s] for it.", **SHORT}
    response = httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=60)
    assert response.status_code == 400 and "the pauses add up to 61 s" in response.text


def test_a_pause_over_the_websocket_is_silence_at_its_rate(server):
    config = {"response_format": "pcm", "sample_rate": 16000, "stream_audio": True}
    pcm = socket_pcm(server, {**config, **SHORT}, ["Hello [pause:700ms] world."])
    assert abs(longest_zero_run(pcm) - 0.7 * 16000) <= 16


def test_a_pause_in_a_batch_item_and_over_wyoming_is_silence(
    speaking_dir, nano_backend, tmp_path
):
    settings = ServerSettings(
        model=str(speaking_dir), voices_dir=tmp_path, wyoming_port=0, backend=nano_backend
    )
    text = "Hello [pause:700ms] world."
    with RunningServer(settings) as running:
        item = {"input": text, "response_format": "pcm", "sample_rate": 24000, **SHORT}
        answer = httpx.post(
            f"{running.url}/v1/audio/speech/batch", json={"items": [item]}, timeout=60
        ).json()
        pcm = base64.b64decode(answer["results"][0]["audio_data"])
        assert abs(longest_zero_run(pcm) - 0.7 * 24000) <= 24

        audio = wyoming_pcm(running.app.state.wyoming_port, Synthesize(text).event())
        assert abs(longest_zero_run(audio) - 0.7 * RATE) <= RATE / 1000


def test_speak_on_the_command_line_pauses(speaking_dir, tmp_path):
    out = tmp_path / "go.wav"
    done = run(
        "speak", "Ready? [pause:700ms] Go!", "--model", str(speaking_dir),
        "-o", str(out), "--max-new-tokens", "4", "--seed", "3",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    samples, rate = soundfile.read(out, dtype="int16")
    assert rate == RATE
    assert abs(longest_zero_run(samples.tobytes()) - 0.7 * RATE) <= RATE / 1000


def test_the_length_limit_counts_all_the_parts_together(speaking_tts):
    speaking_tts.max_text_chars = 20
    try:
        with pytest.raises(ValueError, match="more than 20 characters as it is read out"):
            # 17 characters as written; read out, each part fits (13 and 14)
            speaking_tts.stream("77 [pause:1s] 77.")
    finally:
        speaking_tts.max_text_chars = None
