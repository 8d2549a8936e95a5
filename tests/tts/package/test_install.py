"""The host engine's C library is built at install (``setup.py``), and a
failed build leaves an installable package whose MLX backend works."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest
from setuptools import Distribution

import mlx_speech

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the library is built on Linux only"
)


def test_a_build_that_fails_is_skipped_and_mlx_still_runs(
    tmp_path, monkeypatch, speaking_dir
):
    monkeypatch.chdir(ROOT)
    (extension,) = runpy.run_path("setup.py")["host_engine_extensions"]()
    assert extension.name == "mlx_speech.host_engine._nano_kernels"
    monkeypatch.setenv("CC", "false")  # a compiler that fails
    distribution = Distribution({"name": "mlx-speech-server", "ext_modules": [extension]})
    build = distribution.get_command_obj("build_ext")
    build.build_lib, build.build_temp = str(tmp_path / "lib"), str(tmp_path / "temp")
    distribution.run_command("build_ext")  # no exception: the extension is optional
    assert not list((tmp_path / "lib").rglob("_nano_kernels*"))
    assert mlx_speech.load(speaking_dir, backend="mlx").backend == "mlx"
