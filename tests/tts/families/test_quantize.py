"""Quantized MOSS-TTS-Nano (``quantize=8|4``, ``--quantize``): the blocks'
linear layers are quantized as they load, and our loop then gives exactly the
codes mlx-audio's own loop gives on the same quantized model, alone and
batched; everything else stays as it was."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
import soundfile
from mlx_audio.tts.utils import load_model

import mlx_speech
from mlx_speech.families.moss_nano.quantize import quantize_transformers
from mlx_speech.server import ServerSettings
from mlx_speech.testing.nano_checkpoint import NanoSize, build_nano_checkpoint
from tests.tts.families.test_parity import (
    _our_codes,
    _reference_audio,
    assert_audio_matches,
)
from tests.tts.support.cli import run
from tests.tts.support.interleave import read_in_turn
from tests.tts.support.server import RunningServer, assert_speaks

# Tiny, but with block inputs a whole number of quantization groups (64).
QUANTIZABLE = NanoSize(width=64, inner=128)
TEXT = "Hello there, how are you?"


@pytest.fixture(scope="module")
def quantizable_dir(tmp_path_factory) -> Path:
    return build_nano_checkpoint(
        tmp_path_factory.mktemp("nano-quantizable"), size=QUANTIZABLE, seed=1
    )


@pytest.fixture(scope="module")
def quantized_tts(quantizable_dir) -> mlx_speech.TTS:
    return mlx_speech.load(quantizable_dir, quantize=8)


def _reference(model_dir: Path, bits: int):
    model = load_model(model_dir)
    quantize_transformers(model, bits)
    return model


def _block_linears(model) -> list[nn.Module]:
    return [
        module
        for path, module in model.named_modules()
        if path.startswith(("transformer.h.", "local_transformer.h."))
        and isinstance(module, nn.Linear | nn.QuantizedLinear)
    ]


@pytest.mark.parametrize("bits", [8, 4])
def test_every_block_linear_is_quantized_and_the_rest_stays_float(quantizable_dir, bits):
    model = _reference(quantizable_dir, bits)
    linears = _block_linears(model)
    layers = len(model.transformer.h) + len(model.local_transformer.h)
    assert len(linears) == 4 * layers  # attention in and out, MLP in and out
    assert all(isinstance(module, nn.QuantizedLinear) for module in linears)
    assert {module.bits for module in linears} == {bits}
    assert model.transformer.wte.weight.dtype == mx.float32
    assert all(table.weight.dtype == mx.float32 for table in model.audio_embeddings)


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("greedy", [True, False], ids=["greedy", "seeded"])
def test_codes_equal_mlx_audio_on_the_same_quantized_model(quantizable_dir, bits, greedy):
    reference = _reference(quantizable_dir, bits)
    prompt, _ = reference.build_inference_input_ids(
        text=TEXT, tokenizer=reference.tokenizer, mode="continuation"
    )
    ours = _our_codes(reference, prompt, greedy=greedy, seed=5, max_frames=24)
    mx.random.seed(5)
    theirs = reference.generate_audio_token_ids(
        prompt_input_ids=prompt, max_new_frames=24, do_sample=not greedy
    )
    np.testing.assert_array_equal(ours, np.asarray(theirs[0]))
    assert ours.shape[0] == 24


def test_quantized_audio_equals_mlx_audio_generate(quantized_tts, quantizable_dir):
    ours = quantized_tts.speak(TEXT, temperature=0, max_new_tokens=30).samples
    theirs = _reference_audio(_reference(quantizable_dir, 8), TEXT, max_tokens=30)
    assert_audio_matches(ours, theirs, "fast")


def test_quantized_weights_keep_the_frame_step_in_mlx(quantized_tts):
    """The host engine's frame step takes float32 weights only; with the
    host backend, a quantized model's frames run through MLX (docs:
    Backends)."""
    from mlx_speech.families.moss_nano.loop import MlxFrameStep

    assert isinstance(quantized_tts._service._batch._stepper, MlxFrameStep)


def test_quantized_requests_batched_equal_each_alone(quantized_tts):
    requests = [{"text": TEXT, "seed": seed, "max_new_tokens": 20} for seed in range(4)]
    alone = [quantized_tts.speak(**request).samples for request in requests]
    together = read_in_turn([quantized_tts.stream(**request) for request in requests])
    for expected, got in zip(alone, together, strict=True):
        np.testing.assert_allclose(got, expected, atol=1e-6)


@pytest.mark.parametrize("bits", [3, 16, 8.0, True, "8"])
def test_other_bit_counts_are_refused(quantizable_dir, bits):
    with pytest.raises(ValueError, match="quantize must be 8, 4 or None"):
        mlx_speech.load(quantizable_dir, quantize=bits)


def test_families_without_quantized_serving_refuse_it(qwen3_dirs, voxcpm2_dir):
    for model_dir, family in (
        (qwen3_dirs["custom_voice"], "Qwen3-TTS"),
        (voxcpm2_dir, "VoxCPM2"),
    ):
        with pytest.raises(mlx_speech.ModelLoadError, match=f"this one is {family}"):
            mlx_speech.load(model_dir, quantize=8)


def test_the_cli_speaks_quantized_and_refuses_other_bits(quantizable_dir, tmp_path):
    out = tmp_path / "q.wav"
    arguments = ["speak", "Hi there.", "--model", str(quantizable_dir)]
    arguments += ["--max-new-tokens", "4", "--temperature", "0", "-o", str(out)]
    spoken = run(*arguments, "--quantize", "4")
    assert spoken.returncode == 0, spoken.stderr
    assert "on a CPU: speech is slower, not faster" in spoken.stderr
    assert "not faster" not in run(*arguments).stderr
    samples, rate = soundfile.read(out)
    assert rate == 48000 and len(samples) == 4 * 960
    refused = run(*arguments, "--quantize", "5")
    assert refused.returncode == 2 and "--quantize" in refused.stderr


def test_the_server_loads_its_model_quantized_when_asked(quantizable_dir, tmp_path):
    asked = {}

    def load(model, **options):
        asked.update(options)
        return mlx_speech.load(model, **options)

    settings = ServerSettings(model=str(quantizable_dir), voices_dir=tmp_path, quantize=8)
    with RunningServer(settings, load=load) as server:
        tts = server.app.state.slot.tts
        assert asked["quantize"] == 8
        assert all(
            isinstance(m, nn.QuantizedLinear) for m in _block_linears(tts._service._model)
        )
        assert_speaks(server)
