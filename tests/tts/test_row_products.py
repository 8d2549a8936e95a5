"""A lone request's products through the BLAS's sgemv: the same products, and
the same greedy codes, as MLX's."""

from __future__ import annotations

import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from mlx_audio.tts.utils import load_model

from mlx_speech.blas import loaded_openblas
from mlx_speech.families.moss_nano.blocks import linear
from mlx_speech.families.moss_nano.loop import FrameJob, FrameSampling, step
from mlx_speech.families.moss_nano.row_products import RowProducts, row_products
from mlx_speech.families.moss_nano.sampling import HeadSampler, KeySequence
from mlx_speech.families.moss_nano.service import TEXT_HEAD


def _libraries() -> list[str]:
    """The mlx-cpu wheel's BLAS (what MLX runs on here) and, when installed,
    the system OpenBLAS (what the fast path uses)."""
    if sys.platform != "linux":
        return []
    wheel_libs = Path(mx.__file__).resolve().parent.parent / "mlx_cpu.libs"
    found = [str(path) for path in sorted(wheel_libs.glob("libblas*.so*"))]
    system = Path("/usr/lib/x86_64-linux-gnu/libopenblas.so.0")
    return found + ([str(system)] if system.exists() else [])


pytestmark = pytest.mark.skipif(not _libraries(), reason="needs a Linux BLAS library")


@pytest.fixture(scope="module", params=_libraries(), ids=lambda path: Path(path).name)
def products(request) -> RowProducts:
    return RowProducts(request.param)


@pytest.fixture(scope="module")
def model(speaking_dir):
    return load_model(Path(speaking_dir))


@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("shape", [(1, 1, 48), (1, 48)], ids=["3d", "2d"])
def test_one_row_product_equals_mlx(products, with_bias, shape):
    key_x, key_w, key_b = mx.random.split(mx.random.key(3), 3)
    x = mx.random.normal(shape, key=key_x)
    weight = mx.random.normal((80, 48), key=key_w)
    bias = mx.random.normal((80,), key=key_b) if with_bias else None
    ours = products(x, weight, bias)
    assert ours.shape == (*shape[:-1], 80)
    assert ours.dtype == mx.float32
    np.testing.assert_allclose(
        np.asarray(ours), np.asarray(linear(x, weight, bias)), rtol=1e-5, atol=1e-5
    )


GREEDY = HeadSampler(0.0, 0, 1.0)


def _greedy_codes(
    model, prompt, products, frames: int = 24, text: HeadSampler = GREEDY
) -> list[list[int]]:
    """Greedy audio codes until ``text`` (the stop head's sampler) stops."""
    sampling = FrameSampling(
        text=text,
        audio=GREEDY,
        repetition_penalty=1.2,
        max_frames=frames,
    )
    job = FrameJob(model, prompt, sampling, KeySequence(0))
    codes = []
    while not job.done:
        step(model, [job], products)
        if not job.stopped:
            codes.append(job.frame.tolist())
    return codes


def test_lone_job_codes_are_unchanged(model, products):
    """The stop head samples, so the job takes the single-row products."""
    prompt, _ = model.build_inference_input_ids(
        text="Hello there, how are you?", tokenizer=model.tokenizer, mode="continuation"
    )
    exact = _greedy_codes(model, prompt, None, text=TEXT_HEAD)
    assert len(exact) == 24
    assert _greedy_codes(model, prompt, products, text=TEXT_HEAD) == exact


def test_a_greedy_job_alone_keeps_mlxs_products(model, products):
    """So its codes are the ones it gets beside others, whatever the BLAS."""
    calls = []

    def counted(*arguments):
        calls.append(1)
        return products(*arguments)

    prompt, _ = model.build_inference_input_ids(
        text="Hello.", tokenizer=model.tokenizer, mode="continuation"
    )
    _greedy_codes(model, prompt, counted, frames=3)
    assert calls == []
    _greedy_codes(model, prompt, counted, frames=3, text=TEXT_HEAD)
    assert calls


def test_stop_frame_is_unchanged(stopping_dir, products):
    stopping = load_model(Path(stopping_dir))
    prompt, _ = stopping.build_inference_input_ids(
        text="Hello there, how are you?", tokenizer=stopping.tokenizer, mode="continuation"
    )
    exact = _greedy_codes(stopping, prompt, None, frames=200, text=TEXT_HEAD)
    assert 0 < len(exact) < 200
    assert _greedy_codes(stopping, prompt, products, frames=200, text=TEXT_HEAD) == exact


def test_reference_mode_and_missing_openblas_turn_it_off(model, monkeypatch):
    if loaded_openblas() is None:
        assert row_products(model) is None
    else:
        assert isinstance(row_products(model), RowProducts)
    monkeypatch.setenv("MLX_SPEECH_EXACT", "1")
    assert row_products(model) is None
