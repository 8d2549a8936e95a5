"""The one voice policy (``mlx_speech.voices.resolve``) that HTTP, the CLI and
Python share."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import soundfile

import mlx_speech
from mlx_speech.voices.resolve import UnknownVoiceName, parse_aliases, resolve_voice
from mlx_speech.voices.store import SavedVoice

SAVED = SavedVoice("narrator", Path("/nowhere/narrator"), "clip.wav", None, 0.0, 1.0)


def _resolve(voice, paths=True, presets=("Vivian", "ryan"), aliases=None):
    return resolve_voice(
        voice,
        presets=presets,
        find_saved=lambda name: SAVED if name == "narrator" else None,
        hint="try another",
        paths=paths,
        aliases=aliases,
    )


@pytest.mark.parametrize("name", [None, "default", "Default", "DEFAULT"])
def test_default_in_any_case_is_the_models_own_voice(name):
    assert _resolve(name) is None


@pytest.mark.parametrize(("name", "preset"), [("vivian", "Vivian"), ("RYAN", "ryan")])
def test_presets_match_in_any_case_and_come_out_in_their_own_spelling(name, preset):
    assert _resolve(name) == preset


def test_a_saved_name_wins_over_a_file_of_that_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("narrator").write_bytes(b"RIFF")
    assert _resolve("narrator") is SAVED


def test_file_paths_only_where_allowed(tmp_path):
    clip = tmp_path / "me.wav"
    clip.write_bytes(b"RIFF")
    assert _resolve(str(clip)) == clip
    assert _resolve(clip, paths=False) == clip  # a path object is a clip on any surface
    with pytest.raises(UnknownVoiceName) as error:
        _resolve(str(clip), paths=False)
    assert error.value.param == "voice"


def test_clips_pass_through_unchanged():
    samples = (np.zeros(10), 16000)
    assert _resolve(samples) is samples
    assert _resolve(b"bytes") == b"bytes"
    assert _resolve(SAVED) is SAVED


def test_an_unknown_name_says_what_to_pass_instead():
    with pytest.raises(UnknownVoiceName, match="unknown voice 'nobody': try another"):
        _resolve("nobody")


@pytest.mark.parametrize("name", ["alloy", "Nova", "SHIMMER", "cedar"])
def test_openai_voice_names_are_the_models_own_voice(name):
    assert _resolve(name) is None


def test_an_alias_names_a_saved_or_preset_voice_and_wins_over_openais_meaning():
    aliases = parse_aliases(["alloy=narrator", "Echo=vivian"])
    assert _resolve("ALLOY", aliases=aliases) is SAVED
    assert _resolve("echo", aliases=aliases) == "Vivian"
    with pytest.raises(UnknownVoiceName, match="the alias 'onyx' names no voice"):
        _resolve("onyx", aliases=parse_aliases(["onyx=missing"]), paths=False)
    with pytest.raises(ValueError, match="NAME=VOICE"):
        parse_aliases(["alloy"])


def test_the_python_api_takes_default_in_any_case(speaking_tts):
    quiet = speaking_tts.speak("Hi.", voice="Default", seed=1, max_new_tokens=2)
    assert quiet.samples.size and np.array_equal(
        quiet.samples,
        speaking_tts.speak("Hi.", voice=None, seed=1, max_new_tokens=2).samples,
    )


def test_openai_clients_speak_with_an_aliased_saved_voice(speaking_dir, tmp_path):
    tts = mlx_speech.load(speaking_dir, tmp_path / "v", voice_aliases={"Alloy": "me"})
    clip = np.sin(np.arange(24000) / 10).astype(np.float32) * 0.3
    buffer = io.BytesIO()
    soundfile.write(buffer, clip, 24000, format="WAV")
    tts.voice_store.add("me", buffer.getvalue())
    aliased = tts.speak("Hi.", voice="alloy", seed=2, max_new_tokens=3).samples
    direct = tts.speak("Hi.", voice="me", seed=2, max_new_tokens=3).samples
    plain = tts.speak("Hi.", voice="nova", seed=2, max_new_tokens=3).samples
    np.testing.assert_array_equal(aliased, direct)
    np.testing.assert_array_equal(plain, tts.speak("Hi.", seed=2, max_new_tokens=3).samples)
    assert not np.array_equal(aliased, plain)  # the alias did name the saved voice
