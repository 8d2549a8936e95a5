"""The guard under every "equals spoken alone" test: the tests' tiny
checkpoint hears its input. Two texts, and two voices, give different codes
and audibly different audio; were the model deaf, a test comparing a
dialogue with its turns, or a lexicon's alias with its word, would pass
whatever was spoken."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile
from mlx_audio.tts.utils import load_model

from mlx_speech.families.moss_nano.loop import FrameSampling, frames
from mlx_speech.families.moss_nano.sampling import HeadSampler, KeySequence

GREEDY = HeadSampler(0.0, 0, 1.0)
FRAMES = 12
TEXTS = ("Hi there.", "Bye now, friend.")
# Of the codes of two inputs, at least this share differs (measured about
# half); of their audio, the difference's RMS is at least this share of the
# signal's (measured 0.12 to 0.32; the deaf checkpoint this replaced differed
# by one least-significant bit).
MIN_CODES_DIFFERING = 0.2
MIN_AUDIO_DIFFERENCE = 0.05


@pytest.fixture(scope="module")
def other_clip(tmp_path_factory):
    """A second voice: another pitch, mono at 16 kHz."""
    rate = 16000
    t = np.arange(int(1.5 * rate)) / rate
    samples = 0.3 * np.sign(np.sin(2 * np.pi * 140 * t)) * np.exp(-t)
    path = tmp_path_factory.mktemp("clips") / "other.wav"
    soundfile.write(path, samples, rate, subtype="PCM_16")
    return path


@pytest.fixture(scope="module")
def reference_model(speaking_dir):
    return load_model(speaking_dir)


def codes(model, text: str, reference_codes=None) -> np.ndarray:
    mode = "continuation" if reference_codes is None else "voice_clone"
    prompt, _ = model.build_inference_input_ids(
        text=text,
        tokenizer=model.tokenizer,
        mode=mode,
        prompt_audio_codes=reference_codes,
    )
    sampling = FrameSampling(GREEDY, GREEDY, repetition_penalty=1.0, max_frames=FRAMES)
    return np.array(
        [np.asarray(frame) for frame in frames(model, prompt, sampling, KeySequence(0))]
    )


def relative_difference(one: np.ndarray, other: np.ndarray) -> float:
    assert one.shape == other.shape
    return float(np.sqrt(np.mean((one - other) ** 2) / np.mean(one**2)))


def test_two_texts_give_different_codes(reference_model):
    first, second = (codes(reference_model, text) for text in TEXTS)
    assert np.mean(first != second) >= MIN_CODES_DIFFERING


def test_two_voices_give_different_codes(reference_model, reference_clip, other_clip):
    encoded = [
        reference_model.encode_reference_audio(str(clip))
        for clip in (reference_clip, other_clip)
    ]
    default = codes(reference_model, TEXTS[0])
    first, second = (codes(reference_model, TEXTS[0], one) for one in encoded)
    assert np.mean(first != second) >= MIN_CODES_DIFFERING
    assert np.mean(first != default) >= MIN_CODES_DIFFERING


def test_what_is_spoken_is_heard_in_the_audio(speaking_tts, reference_clip, other_clip):
    def speak(text, voice=None):
        return speaking_tts.speak(text, voice, temperature=0, max_new_tokens=FRAMES).samples

    texts = relative_difference(speak(TEXTS[0]), speak(TEXTS[1]))
    voices = [speak(TEXTS[0], clip) for clip in (None, reference_clip, other_clip)]
    clones = relative_difference(voices[1], voices[2])
    default_and_clone = relative_difference(voices[0], voices[1])
    print(
        f"audio differences: texts {texts:.3f}, voices {clones:.3f}, "
        f"default and clone {default_and_clone:.3f}"
    )
    assert min(texts, clones, default_and_clone) >= MIN_AUDIO_DIFFERENCE
