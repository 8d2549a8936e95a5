"""``examples/speak_while_chatting.py``: mlx-lm and mlx-speech in one process,
with a tiny random chat model built here (no download)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import soundfile

from mlx_speech.testing.lm_checkpoint import build_lm_checkpoint

pytestmark = pytest.mark.slow  # the example in a subprocess, beside a chat model

pytest.importorskip("mlx_lm")

EXAMPLE = Path(__file__).parents[3] / "examples" / "speak_while_chatting.py"


def test_the_chat_example_speaks_the_answer_as_it_is_written(speaking_dir, tmp_path):
    chat_model = build_lm_checkpoint(tmp_path / "chat")
    out = tmp_path / "answer.wav"
    command = [sys.executable, str(EXAMPLE), "Hello.", "--chat-model", str(chat_model)]
    command += ["--speech-model", str(speaking_dir), "--max-tokens", "40", "-o", str(out)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert "Stream" not in result.stderr  # no "There is no Stream(...) in current thread"
    assert "first audio" in result.stdout
    samples, rate = soundfile.read(out)
    assert rate == 48000 and len(samples) > 0
