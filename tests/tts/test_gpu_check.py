"""``bench/gpu_check.py``, the check to run on a GPU, runs here on the CPU
(the tiny checkpoint) and reports what it promises, so it is ready when a
GPU is."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .test_parity import FAST_MAX_ABS

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_check_runs_on_the_cpu_and_finds_parity(speaking_dir, tmp_path):
    out = tmp_path / "check.json"
    command = [
        sys.executable,
        str(ROOT / "bench" / "gpu_check.py"),
        str(speaking_dir),
        *("--frames", "10", "--steady", "6", "12", "--repeats", "1"),
        *("--concurrency", "3", "--json", str(out)),
    ]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr[-3000:]
    results = json.loads(out.read_text())

    assert results["backend"] == "mlx"
    assert results["device"]["default_device"] == "Device(cpu, 0)"
    assert results["code_parity"] == {
        "greedy": {"equal": True, "frames": 10},
        "seeded": {"equal": True, "frames": 10},
    }
    assert results["alone_vs_batched"] == {"equal": True, "frames": 10}
    audio = results["audio_parity"]
    assert audio["equal_length"] and audio["max_abs_difference"] <= FAST_MAX_ABS
    assert results["frame_cost"]["syncs"] == 1.0
    assert results["frame_cost"]["computing"] > 0
    speed = results["speed"]
    assert speed["steady_ms_per_frame_ours"] > 0 and speed["first_audio_s"] > 0
    assert results["many_streams"]["streams"] == 3
    assert results["many_over_one"] > 0
