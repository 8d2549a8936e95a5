"""Captions: each segment's text and where its audio lies, exact to the
sample, through the Python API and the command line."""

from __future__ import annotations

import base64
import io
import itertools
import json
import re

import httpx
import numpy as np
import pytest
import soundfile
from websockets.sync.client import connect

from mlx_speech.server import ServerSettings
from mlx_speech.text.captions import Caption, srt, webvtt
from tests.tts.support.cli import run
from tests.tts.support.server import RunningServer

TEXT = "Hello there. How are you today? Fine, thanks."


def test_webvtt_and_srt_cues_round_down_to_the_millisecond():
    captions = [
        Caption(0, "Hello there.", 0, 3839, 48000),
        Caption(1, "A second\nline --> here.", 3839, 48000 * 3725 + 7, 48000),
    ]
    assert webvtt(captions) == (
        "WEBVTT\n\n"
        "00:00:00.000 --> 00:00:00.079\nHello there.\n\n"
        "00:00:00.079 --> 01:02:05.000\nA second line -> here.\n\n"
    )
    assert srt(captions) == (
        "1\n00:00:00,000 --> 00:00:00,079\nHello there.\n\n"
        "2\n00:00:00,079 --> 01:02:05,000\nA second line -> here.\n\n"
    )


@pytest.mark.parametrize("speed", [1.0, 1.5])
def test_a_text_stream_gives_each_segment_exactly_where_its_audio_lies(speaking_tts, speed):
    stream = speaking_tts.stream_text([TEXT], max_new_tokens=5, seed=1, speed=speed)
    chunks = list(stream)
    captions = stream.captions
    assert [c.text for c in captions] == [
        "Hello there.",
        "How are you today?",
        "Fine, thanks.",
    ]
    assert [c.index for c in captions] == [0, 1, 2]
    assert captions[0].start == 0
    assert all(a.end == b.start for a, b in itertools.pairwise(captions))
    assert captions[-1].end == sum(len(chunk.samples) for chunk in chunks)
    for caption in captions:
        own = [len(chunk.samples) for chunk in chunks if chunk.segment == caption.index]
        assert sum(own) == caption.end - caption.start > 0
        assert caption.rate == speaking_tts.sample_rate


def test_speak_writes_captions_that_end_where_the_audio_ends(speaking_dir, tmp_path):
    out, captions = tmp_path / "a.wav", tmp_path / "a.srt"
    done = run(
        "speak", TEXT, "--model", str(speaking_dir), "-o", str(out),
        "--captions", str(captions), "--max-new-tokens", "4", "--seed", "2",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"wrote {captions}: 3 captions" in done.stdout
    samples, rate = soundfile.read(out)
    cues = re.findall(
        r"(\d\d):(\d\d):(\d\d),(\d{3}) --> (\d\d):(\d\d):(\d\d),(\d{3})",
        captions.read_text(),
    )
    assert len(cues) == 3
    last_end = np.array(cues[-1][4:], dtype=int) @ [3600_000, 60_000, 1000, 1]
    assert last_end == len(samples) * 1000 // rate
    assert "How are you today?" in captions.read_text()


def test_speak_refuses_a_captions_file_it_cannot_write_before_loading(tmp_path):
    done = run(
        "speak", "Hi.", "--captions", str(tmp_path / "a.txt"), "-o", str(tmp_path / "a.wav")
    )
    assert done.returncode == 1 and "name a .vtt or .srt file" in done.stderr


@pytest.fixture(scope="module")
def server(speaking_dir, nano_backend, tmp_path_factory):
    settings = ServerSettings(
        model=str(speaking_dir),
        voices_dir=tmp_path_factory.mktemp("captions-voices"),
        backend=nano_backend,
    )
    with RunningServer(settings) as running:
        yield running


SHORT = {"max_new_tokens": 4, "seed": 3}


def sse_events(response: httpx.Response) -> list[dict]:
    return [
        json.loads(line[len("data: ") :])
        for line in response.text.splitlines()
        if line.startswith("data: ")
    ]


def assert_contiguous_to(
    captions: list[dict], samples: int, start="start_sample", end="end_sample"
):
    assert captions[0][start] == 0
    assert all(a[end] == b[start] for a, b in itertools.pairwise(captions))
    assert captions[-1][end] == samples


def test_sse_sends_each_segments_caption_after_its_audio(server):
    body = {
        "input": TEXT,
        "stream_format": "sse",
        "captions": True,
        "response_format": "pcm",
        "sample_rate": 16000,
        **SHORT,
    }
    response = httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=60)
    assert response.status_code == 200
    events = sse_events(response)
    captions = [e for e in events if e["type"] == "speech.audio.caption"]
    assert [c["text"] for c in captions] == [
        "Hello there.",
        "How are you today?",
        "Fine, thanks.",
    ]
    heard = 0
    for event in events:  # a caption comes once all of its audio was sent
        if event["type"] == "speech.audio.delta":
            heard += len(base64.b64decode(event["audio"])) // 2
        elif event["type"] == "speech.audio.caption":
            assert heard == event["end_sample"]
            assert event["end"] == event["end_sample"] / 16000
    assert_contiguous_to(captions, heard)
    assert events[-1]["type"] == "speech.audio.done"


def test_captions_come_only_with_sse(server):
    body = {"input": TEXT, "captions": True, **SHORT}
    response = httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=60)
    assert response.status_code == 400 and "stream_format 'sse'" in response.text


