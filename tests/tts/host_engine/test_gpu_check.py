"""``bench/gpu_check.py``, the check to run on a GPU, runs here on the CPU
(the tiny checkpoint) and reports what it promises, so it is ready when a
GPU is."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from tests.tts.families.test_parity import FAST_MAX_ABS

ROOT = Path(__file__).resolve().parents[3]


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
    assert results["frame_cost"]["host_build_ms"] > 0
    streamed = results["streamed_frame_cost"]
    assert streamed["frames"] == 32 and streamed["computing"] > 0
    assert streamed["syncs"] == 1.0
    speed = results["speed"]
    assert speed["steady_ms_per_frame_ours"] > 0 and speed["first_audio_s"] > 0
    assert results["many_streams"]["streams"] == 3
    assert results["many_over_one"] > 0


def test_graph_cost_counts_what_each_evaluation_runs(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import mlx.core as mx
    from graph_cost import BuildTime, GraphCost

    a, b = mx.array([1.0, 2.0]), mx.array([3.0, 4.0])
    mx.eval(a, b)
    originals = (mx.eval, mx.async_eval, mx.array.tolist)
    with GraphCost() as cost:
        total = ((a + b) * a).reshape(2, 1)
        mx.async_eval(total)
        assert total.tolist() == [[4.0], [12.0]]
    assert cost.by_primitive == {"Add": 1, "Multiply": 1, "Reshape": 1}
    assert (cost.computing, cost.syncs) == (2, 1)  # the reshape is a view

    with GraphCost() as reads:
        assert total.tolist() == [[4.0], [12.0]]  # computed already: no wait
        mx.eval(total)
        doubled = total * 2
        mx.async_eval(doubled)
        mx.eval(a)  # nothing of its own, but the device runs what was queued first
        assert doubled.tolist() == [[8.0], [24.0]]
    assert (reads.computing, reads.syncs) == (1, 1)
    assert (mx.eval, mx.async_eval, mx.array.tolist) == originals

    with BuildTime() as build:
        build.start()
        time.sleep(0.02)
        mx.async_eval(a * b)
        mx.eval(a - b)  # not after a start: not timed
    assert len(build.seconds) == 1 and build.seconds[0] >= 0.02
    assert (mx.eval, mx.async_eval) == originals[:2]
