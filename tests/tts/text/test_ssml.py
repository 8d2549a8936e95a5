"""SSML: a <speak> document on every surface; exact breaks, aliases,
say-as, pace and voice per part; malformed and hostile documents refused
cheaply."""

from __future__ import annotations

import base64
import time

import httpx
import numpy as np
import pytest
from wyoming.tts import (
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeTextFormat,
)

import mlx_speech
from mlx_speech.audio.joins import edge_samples
from mlx_speech.server import ServerSettings
from mlx_speech.text.pauses import Pause
from mlx_speech.text.ssml import Spoken, SsmlError, Voicing, parse_ssml
from tests.tts.support.cli import run
from tests.tts.support.server import RunningServer
from tests.tts.support.silence import assert_joined, longest_zero_run, wyoming_pcm
from tests.tts.support.socket_client import socket_pcm

SHORT = {"max_new_tokens": 4, "seed": 3}
RATE = 48000
DIALOGUE = (
    '<speak><voice name="default">Hello Bob.</voice>'
    '<break time="300ms"/><voice name="grandma">Hi Alice!</voice></speak>'
)


def test_the_subset_becomes_parts_and_pauses():
    script = parse_ssml(
        '<speak>Hello <break time="700ms"/> world. <sub alias="sequel">SQL</sub> and '
        '<say-as interpret-as="characters">SQL</say-as>, call '
        '<say-as interpret-as="telephone">555-1234</say-as> for the '
        '<say-as interpret-as="ordinal">2</say-as> time.'
        '<p><prosody rate="slow" pitch="high">slowly <prosody rate="200%">fast</prosody>'
        '</prosody></p><emphasis>said</emphasis> <lang xml:lang="zh">你好</lang>'
        '<break strength="strong"/></speak>'
    )
    assert script.parts == [
        Spoken("Hello", Voicing()),
        Pause(0.7),
        Spoken("world. sequel and S Q L, call 5 5 5, 1 2 3 4 for the 2nd time.", Voicing()),
        Spoken("slowly", Voicing(pace=0.75)),
        Spoken("fast", Voicing(pace=1.5)),
        Spoken("said", Voicing()),
        Spoken("你好", Voicing(language="zh")),
        Pause(0.75),
    ]
    assert script.ignored == ["prosody@pitch", "emphasis"]


@pytest.mark.parametrize(
    "document, said",
    [
        ("<speak>Hello\n<break time='soon'/></speak>", "is not a time"),
        ("<speak>Hi<break time='" + "9" * 400 + "s'/></speak>", "is too long a time"),
        ("<speak>Hello\n  <s>unclosed</speak>", "mismatched tag (line 2, column"),
        ("<voice>no speak</voice>", "not <speak>"),
    ],
)
def test_a_document_that_cannot_be_spoken_says_where(document, said):
    with pytest.raises(SsmlError, match="SSML: ") as refused:
        parse_ssml(document)
    assert said in str(refused.value)


def test_hostile_documents_are_refused_cheaply():
    laughs = (
        '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
        + "".join(
            f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10 if i else "&lol;" * 10}">'
            for i in range(9)
        )
        + "]><speak>&lol8;</speak>"
    )
    external = '<!DOCTYPE speak SYSTEM "file:///etc/passwd"><speak>&x;</speak>'
    nested = "<speak>" + "<s>" * 10_000 + "deep" + "</s>" * 10_000 + "</speak>"
    for document, said in (
        (laughs, "document type"),
        (external, "document type"),
        (nested, "nested more than 64"),
    ):
        started = time.perf_counter()
        with pytest.raises(SsmlError, match=said):
            parse_ssml(document)
        assert time.perf_counter() - started < 0.5


@pytest.fixture(scope="module")
def voiced_tts(speaking_dir, nano_backend, reference_clip, tmp_path_factory):
    """A model with a saved voice, grandma, that OpenAI's name alloy names."""
    tts = mlx_speech.load(
        speaking_dir,
        voices_dir=tmp_path_factory.mktemp("ssml-tts-voices"),
        voice_aliases={"alloy": "grandma"},
        backend=nano_backend,
    )
    tts.voice_store.add("grandma", reference_clip.read_bytes())
    return tts


