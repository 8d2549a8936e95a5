"""``bench/kernel_count.py``: kernels and host waits per frame, ours beside
mlx-audio's, counted as MLX's CPU backend runs them and as a GPU does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
STREAMED = "our streamed frame (8 to 40)"
THEIRS = "mlx-audio's frame with its decode"


def _counted(checkpoint: Path, out: Path, *flags: str) -> dict:
    command = [sys.executable, str(ROOT / "bench" / "kernel_count.py"), str(checkpoint)]
    finished = subprocess.run(
        [*command, *flags, "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT / "bench",
    )
    assert finished.returncode == 0, finished.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def on_the_cpu(speaking_dir, tmp_path_factory) -> dict:
    return _counted(speaking_dir, tmp_path_factory.mktemp("count") / "cpu.json")


@pytest.fixture(scope="module")
def as_on_a_gpu(speaking_dir, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("count") / "gpu.json"
    return _counted(speaking_dir, out, "--as-on-a-gpu")


def test_a_streamed_frame_waits_once_and_costs_less_than_mlx_audios(on_the_cpu):
    rows = on_the_cpu["rows"]
    assert rows[STREAMED]["frames"] == 32
    assert rows["our greedy step"]["syncs"] == 1.0
    # one wait a frame, for its stop choice, which a later chunk's decode shares
    assert rows[STREAMED]["syncs"] == 1.0
    assert rows[STREAMED]["computing"] < rows[THEIRS]["computing"]
    assert on_the_cpu["ratio"] == pytest.approx(
        rows[STREAMED]["computing"] / rows[THEIRS]["computing"]
    )


def test_as_on_a_gpu_each_fast_operation_is_one_node(on_the_cpu, as_on_a_gpu):
    """The tiny checkpoint's step has 2 global layers and 1 local layer over
    5 positions. Its 20 layer norms are, on the CPU, 5 nodes each inside a
    compiled piece (19 of them) and 11 outside (the global ``ln_f``); its 7
    attentions 4 nodes each. As on a GPU each is one node, and one node a
    frame keeps the request going."""
    cpu, gpu = on_the_cpu["rows"], as_on_a_gpu["rows"]
    assert as_on_a_gpu["as_on_a_gpu"] and not on_the_cpu["as_on_a_gpu"]
    assert gpu[STREAMED]["frames"] == 32  # the request went on, whatever it computed
    saved = cpu["our greedy step"]["computing"] - gpu["our greedy step"]["computing"]
    assert saved == 19 * (5 - 1) + (11 - 1) + 7 * (4 - 1) - 1
    assert gpu["our greedy step"]["syncs"] == 1.0
    assert gpu[STREAMED]["computing"] < gpu[THEIRS]["computing"]
