"""A request is resolved once, by one function, whatever its shape: a
text with SSML parts and pauses, a text stream's segments, a server's
request. Each surface then says an unknown voice its own way."""

from __future__ import annotations

import pytest

from mlx_speech.request import SpeechRequest, TextTooLong
from mlx_speech.speech import resolution as resolution_module
from mlx_speech.voices.resolve import UnknownVoiceName


@pytest.fixture
def resolutions(monkeypatch):
    """The voices ``resolve_voice`` was asked for, in order."""
    asked = []
    real = resolution_module.resolve_voice

    def counted(voice, **policy):
        asked.append(voice)
        return real(voice, **policy)

    monkeypatch.setattr(resolution_module, "resolve_voice", counted)
    return asked


def drained(stream) -> int:
    return sum(len(chunk.samples) for chunk in stream)


SSML = (
    '<speak>One. <break time="200ms"/> Two. <prosody rate="fast">Three.</prosody></speak>'
)


def test_ssml_parts_share_one_resolution(speaking_tts, resolutions):
    stream = speaking_tts.stream(SSML, "alloy", max_new_tokens=2, seed=1, speed=1.5)
    assert drained(stream) > 0
    assert resolutions == ["alloy"]


def test_a_text_streams_segments_share_one_resolution(speaking_tts, resolutions):
    deltas = ["First one. Second ", "one. Third one."]
    stream = speaking_tts.stream_text(deltas, "default", max_new_tokens=2, seed=1)
    assert drained(stream) > 0
    assert resolutions == ["default"]


def test_an_ssml_voice_is_resolved_by_the_same_function(speaking_tts, resolutions):
    text = '<speak>Hi. <voice name="default">Bye.</voice></speak>'
    assert drained(speaking_tts.stream(text, max_new_tokens=2, seed=1)) > 0
    assert resolutions == [None, "default"]


def test_a_servers_request_takes_no_path_and_names_its_own_hint(speaking_tts, tmp_path):
    clip = tmp_path / "me.wav"
    clip.write_bytes(b"RIFF")
    asked = SpeechRequest("Hi.", str(clip), voice_paths=False, voice_hint="ask me")
    with pytest.raises(UnknownVoiceName, match="ask me"):
        speaking_tts.resolve(asked)
    # the Python API takes the same name as a path
    assert speaking_tts.resolve(SpeechRequest("Hi.", str(clip))).voice == clip


def test_an_unknown_ssml_voice_is_a_fault_of_the_text_not_of_the_voice(speaking_tts):
    with pytest.raises(ValueError, match="unknown voice 'nobody'") as raised:
        speaking_tts.stream('<speak><voice name="nobody">Hi.</voice></speak>')
    assert not isinstance(raised.value, UnknownVoiceName)  # HTTP: 400, not 404


def test_the_written_length_is_checked_as_the_request_resolves(speaking_tts):
    speaking_tts.max_text_chars = 10
    try:
        with pytest.raises(TextTooLong, match="the text is 11 characters"):
            speaking_tts.resolve(SpeechRequest("Hello there"))
        speaking_tts.resolve(SpeechRequest("Hello ther"))
    finally:
        speaking_tts.max_text_chars = None


def test_the_python_keywords_are_the_requests_fields():
    request = SpeechRequest.of("Hi.", "me", speed=2.0, language="en", seed=3, top_k=5)
    assert (request.voice, request.speed, request.language) == ("me", 2.0, "en")
    assert request.sampling == {"seed": 3, "top_k": 5}
    assert request.voice_paths


@pytest.mark.parametrize("text", [None, 12, b"Hi."])
def test_a_text_that_is_no_string_is_a_clear_error_under_a_limit(speaking_tts, text):
    speaking_tts.max_text_chars = 10  # as a server sets it
    try:
        with pytest.raises(ValueError, match="text must be a non-empty string"):
            speaking_tts.stream(text)
    finally:
        speaking_tts.max_text_chars = None