def test_python_speaks_a_document_part_by_part(voiced_tts):
    audio = voiced_tts.speak(DIALOGUE, **SHORT).samples
    together = voiced_tts.speak(DIALOGUE.replace('<break time="300ms"/>', ""), **SHORT)
    alice = voiced_tts.speak("Hello Bob.", **SHORT).samples
    bob = voiced_tts.speak("Hi Alice!", voice="grandma", **SHORT).samples
    silence = round(0.3 * RATE)
    assert_joined(audio, [alice, silence, bob], edge_samples(RATE))
    # turns that meet without a break are each faded at the join: no click
    assert_joined(together.samples, [alice, bob], edge_samples(RATE))
    # the model hears both: Bob's turn in the default voice, or Alice's
    # words in place of his, is not what was said
    bob_unvoiced = voiced_tts.speak("Hi Alice!", **SHORT).samples
    alice_again = voiced_tts.speak("Hello Bob.", voice="grandma", **SHORT).samples
    for wrong in (bob_unvoiced, alice_again):
        with pytest.raises(AssertionError):
            assert_joined(audio, [alice, silence, wrong], edge_samples(RATE))


def test_a_document_spoken_as_it_is_written_is_spoken_whole(speaking_tts):
    document = '<speak>One. <break time="500ms"/>Two.</speak>'
    pieces = [document[i : i + 5] for i in range(0, len(document), 5)]
    streamed = np.concatenate(
        [c.samples for c in speaking_tts.stream_text(pieces, **SHORT)]
    )
    np.testing.assert_array_equal(streamed, speaking_tts.speak(document, **SHORT).samples)


@pytest.fixture(scope="module")
def server(speaking_dir, nano_backend, tmp_path_factory):
    settings = ServerSettings(
        model=str(speaking_dir),
        voices_dir=tmp_path_factory.mktemp("ssml-voices"),
        wyoming_port=0,
        backend=nano_backend,
    )
    with RunningServer(settings) as running:
        yield running


def pcm_at(server, text: str, rate: int = RATE, voice: str = "default") -> httpx.Response:
    body = {"input": text, "response_format": "pcm", "sample_rate": rate, **SHORT}
    body["voice"] = voice
    return httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=60)


def test_served_ssml_breaks_exactly_and_names_what_it_ignored(server):
    document = '<speak>Hello <break time="700ms"/> <emphasis>world</emphasis>.</speak>'
    response = pcm_at(server, document, 24000)
    assert response.status_code == 200
    assert abs(longest_zero_run(response.content) - 0.7 * 24000) <= 24
    assert response.headers["x-mlx-speech-ignored"] == "emphasis"
    named = pcm_at(server, "<speak>Hi <café>there</café> <中>too</中>.</speak>")
    assert named.status_code == 200
    assert named.headers["x-mlx-speech-ignored"] == "caf\\xe9, \\u4e2d"


@pytest.mark.parametrize(
    "document",
    ["<speak/>", "<speak> </speak>", "<speak><p>  </p><emphasis/></speak>"],
    ids=["empty", "blank", "empty-elements"],
)
def test_a_document_that_says_nothing_is_a_400_as_empty_text_is(server, document):
    response = pcm_at(server, document)
    assert response.status_code == 400
    assert "says nothing" in response.json()["error"]["message"]
    assert pcm_at(server, '<speak><break time="100ms"/></speak>').status_code == 200


def test_an_ordinal_that_is_no_number_is_read_as_written(server):
    document = '<speak>the <say-as interpret-as="ordinal">²</say-as> time</speak>'
    assert parse_ssml(document).parts == [Spoken("the ² time", Voicing())]
    assert pcm_at(server, document).status_code == 200


def test_served_ssml_that_is_malformed_is_a_400_with_its_place(server):
    response = pcm_at(server, "<speak>Hello\n<s>there</speak>")
    assert response.status_code == 400
    assert "mismatched tag (line 2" in response.json()["error"]["message"]


def test_ssml_over_the_websocket_and_wyoming(server):
    document = '<speak>Hello <break time="700ms"/> world.</speak>'
    config = {"response_format": "pcm", "stream_audio": True, "sample_rate": RATE, **SHORT}
    pcm = socket_pcm(server, config, [document[:10], document[10:]])
    assert abs(longest_zero_run(pcm) - 0.7 * RATE) <= RATE / 1000
    content = document.removeprefix("<speak>").removesuffix("</speak>")
    for text in (document, content):  # declared SSML: content is a document's
        event = Synthesize(text, text_format=SynthesizeTextFormat.SSML).event()
        audio = wyoming_pcm(server.app.state.wyoming_port, event)
        assert abs(longest_zero_run(audio) - 0.7 * RATE) <= RATE / 1000


