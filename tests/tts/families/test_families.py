"""Qwen3-TTS and VoxCPM2 through the Python API: parity with mlx-audio on the
same weights and seed, reproducibility beside other requests, the validation
matrix, cancellation and family detection."""

from __future__ import annotations

import json
import shutil
import threading

import mlx.core as mx
import numpy as np
import pytest
from mlx_audio.tts.utils import load_model

import mlx_speech
from mlx_speech.testing.qwen3_checkpoint import SAMPLES_PER_FRAME, build_qwen3_checkpoint
from mlx_speech.testing.voxcpm2_checkpoint import build_voxcpm2_checkpoint
from tests.tts.support.idle import wait_until_idle
from tests.tts.support.interleave import read_in_turn

TEXT = "Hello world. This is a test."
QWEN_OPTIONS = {"temperature": 0.9, "top_k": 50, "top_p": 1.0, "repetition_penalty": 1.05}
FRAMES = 24


def _clip(rate: int, seconds: float = 2.0) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    noise = np.random.default_rng(1).standard_normal(t.size)
    return (0.3 * np.sin(2 * np.pi * 180 * t) + 0.05 * noise).astype(np.float32)


def _mlx_audio(model, seed, call, **kwargs) -> np.ndarray:
    mx.random.seed(seed)
    results = list(getattr(model, call)(**kwargs))
    return np.concatenate([np.asarray(result.audio) for result in results])


@pytest.fixture(scope="module")
def mlx_audio_qwen3(qwen3_dirs):
    return {kind: load_model(path) for kind, path in qwen3_dirs.items()}


@pytest.fixture(scope="module")
def mlx_audio_voxcpm2(voxcpm2_dir):
    return load_model(voxcpm2_dir)


# --- parity -------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [0.0, 0.9], ids=["greedy", "seeded"])
def test_custom_voice_equals_generate_custom_voice(qwen3_tts, mlx_audio_qwen3, temperature):
    options = {**QWEN_OPTIONS, "temperature": temperature}
    ours = qwen3_tts["custom_voice"].speak(
        TEXT,
        voice="Ryan",
        instructions="Very happy.",
        language="English",
        max_new_tokens=FRAMES,
        seed=3,
        **options,
    )
    theirs = _mlx_audio(
        mlx_audio_qwen3["custom_voice"],
        3,
        "generate_custom_voice",
        text=TEXT,
        speaker="Ryan",
        instruct="Very happy.",
        language="English",
        max_tokens=FRAMES,
        **options,
    )
    assert ours.sample_rate == 24000
    assert ours.samples.shape == (FRAMES * SAMPLES_PER_FRAME,) == theirs.shape
    np.testing.assert_allclose(ours.samples, theirs, atol=1e-6)


@pytest.mark.parametrize("temperature", [0.0, 0.9], ids=["greedy", "seeded"])
def test_voice_design_equals_generate_voice_design(qwen3_tts, mlx_audio_qwen3, temperature):
    options = {**QWEN_OPTIONS, "temperature": temperature}
    ours = qwen3_tts["voice_design"].speak(
        TEXT, instructions="A calm, low voice.", max_new_tokens=FRAMES, seed=4, **options
    )
    theirs = _mlx_audio(
        mlx_audio_qwen3["voice_design"],
        4,
        "generate_voice_design",
        text=TEXT,
        instruct="A calm, low voice.",
        max_tokens=FRAMES,
        **options,
    )
    assert ours.samples.shape == theirs.shape
    np.testing.assert_allclose(ours.samples, theirs, atol=1e-6)


