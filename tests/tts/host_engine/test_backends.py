"""Choosing what runs a model: ``MLX_SPEECH_BACKEND``, ``--backend``,
``load(backend=)``; what ``tts.backend``, ``/health`` and the log say."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading

import httpx
import mlx.core as mx
import pytest

import mlx_speech
from mlx_speech import backends
from mlx_speech.engine import shared_engine
from mlx_speech.errors import ModelLoadError
from mlx_speech.families.moss_nano.codec import MlxDecoder
from mlx_speech.families.moss_nano.codec_math import fast_by_default
from mlx_speech.families.moss_nano.loop import MlxFrameStep
from mlx_speech.host_engine import blas, library
from mlx_speech.server import ServerSettings
from tests.tts.support import cli
from tests.tts.support.server import RunningServer


def _parts(tts):
    service = tts._service
    return service._batch._stepper, service._decodes._decoder


def test_the_mlx_backend_runs_every_part_through_mlx(speaking_dir, monkeypatch, caplog):
    monkeypatch.setenv("MLX_SPEECH_BACKEND", "mlx")
    with caplog.at_level(logging.INFO, logger="mlx_speech.engine"):
        tts = mlx_speech.load(speaking_dir)
    assert (tts.backend, tts.device) == ("mlx", "cpu")
    stepper, decoder = _parts(tts)
    assert isinstance(stepper, MlxFrameStep) and isinstance(decoder, MlxDecoder)
    assert tts._service._ops.gelu_tanh is None  # no C activation inside MLX's graph
    assert "backend: mlx (asked for), device: cpu" in caplog.text
    assert len(tts.speak("Hello.", max_new_tokens=3).samples) > 0


def test_the_argument_wins_over_the_variable(speaking_dir, monkeypatch):
    monkeypatch.setenv("MLX_SPEECH_BACKEND", "host")
    assert mlx_speech.load(speaking_dir, backend="mlx").backend == "mlx"


@pytest.mark.parametrize("where", ["argument", "variable"])
def test_an_unknown_backend_is_refused_before_loading(speaking_dir, monkeypatch, where):
    if where == "variable":
        monkeypatch.setenv("MLX_SPEECH_BACKEND", "cuda")
        with pytest.raises(ValueError, match="MLX_SPEECH_BACKEND must be one of auto"):
            mlx_speech.load(speaking_dir)
    else:
        with pytest.raises(ValueError, match="backend must be one of auto, mlx, host"):
            mlx_speech.load(speaking_dir, backend="cuda")


def test_auto_takes_the_host_engine_where_it_runs(speaking_dir, caplog):
    try:
        shared_engine().call(library.exact_activations)
    except library.Unavailable as why:
        pytest.skip(f"the host engine cannot run here: {why}")
    with caplog.at_level(logging.INFO, logger="mlx_speech.engine"):
        tts = mlx_speech.load(speaking_dir)
    assert tts.backend == "host"
    assert "backend: host (it runs here), device: cpu" in caplog.text
    assert "MOSS-TTS-Nano on the host backend:" in caplog.text


@pytest.fixture
def no_host_engine(monkeypatch):
    """As where the C library cannot be built."""
    monkeypatch.setattr(library, "_loaded", [library.Unavailable("no C compiler found")])


def test_auto_falls_back_to_mlx_and_says_why(speaking_dir, no_host_engine, caplog):
    with caplog.at_level(logging.INFO, logger="mlx_speech.engine"):
        tts = mlx_speech.load(speaking_dir)
    assert tts.backend == "mlx"
    why = "the host engine cannot run here: no C compiler found"
    assert f"backend: mlx ({why})" in caplog.text
    assert tts.backend_reason == why  # what speak prints beside the backend


def test_asking_for_the_host_where_it_cannot_run_is_an_error(speaking_dir, no_host_engine):
    with pytest.raises(ModelLoadError, match="host backend cannot run here: no C compiler"):
        mlx_speech.load(speaking_dir, backend="host")


def test_the_host_backend_serves_nano_only(qwen3_dirs):
    with pytest.raises(ModelLoadError, match="runs MOSS-TTS-Nano only.*use the mlx"):
        mlx_speech.load(qwen3_dirs["custom_voice"], backend="host")
    assert mlx_speech.load(qwen3_dirs["custom_voice"]).backend == "mlx"


def test_health_names_the_backend_and_device(speaking_dir):
    settings = ServerSettings(model=str(speaking_dir), backend="mlx")
    with RunningServer(settings) as server:
        health = httpx.get(f"{server.url}/health").json()
    assert health == {
        "status": "ok",
        "model": speaking_dir.name,
        "backend": "mlx",
        "device": "cpu",
        "listeners": {"http": "serving"},
    }


def test_the_cli_takes_backend_and_says_which_ran(speaking_dir, tmp_path):
    out = tmp_path / "hi.wav"
    result = cli.run(
        "speak", "Hi.", "--model", str(speaking_dir), "--backend", "mlx",
        "--max-new-tokens", "2", "-o", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "backend: mlx (asked for) on cpu" in result.stdout
    refused = cli.run("speak", "Hi.", "--backend", "metal")
    assert refused.returncode == 2 and "invalid choice: 'metal'" in refused.stderr


def test_decoding_defaults_to_exact_math_on_a_gpu(monkeypatch):
    """The fast codec math exists for MLX's CPU backend (element-wise erf
    and exp); a GPU computes MLX's own in its kernels."""
    assert fast_by_default()
    monkeypatch.setattr(mx, "default_device", lambda: mx.Device(mx.gpu))
    assert not fast_by_default()
    monkeypatch.setattr(mx, "default_device", lambda: mx.Device(mx.cpu))
    monkeypatch.setenv("MLX_SPEECH_EXACT", "1")
    assert not fast_by_default()


