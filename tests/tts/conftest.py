"""Session fixtures: tiny random checkpoints of every family, built once and
loaded through the real registry and worker.

The modules in ``TWO_LANES`` run their MOSS-TTS-Nano tests on both
backends: ``mlx`` (what a Mac runs, minus Metal's kernels) and ``host`` (the
Linux host engine, skipped where it cannot run). Their tests take the
``nano_backend`` fixture, directly or through the Nano fixtures below; other
modules load with ``auto``.
"""

from __future__ import annotations

# MLX first, so that mlx_speech leaves it on the mlx-cpu wheel's reference
# BLAS: the suite's exactness tests hold its one order of sums (OpenBLAS
# switches kernels with the rows; docs/speech/families.md, "Batching").
import mlx.core  # noqa: F401, I001

# isort: split
from pathlib import Path

import numpy as np
import pytest
import soundfile

import mlx_speech
from mlx_speech.engine import shared_engine
from mlx_speech.testing.nano_checkpoint import build_nano_checkpoint
from mlx_speech.testing.qwen3_checkpoint import build_qwen3_checkpoint
from mlx_speech.testing.voxcpm2_checkpoint import build_voxcpm2_checkpoint

LANES = ("host", "mlx")
TWO_LANES = {
    "test_parity",
    "test_batching",
    "test_streaming",
    "test_server",
    "test_text_stream",
    "test_hostile_inputs",
    "test_page",
    "test_client_patterns",
    "test_speech_socket",
    "test_batch_endpoint",
    "test_chunk_release",
    "test_empty_answers",
    "test_threads",
}


def pytest_generate_tests(metafunc):
    module = metafunc.module.__name__.rsplit(".", 1)[-1]
    if "nano_backend" in metafunc.fixturenames and module in TWO_LANES:
        metafunc.parametrize("nano_backend", LANES, indirect=True, scope="session")


@pytest.fixture(scope="session")
def nano_backend(request) -> str:
    """The backend a test's Nano models load with (``mlx_speech.backends``)."""
    backend = getattr(request, "param", "auto")
    if backend == "host":
        from mlx_speech.host_engine.engine import Unavailable, open_host_engine

        try:
            shared_engine().call(open_host_engine)
        except Unavailable as why:
            pytest.skip(f"the host engine cannot run here: {why}")
    return backend


@pytest.fixture(scope="session")
def speaking_dir(tmp_path_factory) -> Path:
    """Speaks until the frame budget."""
    return build_nano_checkpoint(tmp_path_factory.mktemp("nano-speaking"), seed=0)


@pytest.fixture(scope="session")
def stopping_dir(tmp_path_factory) -> Path:
    """Stops by itself after a varying number of frames when sampling."""
    return build_nano_checkpoint(
        tmp_path_factory.mktemp("nano-stopping"), stops=True, seed=0
    )


@pytest.fixture(scope="session")
def speaking_tts(speaking_dir, nano_backend) -> mlx_speech.TTS:
    return mlx_speech.load(speaking_dir, backend=nano_backend)


@pytest.fixture(scope="session")
def stopping_tts(stopping_dir, nano_backend) -> mlx_speech.TTS:
    return mlx_speech.load(stopping_dir, backend=nano_backend)


@pytest.fixture(scope="session")
def exact_speaking_tts(speaking_dir, nano_backend) -> mlx_speech.TTS:
    """Loaded with ``MLX_SPEECH_EXACT=1``: mlx-audio's numbers everywhere."""
    return _load_exact(speaking_dir, nano_backend)


@pytest.fixture(scope="session")
def exact_stopping_tts(stopping_dir, nano_backend) -> mlx_speech.TTS:
    return _load_exact(stopping_dir, nano_backend)


def _load_exact(model_dir: Path, backend: str) -> mlx_speech.TTS:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLX_SPEECH_EXACT", "1")
        return mlx_speech.load(model_dir, backend=backend)


@pytest.fixture(scope="session")
def reference_clip(tmp_path_factory) -> Path:
    """1.3 s of stereo 44.1 kHz audio: exercises resampling and channel handling."""
    rate = 44100
    t = np.arange(int(1.3 * rate)) / rate
    rng = np.random.default_rng(0)
    left = 0.3 * np.sin(2 * np.pi * 220 * t) + 0.05 * rng.standard_normal(t.size)
    right = 0.3 * np.sin(2 * np.pi * 330 * t) + 0.05 * rng.standard_normal(t.size)
    path = tmp_path_factory.mktemp("clips") / "reference.wav"
    soundfile.write(path, np.stack([left, right], axis=1), rate, subtype="PCM_16")
    return path


@pytest.fixture(scope="session")
def qwen3_dirs(tmp_path_factory) -> dict[str, Path]:
    """One Qwen3-TTS checkpoint per kind; "base" can clone (it has the encoder)."""
    return {
        kind: build_qwen3_checkpoint(tmp_path_factory.mktemp(f"qwen3-{kind}"), kind)
        for kind in ("custom_voice", "voice_design", "base")
    }


@pytest.fixture(scope="session")
def qwen3_tts(qwen3_dirs) -> dict[str, mlx_speech.TTS]:
    return {kind: mlx_speech.load(path) for kind, path in qwen3_dirs.items()}


@pytest.fixture(scope="session")
def voxcpm2_dir(tmp_path_factory) -> Path:
    """Speaks to the patch budget."""
    return build_voxcpm2_checkpoint(tmp_path_factory.mktemp("voxcpm2"))


@pytest.fixture(scope="session")
def voxcpm2_tts(voxcpm2_dir) -> mlx_speech.TTS:
    return mlx_speech.load(voxcpm2_dir)