@pytest.mark.parametrize("temperature", [0.0, 0.9], ids=["greedy", "seeded"])
def test_base_cloning_equals_generate(qwen3_tts, mlx_audio_qwen3, temperature, monkeypatch):
    """mlx-audio decodes reference and generated codes in one pass, then trims
    the audio to the frames whose first code is non-zero (it reads code 0 as
    padding) and cuts the reference's share. The random encoder emits code 0,
    so compare with that one decode before its trim."""
    model = mlx_audio_qwen3["base"]
    decoded = {}
    decode = model.speech_tokenizer.decode

    def keep_decoded(codes):
        wav, lengths = decode(codes)
        decoded.update(frames=codes.shape[1], wav=np.asarray(wav[0]))
        return wav, lengths

    monkeypatch.setattr(model.speech_tokenizer, "decode", keep_decoded)
    clip = _clip(24000)
    options = {**QWEN_OPTIONS, "temperature": temperature}
    ours = qwen3_tts["base"].speak(
        TEXT,
        voice=(clip, 24000),
        ref_text="This is what my voice sounds like.",
        max_new_tokens=FRAMES,
        seed=5,
        **options,
    )
    _mlx_audio(
        model,
        5,
        "generate",
        text=TEXT,
        ref_audio=mx.array(clip),
        ref_text="This is what my voice sounds like.",
        max_tokens=FRAMES,
        **options,
    )
    reference_frames = decoded["frames"] - FRAMES
    theirs = decoded["wav"][reference_frames * SAMPLES_PER_FRAME :]
    assert ours.samples.shape == (FRAMES * SAMPLES_PER_FRAME,) == theirs.shape
    np.testing.assert_allclose(ours.samples, theirs, atol=1e-6)


def test_base_without_a_reference_speaks_each_line_like_generate(
    qwen3_tts, mlx_audio_qwen3
):
    text = "First line.\nSecond line."
    ours = qwen3_tts["base"].speak(text, max_new_tokens=8, seed=6, **QWEN_OPTIONS)
    theirs = _mlx_audio(
        mlx_audio_qwen3["base"], 6, "generate", text=text, max_tokens=8, **QWEN_OPTIONS
    )
    assert ours.samples.shape == (2 * 8 * SAMPLES_PER_FRAME,) == theirs.shape
    np.testing.assert_allclose(ours.samples, theirs, atol=1e-6)


@pytest.mark.parametrize("mode", ["zero-shot", "designed", "cloned"])
def test_voxcpm2_equals_generate(voxcpm2_tts, mlx_audio_voxcpm2, mode):
    clip = _clip(48000)
    ours_kwargs, their_kwargs = {}, {}
    if mode == "designed":
        ours_kwargs["instructions"] = their_kwargs["instruct"] = "A warm, bright voice."
    if mode == "cloned":
        ours_kwargs["voice"] = (clip, 48000)
        their_kwargs["ref_audio"] = mx.array(clip)
    # 60 patches = 120 latent frames: past the decoder's reach, so chunks are
    # decoded with left context rather than from the start.
    ours = voxcpm2_tts.speak(TEXT, seed=7, max_new_tokens=60, **ours_kwargs)
    theirs = _mlx_audio(
        mlx_audio_voxcpm2, 7, "generate", text=TEXT, max_tokens=60, **their_kwargs
    )
    assert ours.sample_rate == 48000
    assert ours.samples.shape == theirs.shape
    np.testing.assert_allclose(ours.samples, theirs, atol=1e-6)
    assert voxcpm2_tts._service._reach < 120


def _samples_per_patch(tts) -> int:
    model = tts._service._model
    return model.patch_size * model.audio_vae.decode_chunk_size


def test_voxcpm2_streams_chunks_as_patches_arrive(voxcpm2_tts):
    chunks = [
        chunk.samples for chunk in voxcpm2_tts.stream(TEXT, seed=1, max_new_tokens=30)
    ]
    assert len(chunks) > 3
    assert len(chunks[0]) == _samples_per_patch(voxcpm2_tts)  # one patch
    assert voxcpm2_tts.streaming == "incremental"


