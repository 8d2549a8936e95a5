"""Every rejected input: a ValueError or ModelLoadError that says what to fix,
raised on the caller's thread before anything is queued."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import soundfile

import mlx_speech
from mlx_speech.engine import shared_engine


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"text": ""}, "text must be a non-empty string"),
        ({"text": "   "}, "text must be a non-empty string"),
        ({"text": 42}, "text must be a non-empty string"),
        ({"temperature": -0.1}, r"temperature must be >= 0 \(0 is greedy\)"),
        ({"temperature": float("nan")}, "temperature must be a finite number"),
        ({"temperature": "hot"}, "temperature must be a finite number"),
        ({"top_p": 0}, r"top_p must be in \(0, 1\]"),
        ({"top_p": 1.5}, r"top_p must be in \(0, 1\]"),
        ({"top_k": -1}, r"top_k must be >= 0"),
        ({"top_k": 2.5}, "top_k must be an integer"),
        ({"repetition_penalty": 0}, "repetition_penalty must be > 0"),
        ({"max_new_tokens": 0}, r"max_new_tokens must be in 1\.\.4096"),
        ({"max_new_tokens": True}, "max_new_tokens must be an integer"),
        ({"seed": -1}, r"seed must be in 0\.\."),
        ({"seed": 2**63}, r"seed must be in 0\.\."),
        ({"pace": 1.0}, "unknown option pace; allowed: temperature, top_p, top_k"),
        ({"speed": 4.5}, r"speed must be in 0\.25\.\.4\.0, got 4\.5"),
        ({"speed": "fast"}, "speed must be a finite number"),
        ({"normalize": "yes"}, "normalize must be true or false"),
        (
            {"voice": "nobody"},
            "unknown voice 'nobody': not a saved voice, and MOSS-TTS-Nano has no",
        ),
        (
            {"voice": 3.5},
            "a reference voice must be a path to an audio file, audio file bytes",
        ),
        ({"voice": b"not audio"}, "reference audio bytes could not be decoded"),
        (
            {"voice": (np.zeros(48000), 0)},
            "reference sample rate must be a positive integer",
        ),
        (
            {"voice": (np.zeros(48000), 48000.0)},
            "reference sample rate must be a positive integer",
        ),
        ({"voice": (np.zeros((2, 2, 100)), 48000)}, "reference samples must be 1-D or 2-D"),
        ({"voice": (np.full(48000, np.nan), 48000)}, "reference audio contains NaN"),
        (
            {"voice": (np.zeros(20000), 48000)},
            r"must be 0.5-30 s long; this clip gives 0.40 s \(20 codec frames of 20 ms\)",
        ),
        (
            {"voice": (np.zeros(48000 * 31), 48000)},
            "must be 0.5-30 s long; this clip gives 31.00 s",
        ),
    ],
)
def test_bad_requests_are_rejected_before_queueing(speaking_tts, kwargs, message):
    request = {"text": "Hello there.", **kwargs}
    with pytest.raises(ValueError, match=message):
        speaking_tts.stream(**request)
    with pytest.raises(ValueError, match=message):
        speaking_tts.speak(**request)
    assert shared_engine().load == (0, 0)


def test_undecodable_reference_file_is_rejected(speaking_tts, tmp_path):
    clip = tmp_path / "clip.wav"
    clip.write_bytes(b"RIFF----WAVEfmt garbage")
    with pytest.raises(ValueError, match="could not be decoded"):
        speaking_tts.speak("Hello there.", voice=str(clip))


@pytest.mark.parametrize(
    "voice", ["path", "bytes", "samples", "channels-first", "mono-path"]
)
def test_every_reference_form_clones(speaking_tts, reference_clip, tmp_path, voice):
    data, rate = soundfile.read(reference_clip, dtype="float32")
    mono = tmp_path / "mono.flac"
    soundfile.write(mono, data.mean(axis=1), rate)
    forms = {
        "path": reference_clip,
        "bytes": reference_clip.read_bytes(),
        "samples": (data, rate),
        "channels-first": (data.T, rate),
        "mono-path": str(mono),
    }
    audio = speaking_tts.speak(
        "Hello there.", voice=forms[voice], ref_text="ignored", seed=1, max_new_tokens=5
    )
    assert len(audio.samples) == 5 * speaking_tts._service.samples_per_frame


def test_default_voice_is_reproducible_with_a_seed(speaking_tts):
    first = speaking_tts.speak("Hello there.", voice="default", seed=4, max_new_tokens=8)
    second = speaking_tts.speak("Hello there.", voice=None, seed=4, max_new_tokens=8)
    np.testing.assert_array_equal(first.samples, second.samples)


def test_non_finite_audio_is_an_error_not_noise(speaking_dir, tmp_path):
    import mlx.core as mx

    broken = tmp_path / "nan-codec"
    shutil.copytree(speaking_dir, broken)
    weights_path = broken / "audio_tokenizer" / "model.safetensors"
    weights = mx.load(str(weights_path))
    name = next(
        key for key in weights if key.startswith("decoder.") and key.endswith("weight")
    )
    weights[name] = mx.full(weights[name].shape, float("nan"))
    mx.save_safetensors(str(weights_path), weights)
    tts = mlx_speech.load(broken)
    with pytest.raises(mlx_speech.GenerationError, match="non-finite audio"):
        tts.speak("Hello there.", max_new_tokens=3)


def test_missing_directory(tmp_path):
    with pytest.raises(mlx_speech.ModelLoadError, match="model directory not found"):
        mlx_speech.load(tmp_path / "nowhere")


def test_directory_without_config(tmp_path):
    with pytest.raises(mlx_speech.ModelLoadError, match="has no config.json"):
        mlx_speech.load(tmp_path)


def test_unknown_family_lists_the_supported_ones(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bark"}))
    with pytest.raises(
        mlx_speech.ModelLoadError,
        match="unsupported model_type 'bark'.*supported: moss_tts_nano",
    ):
        mlx_speech.load(tmp_path)


def test_hub_id_that_cannot_be_fetched_says_to_pass_a_local_dir(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(
        mlx_speech.ModelLoadError,
        match=r"Without the network, pass mlx_speech.load\(\) a directory DIR that holds",
    ):
        mlx_speech.load("mlx-speech-tests/not-a-cached-model")


def test_broken_weights_give_a_load_error(speaking_dir, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(speaking_dir, broken)
    (broken / "model.safetensors").write_bytes(b"\0" * 64)
    with pytest.raises(mlx_speech.ModelLoadError, match="cannot load"):
        mlx_speech.load(broken)


def test_missing_codec_without_network_gives_a_load_error(
    speaking_dir, tmp_path, monkeypatch
):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    no_codec = tmp_path / "no-codec"
    shutil.copytree(
        speaking_dir, no_codec, ignore=shutil.ignore_patterns("audio_tokenizer")
    )
    with pytest.raises(mlx_speech.ModelLoadError, match="no audio_tokenizer/"):
        mlx_speech.load(no_codec)


def test_instructions_are_ignored_by_moss_tts_nano_and_the_stream_says_so(speaking_tts):
    stream = speaking_tts.stream("Hi.", instructions="Whisper.", seed=1, max_new_tokens=2)
    assert stream.ignored == ("instructions",)
    styled = np.concatenate([chunk.samples for chunk in stream])
    plain = speaking_tts.speak("Hi.", seed=1, max_new_tokens=2).samples
    np.testing.assert_array_equal(styled, plain)
    assert speaking_tts.stream("Hi.", max_new_tokens=2).ignored == ()


FAMILIES = {
    "moss_nano": lambda fixtures: fixtures("speaking_tts"),
    "qwen3": lambda fixtures: fixtures("qwen3_tts")["custom_voice"],
    "voxcpm2": lambda fixtures: fixtures("voxcpm2_tts"),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_a_text_streams_options_are_checked_without_a_sentence(
    family, request, monkeypatch
):
    """The family checks a text stream's options as it opens, before any
    text came, and is given no text for it (no sentence made up)."""
    tts = FAMILIES[family](request.getfixturevalue)
    prepared = []
    service = tts._service
    real = service.prepare
    monkeypatch.setattr(
        service, "prepare", lambda asked: prepared.append(asked) or real(asked)
    )
    with pytest.raises(ValueError, match="max_new_tokens"):
        tts.stream_text(["Hello."], max_new_tokens=-1)
    with pytest.raises(ValueError, match="voice"):
        tts.stream_text(["Hello."], "no such voice")
    tts.stream_text(["Hello."], max_new_tokens=1).close()
    assert [asked.text for asked in prepared if asked.text is not None] == []
