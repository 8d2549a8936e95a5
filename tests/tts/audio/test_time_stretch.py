"""WSOLA time stretching on signals whose pitch and length we know."""

from __future__ import annotations

import numpy as np
import pytest

from mlx_speech.audio.time_stretch import TimeStretch, check_speed
from mlx_speech.errors import InvalidRequest

RATE = 48000
SPEEDS = [0.25, 0.5, 1.5, 2.0, 4.0]


def harmonic_tone(seconds: float = 2.0, fundamental: float = 220.0) -> np.ndarray:
    t = np.arange(int(RATE * seconds)) / RATE
    tone = sum(
        amplitude * np.sin(2 * np.pi * fundamental * harmonic * t)
        for harmonic, amplitude in ((1, 0.5), (2, 0.2), (3, 0.1), (5, 0.05))
    )
    return tone.astype(np.float32)


def peak_frequency(samples: np.ndarray, rate: int = RATE) -> float:
    size = 1 << 21
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(len(samples)), size))
    return float(np.argmax(spectrum)) * rate / size


def stretched(
    samples: np.ndarray, speed: float, chunks: list[int] | None = None
) -> np.ndarray:
    stretch = TimeStretch(speed, RATE)
    if chunks is None:
        return np.concatenate([stretch.process(samples), stretch.flush()])
    parts, start = [], 0
    for size in chunks:
        parts.append(stretch.process(samples[start : start + size]))
        start += size
    parts.append(stretch.process(samples[start:]))
    return np.concatenate([*parts, stretch.flush()])


@pytest.mark.parametrize("speed", SPEEDS)
def test_pitch_is_kept_and_duration_scales(speed):
    tone = harmonic_tone()
    out = stretched(tone, speed)
    assert abs(len(out) - len(tone) / speed) <= 0.02 * len(tone) / speed
    steady = out[RATE // 20 : -RATE // 20]
    assert peak_frequency(steady) == pytest.approx(220.0, rel=0.01)
    # no gaps or bursts: the level stays that of the input throughout
    level = np.sqrt(np.mean(tone**2))
    blocks = steady[: len(steady) // 960 * 960].reshape(-1, 960)
    block_levels = np.sqrt(np.mean(blocks**2, axis=1))
    assert np.all(np.abs(block_levels / level - 1) < 0.2)


@pytest.mark.parametrize("speed", SPEEDS)
def test_streamed_equals_buffered(speed):
    tone = harmonic_tone(1.0, 137.0)
    chunks = np.random.default_rng(int(speed * 100)).integers(1, 6000, 20).tolist()
    np.testing.assert_array_equal(stretched(tone, speed, chunks), stretched(tone, speed))


def test_the_first_chunk_gives_audio_at_once():
    # Nano's first chunk is one 80 ms frame; its stretched audio comes with it
    first = harmonic_tone(0.08)
    for speed in SPEEDS:
        stretch = TimeStretch(speed, RATE)
        assert len(stretch.process(first)) > 0, speed


def test_channels_are_stretched_together():
    left, right = harmonic_tone(1.0, 220.0), harmonic_tone(1.0, 330.0)
    out = stretched(np.stack([left, right], axis=1), 1.5)
    assert out.shape == (round(RATE / 1.5), 2)
    assert peak_frequency(out[2000:-2000, 0]) == pytest.approx(220.0, rel=0.01)
    assert peak_frequency(out[2000:-2000, 1]) == pytest.approx(330.0, rel=0.01)


def test_an_empty_stream_stays_empty():
    assert len(TimeStretch(2.0, RATE).flush()) == 0
    stretch = TimeStretch(2.0, RATE)
    assert len(stretch.process(np.zeros(0, np.float32))) == 0
    assert len(stretch.flush()) == 0


def test_a_short_input_has_its_length():
    stretch = TimeStretch(0.5, RATE)
    out = np.concatenate([stretch.process(np.ones(100, np.float32)), stretch.flush()])
    assert len(out) == 200


@pytest.mark.parametrize(
    "speed", [0.2, 4.01, float("nan"), float("inf"), "2", True, 10**400]
)
def test_bad_speeds_are_refused(speed):
    with pytest.raises(InvalidRequest) as refused:
        check_speed(speed)
    assert refused.value.param == "speed"


def test_speed_defaults_to_one():
    assert check_speed(None) == 1.0
    assert check_speed(2) == 2.0