def test_voxcpm2_stops_by_itself(tmp_path, mlx_audio_voxcpm2):
    tts = mlx_speech.load(build_voxcpm2_checkpoint(tmp_path / "stops", stops=True))
    reference = load_model(tmp_path / "stops")
    ours = tts.speak(TEXT, seed=2, max_new_tokens=50)
    theirs = _mlx_audio(reference, 2, "generate", text=TEXT, max_tokens=50)
    assert ours.samples.shape == theirs.shape
    assert len(ours.samples) < 10 * _samples_per_patch(tts)
    np.testing.assert_allclose(ours.samples, theirs, atol=1e-6)


# --- company does not change results -------------------------------------------


@pytest.mark.parametrize("family", ["custom_voice", "voxcpm2"])
def test_seeded_requests_sound_the_same_beside_others(qwen3_tts, voxcpm2_tts, family):
    """Interleaved jobs each keep their own random key and decoder state."""
    tts = voxcpm2_tts if family == "voxcpm2" else qwen3_tts[family]
    options = {"max_new_tokens": 20}
    if family != "voxcpm2":
        options["voice"] = "vivian"
    alone = [tts.speak(TEXT, seed=seed, **options).samples for seed in (1, 2)]
    together = read_in_turn([tts.stream(TEXT, seed=seed, **options) for seed in (1, 2)])
    for expected, got in zip(alone, together, strict=True):
        np.testing.assert_allclose(got, expected, atol=1e-6)


