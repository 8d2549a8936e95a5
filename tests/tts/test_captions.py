"""Captions: each segment's text and where its audio lies, exact to the
sample, through the Python API and the command line."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
import soundfile

from mlx_speech.captions import Caption, srt, webvtt
from tests.tts.support.cli import run

TEXT = "Hello there. How are you today? Fine, thanks."


def test_webvtt_and_srt_cues_round_down_to_the_millisecond():
    captions = [
        Caption(0, "Hello there.", 0, 3839, 48000),
        Caption(1, "A second\nline --> here.", 3839, 48000 * 3725 + 7, 48000),
    ]
    assert webvtt(captions) == (
        "WEBVTT\n\n"
        "00:00:00.000 --> 00:00:00.079\nHello there.\n\n"
        "00:00:00.079 --> 01:02:05.000\nA second line -> here.\n\n"
    )
    assert srt(captions) == (
        "1\n00:00:00,000 --> 00:00:00,079\nHello there.\n\n"
        "2\n00:00:00,079 --> 01:02:05,000\nA second line -> here.\n\n"
    )


@pytest.mark.parametrize("speed", [1.0, 1.5])
def test_a_text_stream_gives_each_segment_exactly_where_its_audio_lies(speaking_tts, speed):
    stream = speaking_tts.stream_text([TEXT], max_new_tokens=5, seed=1, speed=speed)
    chunks = list(stream)
    captions = stream.captions
    assert [c.text for c in captions] == [
        "Hello there.",
        "How are you today?",
        "Fine, thanks.",
    ]
    assert [c.index for c in captions] == [0, 1, 2]
    assert captions[0].start == 0
    assert all(a.end == b.start for a, b in itertools.pairwise(captions))
    assert captions[-1].end == sum(len(chunk.samples) for chunk in chunks)
    for caption in captions:
        own = [len(chunk.samples) for chunk in chunks if chunk.segment == caption.index]
        assert sum(own) == caption.end - caption.start > 0
        assert caption.rate == speaking_tts.sample_rate


def test_speak_writes_captions_that_end_where_the_audio_ends(speaking_dir, tmp_path):
    out, captions = tmp_path / "a.wav", tmp_path / "a.srt"
    done = run(
        "speak", TEXT, "--model", str(speaking_dir), "-o", str(out),
        "--captions", str(captions), "--max-new-tokens", "4", "--seed", "2",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"wrote {captions}: 3 captions" in done.stdout
    samples, rate = soundfile.read(out)
    cues = re.findall(
        r"(\d\d):(\d\d):(\d\d),(\d{3}) --> (\d\d):(\d\d):(\d\d),(\d{3})",
        captions.read_text(),
    )
    assert len(cues) == 3
    last_end = np.array(cues[-1][4:], dtype=int) @ [3600_000, 60_000, 1000, 1]
    assert last_end == len(samples) * 1000 // rate
    assert "How are you today?" in captions.read_text()


def test_speak_refuses_a_captions_file_it_cannot_write_before_loading(tmp_path):
    done = run(
        "speak", "Hi.", "--captions", str(tmp_path / "a.txt"), "-o", str(tmp_path / "a.wav")
    )
    assert done.returncode == 1 and "name a .vtt or .srt file" in done.stderr
