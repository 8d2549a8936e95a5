"""PCM16 conversion and writing files."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile

from mlx_speech import Audio
from mlx_speech.audio.pcm import to_pcm16
from tests.tts.support.decoding import decode_with_ffmpeg


def test_pcm16_clips_scales_and_rounds_half_to_even():
    lsb = 1 / 32767
    samples = np.array(
        [
            0.0,
            0.5 * lsb,
            1.5 * lsb,
            2.5 * lsb,
            -0.5 * lsb,
            -1.5 * lsb,
            0.49 * lsb,
            0.51 * lsb,
            1.0,
            -1.0,
            1.7,
            -3.0,
        ],
        dtype=np.float64,
    )
    expected = [0, 0, 2, 2, 0, -2, 0, 1, 32767, -32767, 32767, -32767]
    assert to_pcm16(samples.astype(np.float32)).tolist() == expected


def test_pcm16_is_little_endian_and_leaves_the_input_alone():
    samples = np.array([0.25, -0.25], dtype=np.float32)
    out = to_pcm16(samples)
    assert out.dtype == np.dtype("<i2")
    assert out.tobytes() == np.array([8192, -8192], dtype="<i2").tobytes()
    assert samples.tolist() == [0.25, -0.25]


@pytest.mark.parametrize("suffix", ["wav", "flac", "ogg", "opus", "mp3"])
def test_write_picks_the_container_from_the_suffix(tmp_path, suffix):
    t = np.arange(48000) / 48000
    audio = Audio((0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), 48000)
    path = audio.write(tmp_path / f"out.{suffix}")
    data, rate = soundfile.read(path)
    assert rate == 48000
    assert abs(len(data) - 48000) < 4000  # lossy codecs pad a little


def test_write_pcm_is_headerless_s16le(tmp_path):
    audio = Audio(np.array([0.5, -0.5], dtype=np.float32), 48000)
    assert (
        audio.write(tmp_path / "out.pcm").read_bytes() == to_pcm16(audio.samples).tobytes()
    )


def test_write_rejects_unknown_formats(tmp_path):
    audio = Audio(np.zeros(10, dtype=np.float32), 48000)
    with pytest.raises(ValueError, match="unknown audio format 'wma'; use one of pcm, wav"):
        audio.write(tmp_path / "out.wma")


def test_write_aac_is_adts_that_ffmpeg_reads(tmp_path):
    t = np.arange(48000) / 48000
    audio = Audio((0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), 48000)
    data = audio.write(tmp_path / "out.aac").read_bytes()
    assert data[:2] == b"\xff\xf1"  # an ADTS sync word, MPEG-4
    samples, rate = decode_with_ffmpeg(data)
    assert rate == 48000
    assert 48000 <= len(samples) < 48000 + 3 * 1024  # encoder priming and padding