def test_a_qwen3_and_a_voxcpm2_request_run_side_by_side(qwen3_tts, voxcpm2_tts):
    results = {}

    def speak(name, tts, **options):
        results[name] = tts.speak(TEXT, seed=9, max_new_tokens=16, **options).samples

    threads = [
        threading.Thread(target=speak, args=("qwen3", qwen3_tts["custom_voice"])),
        threading.Thread(target=speak, args=("voxcpm2", voxcpm2_tts)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    alone = {
        "qwen3": qwen3_tts["custom_voice"].speak(TEXT, seed=9, max_new_tokens=16),
        "voxcpm2": voxcpm2_tts.speak(TEXT, seed=9, max_new_tokens=16),
    }
    for name, audio in alone.items():
        np.testing.assert_allclose(results[name], audio.samples, atol=1e-6)


# --- cancellation ---------------------------------------------------------------


@pytest.mark.parametrize("family", ["custom_voice", "voice_design", "base", "voxcpm2"])
def test_cancel_mid_stream_frees_the_worker(qwen3_tts, voxcpm2_tts, family):
    tts = voxcpm2_tts if family == "voxcpm2" else qwen3_tts[family]
    options = {"instructions": "A calm voice."} if family == "voice_design" else {}
    stream = tts.stream(TEXT, max_new_tokens=2000, **options)
    next(stream)
    next(stream)
    stream.cancel()
    wait_until_idle()
    with pytest.raises(StopIteration):
        next(stream)
    assert len(tts.speak(TEXT, max_new_tokens=3, **options).samples) > 0


# --- the validation matrix --------------------------------------------------------


def _refused(tts, param, **request):
    with pytest.raises(ValueError) as error:
        tts.stream(request.pop("text", TEXT), **request)
    assert error.value.param == param, str(error.value)
    return str(error.value)


def test_custom_voice_matrix(qwen3_tts):
    tts = qwen3_tts["custom_voice"]
    assert tts.family == "qwen3_tts" and tts.sample_rate == 24000
    assert tts.voices == ["vivian", "ryan", "dylan"]
    assert tts.prepare(TEXT, voice="RYAN").speaker == "ryan"
    assert tts.prepare(TEXT).speaker == "vivian"  # default: the first preset
    assert "vivian, ryan, dylan" in _refused(tts, "voice", voice="nobody")
    _refused(tts, "voice", voice=(_clip(24000), 24000))
    _refused(tts, "language", language="klingon")
    assert tts.prepare(TEXT, language="CHINESE").language == "chinese"
    _refused(tts, "instructions", instructions="  ")
    _refused(tts, "temperature", temperature=-1)


def test_small_custom_voice_checkpoint_refuses_instructions(qwen3_dirs, tmp_path):
    small = tmp_path / "small"
    shutil.copytree(qwen3_dirs["custom_voice"], small)
    config = json.loads((small / "config.json").read_text())
    config["tts_model_size"] = "0b6"
    (small / "config.json").write_text(json.dumps(config))
    tts = mlx_speech.load(small)
    _refused(tts, "instructions", instructions="Very happy.")
    assert len(tts.speak(TEXT, voice="dylan", max_new_tokens=2).samples) > 0


def test_voice_design_matrix(qwen3_tts):
    tts = qwen3_tts["voice_design"]
    assert tts.voices == []
    _refused(tts, "instructions")
    _refused(tts, "voice", voice="ryan", instructions="A calm voice.")
    _refused(tts, "voice", voice=(_clip(24000), 24000), instructions="A calm voice.")
    _refused(tts, "language", language="french", instructions="A calm voice.")


def test_base_matrix(qwen3_tts, qwen3_dirs, tmp_path):
    tts = qwen3_tts["base"]
    clip = (_clip(24000), 24000)
    assert "ref_text" in _refused(tts, "ref_text", voice=clip)
    _refused(tts, "ref_text", voice=clip, ref_text=" ")
    _refused(tts, "instructions", instructions="Very happy.")
    _refused(tts, "voice", voice="ryan")
    _refused(tts, "voice", voice=(_clip(24000, seconds=0.2), 24000), ref_text="Hi.")
    request = tts.prepare(TEXT, voice=clip, ref_text="Hi.", repetition_penalty=1.1)
    assert request.sampling.repetition_penalty == 1.5  # mlx-audio's floor for cloning
    no_encoder = mlx_speech.load(
        build_qwen3_checkpoint(tmp_path / "no-encoder", "base", with_encoder=False)
    )
    assert "encoder" in _refused(no_encoder, "voice", voice=clip, ref_text="Hi.")


def test_voxcpm2_matrix(voxcpm2_tts):
    tts = voxcpm2_tts
    assert tts.family == "voxcpm2" and tts.sample_rate == 48000 and tts.voices == []
    for name in ("temperature", "top_p", "top_k", "repetition_penalty"):
        _refused(tts, name, **{name: 0.5})
    _refused(tts, "language", language="klingon")
    assert tts.prepare(TEXT, language="English").text == TEXT
    _refused(tts, "voice", voice="nobody")
    _refused(tts, "instructions", instructions="")
    request = tts.prepare(
        TEXT, voice=(_clip(48000), 48000), ref_text="ignored", instructions="Warm."
    )
    assert request.text == f"(Warm.){TEXT}" and request.reference is not None


def test_saved_voices_clone_with_their_transcript(qwen3_dirs, tmp_path):
    import io

    import soundfile

    buffer = io.BytesIO()
    soundfile.write(buffer, _clip(24000), 24000, format="WAV")
    tts = mlx_speech.load(qwen3_dirs["base"], voices_dir=tmp_path / "voices")
    tts.voice_store.add("me", buffer.getvalue(), ref_text="This is my voice.")
    request = tts.prepare(TEXT, voice="me")
    assert request.ref_text == "This is my voice."
    assert (
        len(tts.speak(TEXT, voice="me", max_new_tokens=3).samples) == 3 * SAMPLES_PER_FRAME
    )


# --- detection ----------------------------------------------------------------------


def test_family_comes_from_model_type_or_architecture(qwen3_dirs, voxcpm2_dir):
    from mlx_speech.registry import family_loader

    assert family_loader(qwen3_dirs["base"]).__module__.endswith("qwen3.service")
    assert family_loader(voxcpm2_dir).__module__.endswith("voxcpm2.service")