@pytest.mark.parametrize("response_format", ["wav", "mp3"])
def test_kokoro_captioned_speech_streams_json_lines_of_one_file(server, response_format):
    body = {"input": TEXT, "response_format": response_format, **SHORT}
    response = httpx.post(f"{server.url}/dev/captioned_speech", json=body, timeout=60)
    assert response.status_code == 200
    lines = [json.loads(line) for line in response.text.splitlines()]
    assert {line["audio_format"] for line in lines} == {
        f"audio/{'mpeg' if response_format == 'mp3' else 'wav'}"
    }
    stamps = [stamp for line in lines for stamp in line["timestamps"]]
    assert [s["word"] for s in stamps] == [
        "Hello there.",
        "How are you today?",
        "Fine, thanks.",
    ]
    audio = b"".join(base64.b64decode(line["audio"]) for line in lines)
    samples, rate = soundfile.read(io.BytesIO(audio))
    assert rate == 48000
    if response_format == "wav":  # mp3 adds its codec's delay and padding
        assert_contiguous_to(stamps, len(samples))
    assert stamps[-1]["end_time"] == stamps[-1]["end_sample"] / 48000


@pytest.mark.parametrize("switch", ["stream", "return_timestamps"])
def test_kokoro_captioned_speech_switches_are_true_or_false(server, switch):
    body = {"input": TEXT, switch: "yes", **SHORT}
    response = httpx.post(f"{server.url}/dev/captioned_speech", json=body, timeout=60)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == switch
    assert error["message"] == f"{switch} must be true or false"


def test_kokoro_captioned_speech_whole(server):
    body = {"input": TEXT, "response_format": "wav", "stream": False, **SHORT}
    response = httpx.post(f"{server.url}/dev/captioned_speech", json=body, timeout=60)
    document = response.json()
    samples, _ = soundfile.read(io.BytesIO(base64.b64decode(document["audio"])))
    assert_contiguous_to(document["timestamps"], len(samples))
    body["return_timestamps"] = False
    response = httpx.post(f"{server.url}/dev/captioned_speech", json=body, timeout=60)
    assert response.json()["timestamps"] == []


def test_captions_agree_on_every_surface_and_end_where_the_audio_ends(server, tmp_path):
    """The same text, voice and seed at the model's rate: the Python API,
    SSE, Kokoro's captioned JSON, the WebSocket and the CLI's WebVTT give
    the same segment boundaries, and each ends where its audio ends."""
    tts = server.app.state.slot.ready()
    stream = tts.stream_text([TEXT], **SHORT)
    python_audio = sum(len(chunk.samples) for chunk in stream)
    python = [(c.text, c.start, c.end) for c in stream.captions]
    assert python[-1][2] == python_audio

    at_48k = {"input": TEXT, "response_format": "pcm", "sample_rate": 48000, **SHORT}
    sse = httpx.post(
        f"{server.url}/v1/audio/speech",
        json={**at_48k, "stream_format": "sse", "captions": True},
        timeout=60,
    )
    events = sse_events(sse)
    sse_captions = [
        (e["text"], e["start_sample"], e["end_sample"])
        for e in events
        if e["type"] == "speech.audio.caption"
    ]
    deltas = [e for e in events if e["type"] == "speech.audio.delta"]
    assert sum(len(base64.b64decode(e["audio"])) for e in deltas) // 2 == python_audio

    kokoro = httpx.post(
        f"{server.url}/dev/captioned_speech",
        json={**at_48k, "response_format": "wav", "stream": False},
        timeout=60,
    ).json()
    kokoro_captions = [
        (s["word"], s["start_sample"], s["end_sample"]) for s in kokoro["timestamps"]
    ]
    samples, _ = soundfile.read(io.BytesIO(base64.b64decode(kokoro["audio"])))
    assert len(samples) == python_audio

    url = server.url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    with connect(url) as ws:
        config = {**at_48k, "stream_audio": True, "split_granularity": "sentence"}
        del config["input"]
        ws.send(json.dumps({"type": "session.config", **config}))
        ws.send(json.dumps({"type": "input.text", "text": TEXT}))
        ws.send(json.dumps({"type": "input.done"}))
        socket_captions, starts = [], {}
        while (message := ws.recv(timeout=60)) and (
            isinstance(message, bytes) or json.loads(message)["type"] != "session.done"
        ):
            if isinstance(message, bytes):
                continue
            message = json.loads(message)
            if message["type"] == "audio.start":
                starts[message["sentence_index"]] = message["sentence_text"]
            elif message["type"] == "audio.done":
                text = starts[message["sentence_index"]]
                socket_captions.append(
                    (text, message["start_sample"], message["end_sample"])
                )

    assert sse_captions == kokoro_captions == socket_captions == python

    vtt = tmp_path / "a.vtt"
    speak_flags = ("--max-new-tokens", "4", "--seed", "3", "--captions", str(vtt))
    speak_flags += ("-o", str(tmp_path / "a.wav"))
    done = run("speak", TEXT, "--model", str(server.app.state.settings.model), *speak_flags)
    assert done.returncode == 0, done.stderr
    cues = re.findall(
        r"(\d\d):(\d\d):(\d\d)\.(\d{3}) --> (\d\d):(\d\d):(\d\d)\.(\d{3})", vtt.read_text()
    )
    in_ms = [
        tuple(
            np.array(cue[i : i + 4], dtype=int) @ [3600_000, 60_000, 1000, 1]
            for i in (0, 4)
        )
        for cue in cues
    ]
    assert in_ms == [
        (start * 1000 // 48000, end * 1000 // 48000) for _, start, end in python
    ]
