"""Our loop and audio match mlx-audio 0.6.2 on the same weights: the codes
exactly; the audio within PARITY_ATOL in the exact mode (``MLX_SPEECH_EXACT=1``)
and within the fast codec's bound by default."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from mlx_audio.tts.utils import load_model

from mlx_speech.families.moss_nano.loop import FrameSampling, frames
from mlx_speech.families.moss_nano.sampling import HeadSampler, KeySequence
from mlx_speech.families.moss_nano.service import TEXT_HEAD

MULTI_SEGMENT = (
    "The first sentence is here. The second one follows it, and then a third "
    "sentence arrives with a few more words. Finally the fourth sentence ends it."
)
CJK = "你好，欢迎使用语音合成服务。这是第二句话！"
# Measured: 0 with the mlx-cpu wheel's BLAS, 1.2e-6 with OpenBLAS (its kernels
# round differently by shape); docs/speech/families.md states the same bound.
PARITY_ATOL = 2e-6
# The fast codec's bound (docs/speech/families.md, "Codec math: exact and fast");
# measured on these models about 1e-6 and 120 dB.
FAST_MAX_ABS = 1e-4
FAST_MIN_SNR_DB = 80.0
MODES = ["exact", "fast"]


def assert_audio_matches(ours: np.ndarray, theirs: np.ndarray, mode: str) -> None:
    assert ours.shape == theirs.shape
    if mode == "exact":
        np.testing.assert_allclose(ours, theirs, atol=PARITY_ATOL)
        return
    error = ours.astype(np.float64) - theirs
    assert np.all(np.abs(error) <= FAST_MAX_ABS)
    noise = np.sum(error**2)
    if noise > 0:
        assert (
            10 * np.log10(np.sum(theirs.astype(np.float64) ** 2) / noise) >= FAST_MIN_SNR_DB
        )


@pytest.fixture(params=MODES)
def mode(request) -> str:
    return request.param


@pytest.fixture
def nano(request, mode):
    """The speaking model loaded in ``mode``."""
    return request.getfixturevalue(
        "exact_speaking_tts" if mode == "exact" else "speaking_tts"
    )


@pytest.fixture(scope="module")
def reference(speaking_dir):
    return load_model(Path(speaking_dir))


def _reference_audio(model, text, *, seed=None, ref_audio=None, max_tokens=40):
    kwargs = {"do_sample": False} if seed is None else {}
    if seed is not None:
        mx.random.seed(seed)
    mode = "continuation" if ref_audio is None else "voice_clone"
    result = next(
        model.generate(
            text, ref_audio=ref_audio, mode=mode, max_tokens=max_tokens, **kwargs
        )
    )
    return np.asarray(result.audio, dtype=np.float32).mean(axis=1)


def _our_codes(model, prompt, *, greedy, seed, max_frames):
    sampling = FrameSampling(
        text=HeadSampler(0.0, 0, 1.0) if greedy else TEXT_HEAD,
        audio=HeadSampler(0.0 if greedy else 0.8, 25, 0.95),
        repetition_penalty=1.2,
        max_frames=max_frames,
    )
    found = list(frames(model, prompt, sampling, KeySequence(seed)))
    return np.stack([np.asarray(f) for f in found]) if found else np.zeros((0, 4))


@pytest.mark.parametrize("greedy", [True, False], ids=["greedy", "seeded"])
def test_codes_equal_generate_audio_token_ids(reference, greedy):
    prompt, _ = reference.build_inference_input_ids(
        text="Hello there, how are you?", tokenizer=reference.tokenizer, mode="continuation"
    )
    ours = _our_codes(reference, prompt, greedy=greedy, seed=11, max_frames=30)
    mx.random.seed(11)
    theirs = reference.generate_audio_token_ids(
        prompt_input_ids=prompt, max_new_frames=30, do_sample=not greedy
    )
    np.testing.assert_array_equal(ours, np.asarray(theirs[0]))
    assert ours.shape == (30, 4)


@pytest.mark.parametrize(
    "text", ["Hello there.", MULTI_SEGMENT, CJK], ids=["short", "multi-segment", "cjk"]
)
def test_greedy_continuation_audio_equals_generate(nano, mode, reference, text):
    ours = nano.speak(text, temperature=0, max_new_tokens=40).samples
    assert_audio_matches(ours, _reference_audio(reference, text), mode)


def test_multi_segment_text_is_split_like_mlx_audio(speaking_tts):
    request = speaking_tts.prepare(MULTI_SEGMENT)
    assert len(request.segments) > 1


def test_greedy_clone_audio_equals_generate(nano, mode, reference, reference_clip):
    ours = nano.speak(
        MULTI_SEGMENT, voice=str(reference_clip), temperature=0, max_new_tokens=30
    ).samples
    theirs = _reference_audio(
        reference, MULTI_SEGMENT, ref_audio=str(reference_clip), max_tokens=30
    )
    assert_audio_matches(ours, theirs, mode)


@pytest.mark.parametrize("voice", ["default", "clone"])
def test_seeded_sampling_audio_equals_generate(
    nano, mode, reference, reference_clip, voice
):
    ref_audio = None if voice == "default" else str(reference_clip)
    ours = nano.speak(CJK, voice=ref_audio, seed=1234, max_new_tokens=25).samples
    theirs = _reference_audio(reference, CJK, seed=1234, ref_audio=ref_audio, max_tokens=25)
    assert_audio_matches(ours, theirs, mode)


def test_self_stopping_model_matches_generate_for_every_seed(request, mode, stopping_dir):
    """Equal lengths also show the stop gate: mlx-audio never decodes the
    frame whose text token was audio-end, and neither do we."""
    tts = request.getfixturevalue(
        "exact_stopping_tts" if mode == "exact" else "stopping_tts"
    )
    reference = load_model(Path(stopping_dir))
    frame = tts._service.samples_per_frame
    lengths = []
    for seed in range(8):
        ours = tts.speak("Hello there.", seed=seed, max_new_tokens=60).samples
        theirs = _reference_audio(reference, "Hello there.", seed=seed, max_tokens=60)
        assert ours.shape == theirs.shape, f"seed {seed}"
        assert_audio_matches(ours, theirs, mode)
        lengths.append(len(ours) // frame)
    assert any(0 < n < 60 for n in lengths), lengths  # stopped by itself mid-utterance


def test_the_shared_prompt_prefix_ends_where_the_text_begins(speaking_tts):
    """Without a reference, every prompt starts with the same template rows,
    whose KV state is computed once; the text starts right after them."""
    service = speaking_tts._service
    split = service._continuation_prefix_rows
    prompts = [np.asarray(service._prompt(text, None)[0]) for text in ("Hi.", CJK)]
    np.testing.assert_array_equal(prompts[0][:split], prompts[1][:split])
    assert not np.array_equal(prompts[0][split], prompts[1][split])


def test_a_cloned_voice_shared_prompt_prefix_ends_where_the_text_begins(speaking_tts):
    """Cloning, the template around the reference's rows is the same for
    every request in that voice; its KV state is computed once per voice, and
    the text starts right after it."""
    service = speaking_tts._service
    codes = mx.array(np.arange(5 * 4, dtype=np.int32).reshape(5, 4) % 7)
    split = service._rows_before_reference + 5 + service._rows_after_reference
    prompts = [np.asarray(service._prompt(text, codes)[0]) for text in ("Hi.", CJK)]
    np.testing.assert_array_equal(prompts[0][:split], prompts[1][:split])
    assert not np.array_equal(prompts[0][split], prompts[1][split])


def test_reference_codes_equal_encode_audio(speaking_dir):
    """Our encoder pass (attention and GELU in halves on two threads) gives
    mlx-audio's codes, including a clip that does not fill its last frame."""
    from mlx_audio.codec import MossAudioTokenizer

    from mlx_speech.families.moss_nano.codec import encode

    codec = MossAudioTokenizer.from_model_dir(Path(speaking_dir))
    rng = np.random.default_rng(5)
    for samples in (int(1.3 * codec.sample_rate), 3 * 3840 + 1001):
        t = np.arange(samples) / codec.sample_rate
        voice = 0.3 * np.sin(2 * np.pi * 180 * t)[:, None] * np.array([[1.0, 0.6]])
        clip = (voice + 0.02 * rng.standard_normal((samples, 2))).astype(np.float32)
        theirs = np.asarray(codec.encode_audio(clip, num_quantizers=4))
        ours = encode(codec, clip, 4)
        assert ours.shape == theirs.shape and ours.shape[0] > 0
        np.testing.assert_array_equal(ours, theirs)
