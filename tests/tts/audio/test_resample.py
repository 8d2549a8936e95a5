"""The streaming resampler behind ``sample_rate`` and 24 kHz ``pcm``."""

from __future__ import annotations

import numpy as np
import pytest

from mlx_speech.audio.resample import StreamingResampler

RATES = [(48000, 24000), (48000, 16000), (48000, 44100), (24000, 48000), (48000, 48000)]


def _resampled(signal: np.ndarray, rates: tuple[int, int], chunks) -> np.ndarray:
    resampler = StreamingResampler(*rates)
    pieces, start = [], 0
    for length in chunks:
        pieces.append(resampler.process(signal[start : start + length]))
        start += length
    pieces.append(resampler.flush())
    return np.concatenate(pieces)


@pytest.mark.parametrize("rates", RATES)
@pytest.mark.parametrize("channels", [None, 2])
def test_chunking_never_changes_a_sample(rates, channels):
    generator = np.random.default_rng(1)
    shape = (9000,) if channels is None else (9000, channels)
    signal = generator.standard_normal(shape).astype(np.float32)
    cuts = np.sort(generator.choice(np.arange(1, 9000), 40, replace=False))
    chunks = np.diff([0, *cuts, 9000])
    whole = _resampled(signal, rates, [9000])
    assert len(whole) == round(9000 * rates[1] / rates[0])
    np.testing.assert_array_equal(_resampled(signal, rates, chunks), whole)
    np.testing.assert_array_equal(_resampled(signal, rates, [1] * 300 + [8700]), whole)


@pytest.mark.parametrize("rates", RATES[:4])
def test_a_tone_keeps_its_level_and_one_past_the_new_nyquist_is_removed(rates):
    rate_in, rate_out = rates
    seconds = np.arange(rate_in) / rate_in

    def level(frequency: float) -> float:
        tone = np.sin(2 * np.pi * frequency * seconds).astype(np.float32)
        out = _resampled(tone, rates, [3840] * (rate_in // 3840) + [rate_in % 3840])
        middle = out[len(out) // 4 : -len(out) // 4]
        return float(np.sqrt(2 * np.mean(middle**2)))

    assert level(1000) == pytest.approx(1.0, abs=0.01)
    past = 1.25 * rate_out / 2  # would alias into the band
    if past < rate_in / 2:
        assert level(past) < 1e-3


def test_a_restart_is_a_new_stream_through_the_same_filter():
    rng = np.random.default_rng(4)
    first, second = (rng.standard_normal(n).astype(np.float32) for n in (3001, 1999))

    def alone(samples):
        fresh = StreamingResampler(48000, 24000)
        return np.concatenate([fresh.process(samples), fresh.flush()])

    reused = StreamingResampler(48000, 24000)
    parts = [
        reused.process(first),
        reused.restart(),
        reused.process(second),
        reused.flush(),
    ]
    np.testing.assert_array_equal(
        np.concatenate(parts), np.concatenate([alone(first), alone(second)])
    )