@pytest.mark.parametrize(
    "chunks",
    [
        ['Hello <break time="700ms"/>', " world."],  # a document's content
        ["<sp", 'eak>Hello <break time="700ms"/> world.</speak>'],
    ],
    ids=["content", "document"],
)
def test_a_wyoming_stream_declared_ssml_is_spoken_as_ssml(server, chunks):
    audio = wyoming_pcm(
        server.app.state.wyoming_port,
        SynthesizeStart(text_format=SynthesizeTextFormat.SSML).event(),
        *(SynthesizeChunk(chunk).event() for chunk in chunks),
        SynthesizeStop().event(),
        until="synthesize-stopped",
    )
    assert abs(longest_zero_run(audio) - 0.7 * RATE) <= RATE / 1000


def test_speak_on_the_command_line_takes_ssml(speaking_dir, tmp_path):
    import soundfile

    out = tmp_path / "a.wav"
    document = '<speak>Ready? <break time="700ms"/> Go!</speak>'
    flags = ("--max-new-tokens", "4", "--seed", "3", "-o", str(out))
    done = run("speak", document, "--model", str(speaking_dir), *flags)
    assert done.returncode == 0, done.stderr
    samples, _ = soundfile.read(out, dtype="int16")
    assert abs(longest_zero_run(samples.tobytes()) - 0.7 * RATE) <= RATE / 1000


def test_kokoros_dialogue_speaks_each_turn_as_it_would_alone(server, reference_clip):
    store = server.app.state.store
    store.add("grandma", reference_clip.read_bytes())
    try:
        body = {
            "turns": [
                {"voice": "default", "text": "Hello Bob & co."},
                {"voice_id": "grandma", "text": "Hi <Alice>! [pause:200ms] Bye."},
            ],
            "pause_between_turns": 0.4,
            "response_format": "pcm",
            "sample_rate": RATE,
            **SHORT,
        }
        answer = httpx.post(f"{server.url}/dev/dialogue", json=body, timeout=60)
        assert answer.status_code == 200, answer.text

        def alone(text: str, voice: str) -> bytes:
            return pcm_at(server, text, voice=voice).content

        def samples(pcm: bytes) -> np.ndarray:
            return np.frombuffer(pcm, dtype="<i2")

        pieces = [
            samples(alone("Hello Bob & co.", "default")),
            round(0.4 * RATE),
            samples(alone("Hi <Alice>!", "grandma")),
            round(0.2 * RATE),
            samples(alone("Bye.", "grandma")),
        ]
        assert_joined(samples(answer.content), pieces, edge_samples(RATE))
        pieces[2] = samples(alone("Hi <Alice>!", "default"))  # the wrong voice
        with pytest.raises(AssertionError):
            assert_joined(samples(answer.content), pieces, edge_samples(RATE))
        refused = httpx.post(
            f"{server.url}/dev/dialogue",
            json={"turns": [{"voice": "nosuch", "text": "Hi."}]},
            timeout=60,
        )
        assert refused.status_code == 400 and "nosuch" in refused.text
        refused = httpx.post(
            f"{server.url}/dev/dialogue",
            json={"turns": [{"voice": "default", "text": "Hi."}], "stream": "no"},
            timeout=60,
        )
        assert refused.status_code == 400
        assert refused.json()["error"]["message"] == "stream must be true or false"
    finally:
        store.remove("grandma")


def test_a_batch_item_may_be_ssml(server):
    document = '<speak>Hello <break time="700ms"/> world.</speak>'
    item = {"input": document, "response_format": "pcm", "sample_rate": 24000, **SHORT}
    answer = httpx.post(
        f"{server.url}/v1/audio/speech/batch", json={"items": [item]}, timeout=60
    ).json()
    pcm = base64.b64decode(answer["results"][0]["audio_data"])
    assert abs(longest_zero_run(pcm) - 0.7 * 24000) <= 24


def test_a_voice_may_be_named_by_an_openai_alias(voiced_tts):
    document = '<speak><voice name="alloy">Hi there.</voice></speak>'
    aliased = voiced_tts.speak(document, **SHORT)
    named = voiced_tts.speak("Hi there.", voice="grandma", **SHORT)
    np.testing.assert_array_equal(aliased.samples, named.samples)
    unnamed = voiced_tts.speak("Hi there.", **SHORT)
    assert not np.array_equal(aliased.samples, unnamed.samples)