# In a fresh Python: which BLAS MLX's products run on, once mlx_speech (or
# MLX, "mlx first") is imported. OpenBLAS's own product, called directly,
# equals MLX's only where MLX runs on it (the reference BLAS sums otherwise).
WHICH_BLAS = """
import ctypes, json, logging, sys
if sys.argv[2] == "mlx first":
    import mlx.core
import mlx_speech
import mlx.core as mx
import numpy as np
from mlx_speech.host_engine.blas import OPENBLAS_LIBRARIES, loaded_openblas
logging.basicConfig()
mapped = loaded_openblas()
mlx_speech.load(sys.argv[1])  # which warns where MLX is not on OpenBLAS
rng = np.random.default_rng(0)
a = rng.standard_normal((64, 4096), dtype=np.float32)
b = rng.standard_normal((4096, 64), dtype=np.float32)
theirs = np.zeros((64, 64), np.float32)
openblas = ctypes.CDLL(OPENBLAS_LIBRARIES[0])
one, zero, to = ctypes.c_float(1.0), ctypes.c_float(0.0), ctypes.c_void_p
openblas.cblas_sgemm(101, 111, 111, 64, 64, 4096, one, to(a.ctypes.data), 4096,
                     to(b.ctypes.data), 64, zero, to(theirs.ctypes.data), 64)
same = bool(np.array_equal(np.array(mx.array(a) @ mx.array(b)), theirs))
print(json.dumps({"mapped": mapped, "same": same}))
"""


@pytest.mark.skipif(
    sys.platform != "linux" or not os.path.exists(blas.OPENBLAS_LIBRARIES[0]),
    reason="the system OpenBLAS of Linux",
)
@pytest.mark.parametrize("order", ["mlx_speech first", "mlx first"])
def test_importing_mlx_speech_puts_mlx_on_openblas_without_ld_preload(speaking_dir, order):
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    result = subprocess.run(
        [sys.executable, "-c", WHICH_BLAS, str(speaking_dir), order],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    brought = order == "mlx_speech first"
    assert found["same"] == brought
    assert (found["mapped"] is not None) == brought  # the library, by its real path
    warned = "import mlx_speech before mlx (and mlx_lm)" in result.stderr
    assert warned != brought


def test_metal_keeps_its_recommended_working_set_wired(monkeypatch):
    """What mlx-lm does on a Mac, reasoned from here: a device naming a
    recommended working set gets it as MLX's wired limit; a CPU names none."""
    assert backends.keep_weights_wired.__wrapped__() is None  # this CPU
    limits = []
    monkeypatch.setattr(mx, "device_info", lambda: {"max_recommended_working_set_size": 7})
    monkeypatch.setattr(mx, "set_wired_limit", limits.append)
    assert backends.keep_weights_wired.__wrapped__() == 7
    assert limits == [7]


def test_the_wired_limit_is_set_on_the_worker_as_a_model_loads(speaking_dir, monkeypatch):
    threads = []
    record = lambda: threads.append(threading.current_thread())  # noqa: E731
    monkeypatch.setattr(mlx_speech.loading, "keep_weights_wired", record)
    mlx_speech.load(speaking_dir)
    assert threads == [shared_engine()._thread]
