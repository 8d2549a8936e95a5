"""A lone request's frame on the host (``lone_row``): MLX's codes, and a job
moves between the host and a batch without its codes noticing."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from mlx_audio.tts.utils import load_model

from mlx_speech.families.moss_nano.lone_row import LoneRowModel, lone_row_model
from mlx_speech.families.moss_nano.loop import FrameJob, FrameSampling, step
from mlx_speech.families.moss_nano.loop import frames as loop_frames
from mlx_speech.families.moss_nano.sampling import (
    GREEDY_HEAD,
    HeadSampler,
    KeySequence,
    _filtered_draw,
)
from mlx_speech.families.moss_nano.service import TEXT_HEAD

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or not (os.environ.get("CC") or shutil.which("cc")),
    reason="the host step needs the C library (Linux, a C compiler)",
)

SAMPLED = HeadSampler(0.8, 25, 0.95)


@pytest.fixture(scope="module")
def model(speaking_dir):
    return load_model(Path(speaking_dir))


@pytest.fixture(scope="module")
def lone(model) -> LoneRowModel:
    found = lone_row_model(model)
    assert found is not None, "the host step should pass its check on MLX's own BLAS"
    return found


def _prompt(model, text: str = "Hello there, how are you?"):
    return model.build_inference_input_ids(
        text=text, tokenizer=model.tokenizer, mode="continuation"
    )[0]


def _sampling(text: HeadSampler, audio: HeadSampler, frames: int) -> FrameSampling:
    return FrameSampling(text=text, audio=audio, repetition_penalty=1.2, max_frames=frames)


def _job(model, text: HeadSampler, audio: HeadSampler, frames: int, seed: int = 5):
    return FrameJob(
        model, _prompt(model), _sampling(text, audio, frames), KeySequence(seed)
    )


def _codes(model, lone, text, audio, frames: int, seed: int = 5) -> list[list[int]]:
    sampling = _sampling(text, audio, frames)
    found = loop_frames(model, _prompt(model), sampling, KeySequence(seed), lone=lone)
    return [frame.tolist() for frame in found]


@pytest.mark.parametrize(
    ("text", "audio"),
    [(GREEDY_HEAD, GREEDY_HEAD), (TEXT_HEAD, GREEDY_HEAD), (TEXT_HEAD, SAMPLED)],
    ids=["greedy", "sampled-stop-head", "sampled"],
)
def test_lone_codes_equal_mlxs(model, lone, text, audio):
    theirs = _codes(model, None, text, audio, 24)
    assert len(theirs) == 24
    assert _codes(model, lone, text, audio, 24) == theirs


def test_stop_frame_is_unchanged(stopping_dir):
    stopping = load_model(Path(stopping_dir))
    lone = lone_row_model(stopping)
    theirs = _codes(stopping, None, TEXT_HEAD, SAMPLED, 200, seed=2)
    assert 0 < len(theirs) < 200
    ours = _codes(stopping, lone, TEXT_HEAD, SAMPLED, 200, seed=2)
    assert ours == theirs


def test_a_job_joins_a_batch_and_leaves_it_unchanged(model, lone):
    """Alone (host), then beside another job (MLX, caches handed back), then
    alone again (host, caches taken over): both jobs' codes are their own."""
    alone = _codes(model, lone, GREEDY_HEAD, GREEDY_HEAD, 20)
    other_alone = _codes(model, lone, TEXT_HEAD, SAMPLED, 8, seed=9)
    job, other = (
        _job(model, GREEDY_HEAD, GREEDY_HEAD, 20),
        _job(model, TEXT_HEAD, SAMPLED, 8, seed=9),
    )
    codes, other_codes = [], []
    for frame in range(20):
        group = [job, other] if 5 <= frame < 13 else [job]
        step(model, group, lone)
        codes.append(job.frame.tolist())
        if other in group:
            other_codes.append(other.frame.tolist())
    assert codes == alone
    assert other.done and other.host is None  # its frames ran in the batch
    assert other_codes == other_alone


def test_reference_mode_takes_mlxs_products(model, monkeypatch):
    monkeypatch.setenv("MLX_SPEECH_EXACT", "1")
    exact = lone_row_model(model)
    assert exact is not None and not exact.fast
    theirs = _codes(model, None, TEXT_HEAD, SAMPLED, 12)
    assert _codes(model, exact, TEXT_HEAD, SAMPLED, 12) == theirs


@pytest.mark.parametrize(
    "sampler", [SAMPLED, HeadSampler(1.0, 3, 1.0)], ids=["default", "k3"]
)
def test_host_draws_equal_mlxs_even_with_a_tie_at_the_top_k_boundary(lone, sampler):
    generator = np.random.default_rng(8)
    for row in range(30):
        logits = generator.standard_normal(1024).astype(np.float32)
        if row % 2:  # the k-th and the next largest equal: MLX's partition decides
            order = np.argsort(-logits)
            logits[order[sampler.top_k]] = logits[order[sampler.top_k - 1]]
        uniform = float(np.float32(generator.random()))
        theirs = _filtered_draw(mx.array(logits[None]), mx.array([[uniform]]), sampler)
        assert lone._kernels.draw(logits, sampler, uniform) == theirs.item()


@pytest.mark.parametrize("broken", ["product", "draw"])
def test_a_host_step_that_differs_from_mlx_anywhere_is_not_used(model, monkeypatch, broken):
    """One product a ulp off, or one draw a token off: frames stay in MLX."""
    from mlx_speech.families.moss_nano import lone_row

    honest = getattr(lone_row._Kernels, broken)

    def off(self, *arguments, **keywords):
        result = honest(self, *arguments, **keywords)
        if broken == "draw":
            return result + 1
        return np.nextafter(result, np.float32(np.inf))

    monkeypatch.setattr(lone_row._Kernels, broken, off)
    assert lone_row_model(model) is None
